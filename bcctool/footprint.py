"""What a metric process gives back: what compiling its BPF C left behind, and its heap as it runs.

BCC compiles in-process with clang and LLVM. After the load the compiler is done, but its work stays
in the process: about 30 MB of freed heap that glibc keeps for reuse (malloc_trim returns it), and the
compiler's code pages it ran, mapped from libLLVM and libclang-cpp (30-45 MB per process, shared
between processes but counted in each one's PSS). Those pages are read-only and never written, so
MADV_DONTNEED only unmaps them: they stay in the page cache, reclaimable, and if the compiler runs
again (BCC's cleanup at exit) they fault back in from the file. Only mappings without a private
(copied-on-write) page are dropped: the relocated data of the libraries is private and stays.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable

# the shared libraries of BCC's compiler, which a loaded tool no longer runs
COMPILER_LIBS = ("/libLLVM", "/libclang")
MADV_DONTNEED = 4
M_MMAP_THRESHOLD = -3  # mallopt's parameter
TRIM_PERIOD_S = 0.5
KEEP = bool(os.environ.get("BCCTOOL_KEEP_COMPILER_MEMORY"))  # measuring what all this saves
_last_trim = 0.0


def malloc_trim_function() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_now() -> bool:
    """Release free heap memory once (malloc_trim(0) returns the free pages inside the heap, not just
    at its top); whether the C library could."""
    trim = malloc_trim_function()
    return trim is not None and trim(0) in (0, 1)


def compiler_mappings(smaps: str = "/proc/self/smaps") -> list[tuple[int, int]]:
    """(start, end) of the compiler libraries' read-only mappings that hold no private page."""
    found, current = [], None
    try:
        with open(smaps) as f:
            for line in f:
                first = line.split(None, 6)
                if "-" in first[0] and not first[0].endswith(":"):
                    current = None
                    path = first[5].strip() if len(first) > 5 else ""
                    if "w" not in first[1] and any(lib in path for lib in COMPILER_LIBS):
                        start, end = (int(x, 16) for x in first[0].split("-"))
                        current = (start, end)
                elif current and first[0] == "Anonymous:":
                    if int(first[1]) == 0:
                        found.append(current)
                    current = None
    except OSError:
        return []
    return found


def drop_compiler_pages() -> int:
    """Unmap the compiler's clean pages from this process (see the module doc); bytes advised."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for start, end in compiler_mappings():
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            done += end - start
    return done


def mmap_large_blocks() -> bool:
    """Serve blocks of 128 KB and more with their own mmap from now on, so they go back to the
    system when freed. Reading a map in one batch takes buffers for all its max_entries (MBs for a
    per-CPU hash); by default glibc raises its threshold after the first such block is freed, and the
    following ones stay in the heap, fragmented, for the rest of the run."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    try:
        return libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1
    except AttributeError:  # not glibc
        return False


def after_load() -> None:
    """Right after a load: the heap the compiler freed, its code pages, and a fixed mmap threshold."""
    global _last_trim
    if KEEP:
        return
    trim_now()
    _last_trim = time.monotonic()
    drop_compiler_pages()
    mmap_large_blocks()


def between_intervals() -> None:
    """Trim the heap again, at most twice a second (under a millisecond each time). The compiler left
    the heap 30-35 MB large with a few live blocks spread through it; what a tool allocates later
    lands in its free gaps and makes their pages resident again, 1-2 MB in a few seconds."""
    global _last_trim
    now = time.monotonic()
    if KEEP or now - _last_trim < TRIM_PERIOD_S:
        return
    _last_trim = now
    trim_now()
