"""What a metric process gives back: what compiling its BPF C left behind, and its heap as it runs.

BCC compiles in-process with clang and LLVM. After the load the compiler is done, but its work stays
in the process: about 30 MB of freed heap that glibc keeps for reuse (malloc_trim returns it), and the
compiler's code pages it ran, mapped from libLLVM and libclang-cpp (30-45 MB per process, shared
between processes but counted in each one's PSS). Those pages are read-only and never written, so
MADV_DONTNEED only unmaps them: they stay in the page cache, reclaimable, and if the compiler runs
again (BCC's cleanup at exit) they fault back in from the file. Only mappings without a private
(copied-on-write) page are dropped that way; the libraries' relocated data (10 MB, private to every
process) is compressed and given back after the first interval, and put back before BCC's cleanup
(stash_compiler_data says when the compiler's code may not run).
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import functools
import os
import struct
import time
import zlib
from collections.abc import Callable

# the shared libraries of BCC's compiler, which a loaded tool no longer runs
COMPILER_LIBS = ("/libLLVM", "/libclang")
MADV_DONTNEED = 4
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # mallopt's parameters
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
PT_DYNAMIC = 2
TRIM_PERIOD_S = 0.5
KEEP = bool(os.environ.get("BCCTOOL_KEEP_COMPILER_MEMORY"))  # measuring what all this saves
_last_trim = 0.0
_stashed_once = False
_loaded = False  # this process compiled and loaded BPF (only then is the compiler's data stashed)


@functools.cache
def malloc_trim_function() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none. Looked up once: find_library runs
    ldconfig in a child process, and the heap is trimmed twice a second."""
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


def compiler_mappings(smaps: str = "/proc/self/smaps", private: bool = False) -> list[tuple[int, int, str]]:
    """(start, end, perms) of the compiler libraries' read-only mappings that hold no private page, or
    with private=True those that do (the data the dynamic loader relocated), less the page(s) of each
    library's dynamic section: the loader reads it (relocated) on every later dlopen."""
    found, current, bases = [], None, {}
    try:
        with open(smaps) as f:
            for line in f:
                first = line.split(None, 6)
                if "-" in first[0] and not first[0].endswith(":"):
                    current = None
                    path = first[5].strip() if len(first) > 5 else ""
                    if any(lib in path for lib in COMPILER_LIBS):
                        start, end = (int(x, 16) for x in first[0].split("-"))
                        if int(first[2], 16) == 0:
                            bases.setdefault(path, start)
                        if "w" not in first[1]:
                            current = (start, end, first[1], path)
                elif current and first[0] == "Anonymous:":
                    if (int(first[1]) > 0) == private:
                        found.append(current)
                    current = None
    except OSError:
        return []
    out = []
    for start, end, perms, path in found:
        keep = _dynamic_pages(path, bases.get(path)) if private else None
        if private and keep is None:
            continue  # cannot tell where the dynamic section is: leave the mapping alone
        lo, hi = keep or (end, end)
        out += [(a, b, perms) for a, b in ((start, min(end, lo)), (max(start, hi), end)) if b > a]
    return out


def _dynamic_pages(path: str, base: int | None) -> tuple[int, int] | None:
    """The page-aligned address range of a loaded library's dynamic section (PT_DYNAMIC), from its
    ELF program headers (64-bit little-endian); None when it cannot be read."""
    if base is None:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
        for i in range(phnum):
            p_type, _, _, p_vaddr, _, _, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", table, i * phentsize)
            if p_type == PT_DYNAMIC:
                page = os.sysconf("SC_PAGE_SIZE")
                lo = (base + p_vaddr) // page * page
                return lo, -(-(base + p_vaddr + p_memsz) // page) * page
    except (OSError, struct.error):
        return None
    return None


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def drop_compiler_pages() -> int:
    """Unmap the compiler's clean pages from this process (see the module doc); bytes advised."""
    libc = _libc()
    done = 0
    for start, end, _ in compiler_mappings():
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            done += end - start
    return done


# The compiler libraries' relocated data while it is stashed: (start, length, protection, zlib data)
_stash: list[tuple[int, int, int, bytes]] = []


def stash_compiler_data() -> int:
    """Compress the compiler libraries' relocated data (10 MB of pointers, written by the dynamic
    loader in every process: 1.5 MB compressed) and give its pages back. No code of those libraries
    may run until restore_compiler_data(): a loaded tool's work (map reads, perf buffers, BCC's symbol
    lookups, attaching more programs) is libbcc's and the kernel's, but BCC's module cleanup and the
    libraries' destructors at exit are the compiler's, so the data is put back first, in finish()
    and, for every other way out, at exit (atexit runs before the C library's exit). Bytes given back."""
    if _stash:
        return 0
    libc = _libc()
    given = 0
    for start, end, perms in compiler_mappings(private=True):
        packed = zlib.compress(ctypes.string_at(start, end - start), 1)
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            prot = (PROT_READ if "r" in perms else 0) | (PROT_EXEC if "x" in perms else 0)
            _stash.append((start, end - start, prot, packed))
            given += end - start - len(packed)
    if _stash:
        atexit.register(restore_compiler_data)
    return given


def restore_compiler_data() -> None:
    """Put the stashed data back where it was, byte for byte; nothing to do when none is stashed."""
    libc = _libc()
    while _stash:
        start, length, prot, packed = _stash.pop()
        libc.mprotect(start, length, PROT_READ | PROT_WRITE)
        ctypes.memmove(start, zlib.decompress(packed), length)
        libc.mprotect(start, length, prot)


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


def one_arena() -> bool:
    """Every thread allocates from the main heap. A thread's first malloc otherwise gets it an arena of
    its own (cpuprofile's ring reader: the stack copies it hands over), whose freed pages stay
    fragmented beside the main heap's: 8 MB more PSS in cpuprofile under a light load. The threads
    here take turns on the GIL anyway, so they hardly contend for the lock."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    try:
        return libc.mallopt(M_ARENA_MAX, 1) == 1
    except AttributeError:  # not glibc
        return False


def after_load() -> None:
    """Right after a load (before a metric starts its threads): the heap the compiler freed, its code
    pages, a fixed mmap threshold and one malloc arena."""
    global _last_trim, _loaded
    if KEEP:
        return
    _loaded = True
    trim_now()
    _last_trim = time.monotonic()
    drop_compiler_pages()
    mmap_large_blocks()
    one_arena()


def between_intervals() -> None:
    """After the first interval, stash the compiler's relocated data (not before: the first record
    goes out first, and every probe is attached by then). Trim the heap again, at most twice a second
    (under a millisecond each time): the compiler left the heap 30-35 MB large with a few live blocks
    spread through it; what a tool allocates later lands in its free gaps and makes their pages
    resident again, 1-2 MB in a few seconds."""
    global _last_trim, _stashed_once
    if KEEP:
        return
    if _loaded and not _stashed_once:
        _stashed_once = True
        stash_compiler_data()
    now = time.monotonic()
    if now - _last_trim < TRIM_PERIOD_S:
        return
    _last_trim = now
    trim_now()
