"""Loading a script's BPF C: where it lives, filters as C literals, the compiler kept quiet unless the
load fails, and the names BCC's bookkeeping gives the probes attached."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

BPF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bpf")


def c_string(text: str) -> str:
    """text as a C string literal made of octal escapes only, so no character of it (a quote, a
    backslash) can end the literal early and put code into BPF C compiled as root."""
    return '"' + "".join(f"\\{byte:03o}" for byte in text.encode()) + '"'


# perf's own names for the events a metric may attach to, by (type, config)
PERF_EVENT_NAMES = {(1, 0): "cpu-clock", (1, 1): "task-clock", (1, 2): "page-faults",
                    (1, 3): "context-switches", (1, 4): "cpu-migrations", (1, 5): "minor-faults",
                    (1, 6): "major-faults", (0, 0): "cycles", (0, 1): "instructions"}


def perf_event_name(key: Any) -> str:
    """A BPF.open_perf_events key ((type, config) or a name) as perf names it, e.g. "minor-faults"."""
    if isinstance(key, tuple):
        return PERF_EVENT_NAMES.get(tuple(key[:2]), f"perf:{key[0]}:{key[1]}")
    return text_of(key)


def text_of(value: Any) -> str:
    """A name from BCC's bookkeeping (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def quiet_load(bpf_cls: Any, path: str, cflags: list[str], show_errors: bool = True) -> Any:
    """Load a BPF program; the compiler's chatter about the fallback headers stays off the terminal
    unless the load fails, when it is shown so the user sees the real compiler error."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            return bpf_cls(src_file=path.encode(), cflags=cflags)
        except Exception:
            if not show_errors:
                raise
            os.dup2(saved, 2)
            tmp.seek(0)
            errors = [ln for ln in tmp.read().splitlines() if "error" in ln.lower()]
            for line in errors[:5]:
                print(line, file=sys.stderr)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def fdinfo_count(fd: int, field: str) -> int:
    """A counter of one of this process's fds in /proc/self/fdinfo (a BPF program's recursion_misses,
    run_cnt); 0 when the kernel does not show it."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == field:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0
