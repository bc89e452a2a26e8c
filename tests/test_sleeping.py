"""bcctool/sleeping.py: the loop's epoll set is kept from one sleep to the next, made again when the
buffers change, and reads what is ready (a buffer's reader, or the signal wakeup's drain)."""

import socket

from bcctool.sleeping import Sleeper


def test_the_set_is_kept_across_sleeps_and_made_again_when_the_buffers_change():
    wake_r, wake_w = socket.socketpair()
    buf_r, buf_w = socket.socketpair()
    other_r, other_w = socket.socketpair()
    read, drained = [], []
    sleeper = Sleeper(wake_r, lambda: drained.append(wake_r.recv(16)))
    try:
        sources = [(buf_r.fileno(), lambda: read.append(buf_r.recv(16)))]
        sleeper.serve(sources, 0.01)          # nothing ready: the timeout
        first = sleeper.sel
        buf_w.send(b"event")
        sleeper.serve(sources, 1.0)
        assert read == [b"event"] and sleeper.sel is first
        wake_w.send(b"\x02")                  # a signal's byte on the wakeup socket
        sleeper.serve(sources, 1.0)
        assert drained == [b"\x02"] and sleeper.sel is first
        more = [*sources, (other_r.fileno(), lambda: read.append(other_r.recv(16)))]
        other_w.send(b"later")
        sleeper.serve(more, 1.0)
        assert read == [b"event", b"later"] and sleeper.sel is not first
        sleeper.close()
        assert sleeper.sel is None
    finally:
        for s in (wake_r, wake_w, buf_r, buf_w, other_r, other_w):
            s.close()
