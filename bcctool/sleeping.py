"""What a tool's loop sleeps on: the signal wakeup socket and the script's perf and ring buffers, in one
epoll set kept from one sleep to the next.

    sleeper = Sleeper(wake_r, drain)     # drain(): read what the signal wakeup wrote
    sleeper.serve(sources, timeout)      # sleep until a buffer has events, a signal or the timeout; read
    sleeper.close()

The set is made again only when the buffers' fds change (every metric opens its buffers before its
loop). Making it each interval cost little (about 7 us here, measured in a loop): the 0.5-1.5 ms that a
profile of a loaded metric charged to that close is the first work after a 1-s sleep on a busy CPU
(cold caches), which moves to whatever runs first."""

from __future__ import annotations

import ctypes
import selectors
import socket
from collections.abc import Callable
from typing import Any

Sources = list[tuple[int, Callable[[], None]]]   # (fd, what reads it)


def event_sources(b: Any) -> Sources:
    """(fd, what reads it) for each of a BPF object's perf buffers and its ring buffers (one epoll fd for
    all): readable when events wait, as BCC's own polls find them."""
    sources: Sources = []
    if b is None or not (b.perf_buffers or b._ringbuf_manager):
        return sources
    from bcc.libbcc import lib  # noqa: PLC0415 - only once BPF is loaded

    for reader in b.perf_buffers.values():
        sources.append((lib.perf_reader_fd(reader), b.perf_buffer_consume))
    if b._ringbuf_manager:
        lib.ring_buffer__epoll_fd.argtypes, lib.ring_buffer__epoll_fd.restype = [ctypes.c_void_p], ctypes.c_int
        sources.append((lib.ring_buffer__epoll_fd(b._ringbuf_manager), b.ring_buffer_consume))
    return sources


class Sleeper:
    def __init__(self, wake_r: socket.socket, drain: Callable[[], None]) -> None:
        self.wake_r, self.drain = wake_r, drain
        self.sel: selectors.BaseSelector | None = None
        self.fds: tuple[int, ...] | None = None

    def _selector(self, sources: Sources) -> selectors.BaseSelector:
        """The set on the signal wakeup (data None) and each source (data: what reads it), made again only
        when the sources' fds changed."""
        fds = tuple(fd for fd, _ in sources)
        if self.sel is None or fds != self.fds:
            self.close()
            self.sel, self.fds = selectors.DefaultSelector(), fds
            self.sel.register(self.wake_r, selectors.EVENT_READ, None)
            for fd, consume in sources:
                self.sel.register(fd, selectors.EVENT_READ, consume)
        return self.sel

    def serve(self, sources: Sources, timeout: float | None) -> None:
        """Sleep until a source has events, a signal came or `timeout` passed (None: no limit); read what
        is ready."""
        for consume in {key.data for key, _ in self._selector(sources).select(timeout)}:
            if consume is None:
                self.drain()
            else:
                consume()

    def close(self) -> None:
        if self.sel is not None:
            self.sel.close()
            self.sel = None
