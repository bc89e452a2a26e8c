"""A gated command (monitor/command.py) driven from a thread of its own, for the window: making its
cgroup, forking it, waiting for it and removing its group all happen off the GUI thread, which only
calls release(), abort() and done() (each sets an event) and receives the signals.

    spawned(cgroup) -> the window starts the metrics on that group -> release() once each has said it
    is attached (its meta record) -> released(pid) -> the command exits -> exited(outcome) -> the window
    stops the metrics -> done() -> the group is emptied and removed -> finished(outcome)

abort() at any point kills the command (still gated: it never runs) and ends the same way.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QThread, Signal

from monitor.command import CommandError, GatedCommand, parse

POLL_S = 0.01  # how often the thread looks for the command's exit (waitpid WNOHANG)


class CommandRun(QThread):
    spawned = Signal(str)        # the command's cgroup directory; it waits at the gate
    released = Signal(int)       # its pid: running now
    exited = Signal(dict)        # outcome(): the command has exited (its group not removed yet)
    finished_run = Signal(dict)  # outcome(), once its group is removed; {"error": line} when it never started

    def __init__(self, text: str, parent=None) -> None:
        super().__init__(parent)
        self.text = text
        self.cgroup = ""
        self._go = threading.Event()
        self._abort = threading.Event()
        self._done = threading.Event()

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
        try:
            command = GatedCommand(parse(self.text))
        except CommandError as exc:   # headless's words name its option; the window has none
            self.finished_run.emit({"error": str(exc).removeprefix("--command: ").removeprefix("--command ")})
            return
        try:
            command.spawn()
        except OSError as exc:
            command.finish()
            self.finished_run.emit({"error": f"cannot start the command: {exc.strerror or exc}"})
            return
        self.cgroup = command.cgroup
        try:
            self.spawned.emit(command.cgroup)
            while not (self._go.wait(POLL_S) or self._abort.is_set()):
                pass
            if not self._abort.is_set():
                command.release()
                self.released.emit(command.pid)
                while not command.poll() and not self._abort.wait(POLL_S):
                    pass
            if command.ended:
                self.exited.emit(self._outcome(command))
                self._done.wait()
        finally:
            command.finish()      # kills what is left in the group (the command itself, on abort)
        self.finished_run.emit(self._outcome(command))

    @staticmethod
    def _outcome(command: GatedCommand) -> dict:
        return {**command.outcome(), "exit": command.exit_status()}
