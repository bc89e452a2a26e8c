"""C++ and Rust symbol names as their source spells them: `_ZN7QThread7startedENS_14QPrivateSignalE` is
`QThread::started(QThread::QPrivateSignal)`.

    demangle(name) -> str     the readable name; any other name (C, a kernel symbol, an address, a name
                              no demangler takes) comes back as it is, and nothing raises

Itanium C++ names (`_Z...`) go to libstdc++'s own __cxa_demangle (PyPI's cxxfilt wraps it), Rust's
(`_R...` v0, and the legacy `_ZN...17h<hash>E`) to PyPI's rust-demangler, and a legacy Rust name loses
its hash, as rustc-demangle's short form does. A compiler's clone suffix (`.cold`, `.isra.0`, `.llvm.123`)
that the demangler refuses is cut off and said after the name. Names are cached (a profile names the
same few thousand functions every interval); without the packages, names stay as they are.
"""

from __future__ import annotations

import re
from functools import lru_cache

try:
    import cxxfilt
except (ImportError, OSError):   # not installed, or no libstdc++ to load
    cxxfilt = None
try:
    import rust_demangler
except ImportError:
    rust_demangler = None

RUST_LEGACY = re.compile(r"^_ZN.*17h[0-9a-f]{16}E")
RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
MANGLED = ("_Z", "_R")


def demangle(name: str) -> str:
    return _demangled(name) if name.startswith(MANGLED) else name


@lru_cache(maxsize=1 << 14)
def _demangled(name: str) -> str:
    base, dot, suffix = name.partition(".")
    if name.startswith("_R") or RUST_LEGACY.match(name):
        text = _rust(name) or _rust(base)
        return RUST_HASH.sub("", text) if text else name
    text = _cxx(name)
    if text is None and dot:
        text = _cxx(base)
        if text is not None:
            text += f" [clone .{suffix}]"
    return text or name


def _rust(name: str) -> str | None:
    if rust_demangler is None:
        return None
    try:
        return rust_demangler.demangle(name) or None
    except Exception:  # noqa: BLE001 - its parser raises a dozen kinds (and RecursionError) on bad names
        return None


def _cxx(name: str) -> str | None:
    if cxxfilt is None:
        return None
    try:
        return cxxfilt.demangle(name) or None
    except Exception:  # noqa: BLE001 - InvalidName, or a libstdc++ that cannot be called
        return None
