"""A stand-in for controller.MonitorController with the same signals and methods, for GUI tests that
check the window's own behaviour (forms, refusals, failures shown in place) without running metrics.
The end-to-end test (test_gui_app.py) uses the real controller."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QSettings, Signal

import config


class FakeController(QObject):
    records = Signal(str, object)            # as the real one: the list handed over as is
    log = Signal(str, str)
    metric_started = Signal(str)
    metric_finished = Signal(str, int, str)
    transport_status = Signal(dict)

    def __init__(self, refuse: dict[str, str] | None = None) -> None:
        super().__init__()
        self.refuse = refuse or {}          # metric -> reason start_metric raises ValueError with
        self.started: list[tuple[str, dict]] = []
        self.stopped: list[str] = []
        self.server: tuple[str | None, str | None] | None = None
        self.shut_down = False
        self._running: set[str] = set()
        self.registry = {spec.name: spec for spec in config.METRICS}
        self.notes: list[tuple[str, dict]] = []
        self.restarted: list[tuple[str, dict]] = []

    def set_server(self, url: str | None, token: str | None) -> None:
        self.server = (url, token)

    def start_metric(self, name: str, values: dict) -> None:
        if name in self.refuse:
            raise ValueError(self.refuse[name])
        config.get(name).command(values)    # the real controller refuses bad values the same way
        self.started.append((name, values))
        self._running.add(name)
        self.metric_started.emit(name)

    def stop_metric(self, name: str) -> None:
        self.stopped.append(name)
        if name in self._running:
            self._running.discard(name)
            self.metric_finished.emit(name, 0, "")

    def stop_all(self) -> None:
        for name in sorted(self._running):
            self.stop_metric(name)

    def running(self) -> list[str]:
        return sorted(self._running)

    def values_of(self, name: str) -> dict | None:
        return next((dict(values) for started, values in reversed(self.started) if started == name), None)

    def note(self, name: str, fields: dict) -> dict:
        """As the real one: the record goes to the records signal (the tab) like the metric's own."""
        record = {"metric": name, "ts": 1.0, "kind": "note", "interval": 0, **fields}
        self.notes.append((name, record))
        self.records.emit(name, [record])
        return record

    def restart_metric(self, name: str, values: dict) -> None:
        if name not in self._running:
            raise ValueError(f"{name} is not running")
        config.get(name).command(values)
        self.restarted.append((name, values))
        self.started.append((name, values))
        self.metric_started.emit(name)

    def shutdown(self, timeout: float = 10.0) -> None:
        self.stop_all()
        self.shut_down = True

    def bpf_program_ids(self) -> dict[str, set[int]]:
        return {}

    def crash(self, name: str, status: int, error: str) -> None:
        """What the real controller reports when a metric's script dies."""
        self._running.discard(name)
        self.metric_finished.emit(name, status, error)


def make_window(qtbot: Any, tmp_path: Any, controller: Any = None, show: bool = False, **options: Any) -> Any:
    """A MainWindow at 1400x900 with a settings file under tmp_path (never the user's), closed by qtbot
    at the end of the test (which shuts its controller down)."""
    from main_app import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(controller if controller is not None else FakeController(), settings=settings, **options)
    window.resize(1400, 900)
    qtbot.addWidget(window)
    if show:
        window.show()
    return window
