"""The collector panel's "Test connection": client.health.check on a thread of its own (it may wait
seconds for an answer), the verdict handed back to the GUI thread by a queued signal."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal

from client import health


class ConnectionCheck(QObject):
    checked = Signal(str, object)          # the URL checked, its client.health.Health

    def __init__(self, parent: QObject | None = None, timeout: float = 5.0) -> None:
        super().__init__(parent)
        self.timeout = timeout
        self.thread: threading.Thread | None = None

    def start(self, url: str) -> None:
        self.thread = threading.Thread(target=self._run, args=(url,), name="collector-check", daemon=True)
        self.thread.start()

    def _run(self, url: str) -> None:
        verdict = health.check(url, self.timeout)
        try:
            self.checked.emit(url, verdict)       # queued to the GUI thread, where this object lives
        except RuntimeError:
            pass                                  # the window closed meanwhile
