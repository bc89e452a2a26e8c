"""A gated command (monitor/command.py) driven from a plain thread of its own, for the window's "Run a
command" box: making its cgroup, forking it, waiting for it and removing its group all happen off the
owner's thread, which only calls release(), abort() and done() (each sets an event) and is told what
happened through callbacks (run on its own thread when handed over through a relay, as the window does
with gui/thread_relay.py). No Qt here: monitor/ runs headless too.

    spawned(cgroup) -> the owner starts the metrics on that group -> release() once each has said it
    is attached (its meta record) -> released(pid) -> the command exits -> exited(outcome) -> the owner
    stops the metrics -> done() -> the group is emptied and removed -> finished(outcome)

abort() at any point kills the command (still gated: it never runs) and ends the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from monitor.command import CommandError, GatedCommand, parse
from monitor.events import Relay, relayed

POLL_S = 0.01  # how often the thread looks for the command's exit (waitpid WNOHANG)


@dataclass(frozen=True)
class CommandCallbacks:
    """What a run reports, each called on the run's thread (or, through(relay), on the relay owner's)."""

    spawned: Callable[[str], None]       # the command's cgroup directory; it waits at the gate
    released: Callable[[int], None]      # its pid: running now
    exited: Callable[[dict], None]       # outcome(): the command has exited (its group not removed yet)
    finished: Callable[[dict], None]     # outcome(), once its group is removed; {"error": line} when it never started

    def through(self, relay: Relay) -> CommandCallbacks:
        return relayed(self, relay)


class CommandRun:
    def __init__(self, text: str, callbacks: CommandCallbacks) -> None:
        self.text = text
        self.callbacks = callbacks
        self.cgroup = ""
        self._go = threading.Event()
        self._abort = threading.Event()
        self._done = threading.Event()
        # a daemon: a run the owner forgot cannot hold the interpreter's exit (shutdown() aborts and waits)
        self.thread = threading.Thread(target=self.run, name="command-run", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run's thread to end (its group removed); True when it has."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def release(self) -> None:
        """Every metric is attached: the command may run."""
        self._go.set()

    def abort(self) -> None:
        """Stop: kill the command (or never run it) and remove its group without waiting for done()."""
        self._abort.set()
        self._done.set()

    def done(self) -> None:
        """The metrics that watched the group have stopped: it may be removed."""
        self._done.set()

    def run(self) -> None:
        report = self.callbacks
        try:
            command = GatedCommand(parse(self.text))
        except CommandError as exc:   # headless's words name its option; the window has none
            report.finished({"error": str(exc).removeprefix("--command: ").removeprefix("--command ")})
            return
        try:
            command.spawn()
        except OSError as exc:
            command.finish()
            report.finished({"error": f"cannot start the command: {exc.strerror or exc}"})
            return
        self.cgroup = command.cgroup
        try:
            report.spawned(command.cgroup)
            while not (self._go.wait(POLL_S) or self._abort.is_set()):
                pass
            if not self._abort.is_set():
                command.release()
                report.released(command.pid)
                while not command.poll() and not self._abort.wait(POLL_S):
                    pass
            if command.ended:
                report.exited(self._outcome(command))
                self._done.wait()
        finally:
            command.finish()      # kills what is left in the group (the command itself, on abort)
        report.finished(self._outcome(command))

    @staticmethod
    def _outcome(command: GatedCommand) -> dict:
        return {**command.outcome(), "exit": command.exit_status()}
