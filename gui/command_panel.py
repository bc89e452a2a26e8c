"""The window's "Run a command" box: the GUI counterpart of `--headless --command`. The checked metrics
start limited to a new cgroup made for the command (their `cgroup` argument), the command waits at a
gate until each metric's meta record has arrived (it is printed once its probes are attached), then
runs; when it exits the metrics are stopped, its group removed, and the box shows its exit status and
wall time. The command's process and group are handled by a CommandRun (monitor/command_run.py, a plain
thread): nothing here forks, waits or touches the cgroup filesystem on the GUI thread, and its callbacks
reach the panel through a GuiThreadRelay, so they run on the GUI thread.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QLineEdit, QPushButton

from gui.host_window import HostWindow
from gui.style import BAD, GOOD
from gui.thread_relay import GuiThreadRelay
from monitor.command_run import CommandCallbacks, CommandRun

RUN_TEXT, STOP_TEXT = "Run", "Stop command"
SETTING = "command/line"  # the last command run, offered again next time


def outcome_text(outcome: dict) -> str:
    """'exit status 3 · 0.42 s' / 'killed by SIGKILL · 1.2 s' / 'not started: ...'."""
    if outcome.get("error"):
        return f"not started: {outcome['error']}"
    if not outcome.get("started"):
        return "not started"
    how = f"killed by {outcome['signal']}" if outcome.get("signal") else f"exit status {outcome.get('exit_status')}"
    return f"{how} · {outcome.get('wall_s', 0):g} s"


class CommandPanel(QObject):
    """One command at a time, started through the window's HostWindow side (its forms, start_metric,
    stop_metric, log); the panel lives as long as its button."""

    def __init__(self, window: HostWindow, line: QLineEdit, button: QPushButton, status: QLabel,
                 make_run: Callable[[str, CommandCallbacks], CommandRun] = CommandRun) -> None:
        super().__init__(button)
        self.window, self.line, self.button, self.status = window, line, button, status
        self.make_run = make_run
        self.relay = GuiThreadRelay(self)   # the run's callbacks, from its thread to this one
        self.run: CommandRun | None = None
        self.names: list[str] = []          # the metrics watching the command
        self.values: dict[str, dict] = {}
        self.attached: set[str] = set()
        self.running_pid: int | None = None
        self.last_outcome: dict | None = None
        self.reason = ""                    # why it was not run, when the panel gave up at the gate
        line.setText(str(window.settings.value(SETTING, "") or ""))
        button.clicked.connect(self.toggle)
        line.returnPressed.connect(self.toggle)
        window.controller.records.connect(self._on_records)
        window.controller.metric_finished.connect(self._on_metric_finished)

    @property
    def busy(self) -> bool:
        return self.run is not None

    def toggle(self) -> None:
        if self.run is not None:
            self.stop()
        else:
            self.start()

    # --- starting -------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Refused with a line in the box when there is no command, no checked metric, a checked metric
        that cannot be limited to a cgroup or is running already, or a form with errors."""
        text = self.line.text().strip()
        names = self.window.checked()
        reason = ""
        if not text:
            reason = "type a command to run, e.g. make -j2"
        elif not names:
            reason = "check the metrics to run it under"
        else:
            specs = self.window.specs
            unable = [n for n in names if not any(a.name == "cgroup" for a in specs[n].args)]
            busy = [n for n in names if n in self.window.running]
            if unable:
                reason = f"{', '.join(unable)} cannot be limited to a cgroup: uncheck it"
            elif busy:
                reason = f"stop {', '.join(busy)} first: the command's metrics start with it"
        if not reason:
            values, invalid = {}, []
            for name in names:
                form_values, errors = self.window.forms[name].validate()
                (invalid.append(name) if errors else values.__setitem__(name, form_values))
            if invalid:
                self.window.select_metric(invalid[0])
                reason = f"fix the marked arguments of {', '.join(invalid)}"
        if reason:
            self._show(f"not started: {reason}", BAD)
            return False
        self.names, self.values, self.attached = names, values, set()
        self.running_pid, self.last_outcome, self.reason = None, None, ""
        self.window.settings.setValue(SETTING, text)
        self.window.save_settings()
        callbacks = CommandCallbacks(self._on_spawned, self._on_released, self._on_exited, self._on_finished)
        self.run = self.make_run(text, callbacks.through(self.relay))
        self.button.setText(STOP_TEXT)
        self.line.setEnabled(False)
        self._show(f"starting {', '.join(names)} on a new cgroup…")
        self.window.log(f"command: {text}: making its cgroup")
        self.run.start()
        return True

    def _on_spawned(self, cgroup: str) -> None:
        if self.run is None:
            return
        started = []
        for name in self.names:
            values = {**self.values[name], "cgroup": cgroup}
            if not self.window.start_metric(name, values):
                break
            started.append(name)
        if len(started) < len(self.names):
            self._give_up(f"{self.names[len(started)]} did not start (see its tab)")
            return
        self.window.show_tabs(started)
        self._show(f"waiting for {', '.join(self.names)} to attach… (cgroup {cgroup})")

    def _on_records(self, name: str, records: list) -> None:
        """A metric's meta record: its probes are attached and filtering on the group."""
        if self.run is None or name not in self.names or name in self.attached:
            return
        if any(r.get("kind") == "meta" for r in records):
            self.attached.add(name)
            if self.attached >= set(self.names):
                self.run.release()

    def _on_released(self, pid: int) -> None:
        self.running_pid = pid
        self._show(f"running (pid {pid}) under {', '.join(self.names)}")
        self.window.log(f"command: every metric attached; running pid {pid}")

    def _on_metric_finished(self, name: str, status: int, error: str) -> None:
        """A metric that ends before the command could start: the command never runs."""
        if self.run is not None and name in self.names and self.running_pid is None:
            self._give_up(f"{name} ended before the command could start")
        elif self.run is not None and self.last_outcome is not None and not self._watching():
            self.run.done()           # every metric has stopped: its last interval is in, remove the group

    # --- the end ----------------------------------------------------------------------------------------
    def _on_exited(self, outcome: dict) -> None:
        """The command exited: stop its metrics (their last interval still counts it), then remove the group."""
        self.last_outcome = outcome
        self._show(f"{outcome_text(outcome)} · stopping the metrics…")
        for name in self.names:
            self.window.stop_metric(name)
        if not self._watching():
            self.run.done()

    def _watching(self) -> list[str]:
        return [n for n in self.names if n in self.window.running]

    def _on_finished(self, outcome: dict) -> None:
        run, self.run = self.run, None
        self.last_outcome = outcome
        for name in self._watching():
            self.window.stop_metric(name)
        good = not outcome.get("error") and outcome.get("exit") == 0
        text = f"not run: {self.reason}" if self.reason and not outcome.get("started") else outcome_text(outcome)
        self._show(text, GOOD if good else BAD)
        argv = outcome.get("argv")
        self.window.log(f"command: {shlex.join(argv) if argv else self.line.text()}: {text}")
        self.button.setText(RUN_TEXT)
        self.line.setEnabled(True)
        if run is not None:
            run.wait(5)

    def _give_up(self, reason: str) -> None:
        self.reason = reason
        self._show(f"not run: {reason}", BAD)
        self.run.abort()

    def stop(self) -> None:
        """Kill the command (or cancel it at the gate); its metrics are stopped when it has ended."""
        if self.run is not None:
            if self.running_pid is None:
                self.reason = "stopped before every metric had attached"
            self._show("stopping the command…")
            self.run.abort()

    def shutdown(self, timeout: float = 15.0) -> None:
        """The window closes: kill the command, remove its group, and wait for that."""
        run = self.run
        if run is not None:
            run.abort()
            run.wait(timeout)

    def _show(self, text: str, colour: str = "") -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {colour};" if colour else "")
        self.status.setToolTip(text)
