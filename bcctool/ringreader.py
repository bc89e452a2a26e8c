"""A BPF ring buffer drained on its own thread, so samples keep flowing while the script's main thread
is busy for seconds (parsing a large object's symbols or CFI the first time it is seen).

    reader = RingReader(b["samples"], on_record)   # on_record(bytes) runs on the reader thread: keep it
    reader.start()                                 # short (copy, count, append) and take a lock for what
    reader.sync()                                  # the main thread reads; sync: everything submitted
    reader.stop()                                  # until now has been handed over; stop: joins the
                                                   # thread, then drains what is left

The thread takes what has accumulated every poll_ms (50), or earlier when the BPF side sends a wakeup,
so a program may submit with BPF_RB_NO_WAKEUP when its ring holds well over poll_ms of records.

The ring is not registered with BCC (b._ringbuf_manager stays None), so the harness's wait() does not
poll it from the main thread as well: libbpf's ring consumer is not safe to run from two threads.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any


class RingReader:
    def __init__(self, table: Any, on_record: Callable[[bytes], None], poll_ms: int = 50) -> None:
        from bcc.libbcc import _RINGBUF_CB_TYPE, lib  # noqa: PLC0415 - only once BPF is loaded

        self._lib = lib
        self._on_record = on_record
        self._cb = _RINGBUF_CB_TYPE(self._callback)   # kept: the C side holds a pointer to it
        self._rb = lib.bpf_new_ringbuf(table.map_fd, self._cb, None)
        if not self._rb:
            raise OSError(f"could not open the ring buffer {table.name!r}")
        self._poll_ms = poll_ms
        self._stopping = threading.Event()
        self._synced = threading.Condition()
        self._asked = 0       # sync requests made, and served (a consume after the request)
        self._served = 0
        self._thread = threading.Thread(target=self._run, name="ring-reader", daemon=True)

    def _callback(self, _ctx: Any, data: Any, size: int) -> int:
        self._on_record(ctypes.string_at(data, size))
        return 0

    def _run(self) -> None:
        # every poll_ms, whatever has accumulated: a program that submits with BPF_RB_NO_WAKEUP costs
        # one round trip per poll, not per record
        while not self._stopping.is_set():
            if self._lib.bpf_poll_ringbuf(self._rb, self._poll_ms) < 0 and not self._stopping.is_set():
                self._stopping.wait(self._poll_ms / 1000)  # EINTR and the like: try again shortly
            with self._synced:
                asked = self._asked
            self._lib.bpf_consume_ringbuf(self._rb)
            with self._synced:
                self._served = asked
                self._synced.notify_all()

    def sync(self, timeout: float = 2.0) -> None:
        """Return once every record submitted before the call has been handed to on_record."""
        if not self._thread.is_alive():
            return
        with self._synced:
            self._asked += 1
            mine = self._asked
            self._synced.wait_for(lambda: self._served >= mine or not self._thread.is_alive(), timeout)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread and hand over what is still in the ring; the ring is freed."""
        if self._rb is None:
            return
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._lib.bpf_consume_ringbuf(self._rb)
        self._lib.bpf_free_ringbuf(self._rb)
        self._rb = None
