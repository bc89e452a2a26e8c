"""Hand freed heap memory back to the system every half minute.

The app allocates and frees records at a high rate on several threads. glibc keeps the freed memory of
its heaps for reuse, fragmented, so the app's RSS crept up by about 0.8 MB a minute with every metric
running though nothing it holds grows (BENCHMARKS.md, 6b). malloc_trim(0) releases the free pages
inside the heaps, not just at their top; it takes a few milliseconds, so it runs on its own daemon
thread, never on the GUI thread. Other C libraries have no malloc_trim: there it does nothing."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable

PERIOD_S = 30.0
_running: threading.Event | None = None  # one trimming thread per process, however often start() is called


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_now() -> bool:
    """Release free heap memory once; whether the C library could (1 from glibc: some was released)."""
    trim = _malloc_trim()
    return trim is not None and trim(0) in (0, 1)


def start(period_s: float = PERIOD_S) -> threading.Event | None:
    """Trim every period_s seconds until the returned event is set (or the process ends); None where
    the C library has no malloc_trim."""
    global _running
    if _running is not None and not _running.is_set():
        return _running
    trim = _malloc_trim()
    if trim is None:
        return None
    stop = _running = threading.Event()

    def loop() -> None:
        while not stop.wait(period_s):
            trim(0)

    threading.Thread(target=loop, name="heap-trim", daemon=True).start()
    return stop
