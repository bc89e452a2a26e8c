"""The workers' Qt adapter: the Relay (monitor/events.py) the window hands the controller. A worker's
callback, posted from its thread, travels as a queued signal to the thread this object lives on (the
GUI thread), where Qt's event loop runs it; so the controller's hooks, and every widget they touch,
run on the GUI thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal, Slot


class GuiThreadRelay(QObject):
    # `object`: the call, records and all, handed over as the same Python object (a `list` signal would
    # make PySide convert every record to a QVariantMap and back, ~1.6 µs a record)
    _posted = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # queued also when posted from the GUI thread: run by the event loop, after the poster returns
        self._posted.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def post(self, call: Callable[[], Any]) -> None:
        self._posted.emit(call)

    def process(self) -> None:
        QCoreApplication.processEvents()

    @Slot(object)
    def _run(self, call: Callable[[], Any]) -> None:
        call()
