"""How the controller's news reaches its owner without Qt: a Hook is a list of callables, called in
order (the controller's records, log, metric_started ... events; `connect` and `emit` as a Qt signal
has them, so the window connects the same way to the real controller and to a Qt stand-in). A Relay
carries a call from a worker's thread to the owner's: EventQueue for the headless runner, which waits
on it; gui/thread_relay.py's for the window, whose event loop runs the calls.
"""

from __future__ import annotations

import dataclasses
import queue
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

Callbacks = TypeVar("Callbacks")


class Hook:
    def __init__(self) -> None:
        self._callbacks: list[Callable[..., Any]] = []

    def connect(self, callback: Callable[..., Any]) -> None:
        self._callbacks.append(callback)

    def emit(self, *args: Any) -> None:
        for callback in list(self._callbacks):
            callback(*args)


class Relay(Protocol):
    def post(self, call: Callable[[], Any]) -> None:
        """Run `call` on the owner's thread, soon, in the order posted; callable from any thread."""

    def process(self) -> None:
        """Run what has been posted so far, now (on the owner's thread)."""


def relayed(callbacks: Callbacks, relay: Relay) -> Callbacks:
    """A dataclass of callbacks (a worker's, a command run's) whose every callback posts its call to the
    relay: it runs on the relay owner's thread, in the order the thread called them."""
    def hop(handler: Callable[..., None]) -> Callable[..., None]:
        return lambda *args: relay.post(lambda: handler(*args))

    return dataclasses.replace(callbacks, **{f.name: hop(getattr(callbacks, f.name))
                                             for f in dataclasses.fields(callbacks)})


class EventQueue:
    """A Relay for an owner with no event loop of its own: it runs the calls in wait() or process()."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()

    def post(self, call: Callable[[], Any]) -> None:
        self._calls.put(call)

    def process(self) -> None:
        for _ in range(self._calls.qsize()):     # not what is posted meanwhile: a busy worker cannot hold us
            self._calls.get_nowait()()

    def wait(self, timeout: float) -> None:
        """Sleep until a call is posted or `timeout` seconds have passed, then run what is posted."""
        try:
            call = self._calls.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return
        call()
        self.process()
