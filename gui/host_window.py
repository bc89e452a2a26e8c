"""What the window's own panels — the "Run a command" box (gui/command_panel.py) and the sessions
(gui/session_panel.py) — may use of the window, and nothing more. MainWindow (gui/main_window.py)
implements it; a panel that needs more of the window names it here first."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QSettings

import config
from gui.forms import ArgForm
from gui.metric_tab import MetricTab
from monitor.controller import MonitorController


class HostWindow(Protocol):
    controller: MonitorController          # its records and metric_finished hooks
    settings: QSettings
    specs: dict[str, config.MetricSpec]    # the registry the window shows
    forms: dict[str, ArgForm]              # each metric's argument form
    running: set[str]                      # started and not finished

    def checked(self) -> list[str]:
        """The checked metrics that can run here."""

    def select_metric(self, name: str) -> None:
        """Show the metric's form (its marked errors)."""

    def save_settings(self) -> None: ...

    def start_metric(self, name: str, values: dict) -> bool:
        """Start it with these values (its tab says why not); True when the controller took it."""

    def stop_metric(self, name: str) -> None: ...

    def show_tabs(self, names: list[str]) -> None:
        """The tabs in front, the first of `names` shown."""

    def tab_for(self, name: str) -> MetricTab:
        """The metric's tab, made now if it has none."""

    def log(self, text: str) -> None:
        """A line of the app's own in the log."""

    def show_status(self, text: str, timeout_ms: int) -> None:
        """A message in the status bar, for that long."""
