"""Hand freed heap memory back to the system every half minute.

The app allocates and frees records at a high rate on several threads. glibc keeps the freed memory of
its heaps for reuse, fragmented, so the app's RSS crept up by about 0.8 MB a minute with every metric
running though nothing it holds grows (BENCHMARKS.md, 6b). malloc_trim(0) releases the free pages
inside the heaps, not just at their top; it takes a few milliseconds, so it runs on its own daemon
thread, never on the GUI thread. Other C libraries have no malloc_trim: there it does nothing. The call
itself lives in bcctool.footprint, which metric scripts use after loading their BPF."""

from __future__ import annotations

import threading

from bcctool.footprint import malloc_trim_function, trim_now

__all__ = ["start", "trim_now"]

PERIOD_S = 30.0
_running: threading.Event | None = None  # one trimming thread per process, however often start() is called


def start(period_s: float = PERIOD_S) -> threading.Event | None:
    """Trim every period_s seconds until the returned event is set (or the process ends); None where
    the C library has no malloc_trim."""
    global _running
    if _running is not None and not _running.is_set():
        return _running
    trim = malloc_trim_function()
    if trim is None:
        return None
    stop = _running = threading.Event()

    def loop() -> None:
        while not stop.wait(period_s):
            trim(0)

    threading.Thread(target=loop, name="heap-trim", daemon=True).start()
    return stop
