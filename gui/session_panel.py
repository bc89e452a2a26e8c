"""The window's saved sessions (monitor/session.py): "Record…" saves every record of every metric from
now on to a file; "Open session…" (or `main_app.py --open FILE`) rebuilds a recorded run's tabs —
tables, charts, flame graphs — from the file, with no root, BPF or collector. The file is read on a
thread of its own and written by the recorder's thread: only the dialogs run on the GUI thread.
"""

from __future__ import annotations

import os
import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QPushButton

from gui.host_window import HostWindow
from monitor.intervals import mark_final_partial, span_text
from monitor.session import SESSION_FILES, SessionError, SessionWriter, read_session


class SessionPanel(QObject):
    loaded = Signal(object, str, str)     # {metric: records} or None, one line to log, the status bar's

    def __init__(self, window: HostWindow, open_button: QPushButton, record_button: QPushButton) -> None:
        super().__init__(open_button)           # lives as long as its buttons
        self.window = window
        self.open_button, self.record_button = open_button, record_button
        self.recorder: SessionWriter | None = None
        self.opened: dict[str, list[dict]] = {}
        self.reader: threading.Thread | None = None
        open_button.clicked.connect(self.ask_open)
        record_button.setCheckable(True)
        record_button.toggled.connect(self._record_toggled)
        self.loaded.connect(self._show)

    # --- open -------------------------------------------------------------------------------------
    def ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.open_button.window(), "Open a recorded session", os.getcwd(), SESSION_FILES)
        if path:
            self.open(path)

    def open(self, path: str) -> None:
        self.window.log(f"opening session {path}")
        self.reader = threading.Thread(target=self._read, args=(path,), name="session-reader", daemon=True)
        self.reader.start()

    def _read(self, path: str) -> None:
        try:
            by_metric, skipped = read_session(path, self.window.specs)
        except SessionError as e:
            self._emit(None, str(e), str(e))
            return
        by_metric = {name: mark_final_partial(records) for name, records in by_metric.items()}
        count = sum(len(r) for r in by_metric.values())
        note = f", {skipped:,} of metrics this app lacks skipped" if skipped else ""
        self._emit(by_metric, f"session {os.path.basename(path)}: {count:,} records of {', '.join(by_metric)}{note}",
                   session_line(path, by_metric))

    def _emit(self, by_metric: dict | None, message: str, status: str) -> None:
        try:
            self.loaded.emit(by_metric, message, status)   # queued to the GUI thread, where this object lives
        except RuntimeError:
            pass                                           # the window closed meanwhile

    def _show(self, by_metric: dict[str, list[dict]] | None, message: str, status: str) -> None:
        self.window.log(message)
        if by_metric is None:
            self.window.show_status(message, 10_000)
            return
        self.window.show_status(status, 0)           # until something else is said: what is on screen
        self.opened = by_metric
        for name, records in by_metric.items():
            tab = self.window.tab_for(name)
            tab.reset()
            tab.feed(records)
            tab.set_state("recorded")
            tab.refresh()
        self.window.show_tabs(list(by_metric))

    # --- record -----------------------------------------------------------------------------------
    def _record_toggled(self, on: bool) -> None:
        if not on:
            self.stop_recording()
            return
        path, _ = QFileDialog.getSaveFileName(self.record_button.window(), "Record every record to",
                                              os.path.join(os.getcwd(), "session.ndjson"), SESSION_FILES)
        if not path or not self.start_recording(path):
            self.record_button.setChecked(False)

    def start_recording(self, path: str) -> bool:
        try:
            self.recorder = SessionWriter(path)
        except OSError as e:
            self.window.log(f"cannot record to {path}: {e.strerror or e}")
            return False
        self.record_button.setText("■  Recording")
        self.window.log(f"recording every record to {path}")
        return True

    def record(self, records: list[dict]) -> None:
        if self.recorder is not None:
            self.recorder.write(records)

    def stop_recording(self, wait: float = 0.0) -> None:
        recorder, self.recorder = self.recorder, None
        self.record_button.setText("●  Record…")
        if recorder is not None:
            recorder.close(timeout=wait)          # the writer thread finishes the queue on its own
            self.window.log(f"recording to {recorder.path} ended")


def session_line(path: str, by_metric: dict[str, list[dict]]) -> str:
    """The status bar's line for an opened session: the file, the host(s) it was recorded on, its span."""
    hosts = sorted({r["host"] for records in by_metric.values() for r in records
                    if r.get("kind") == "meta" and isinstance(r.get("host"), str) and r["host"]})
    times = [r["ts"] for records in by_metric.values() for r in records
             if isinstance(r.get("ts"), (int, float)) and not isinstance(r.get("ts"), bool)]
    where = f"host {', '.join(hosts)}" if hosts else "host not recorded"
    span = span_text(min(times), max(times)) if times else "no times recorded"
    metrics = len(by_metric)
    return (f"Recorded session {os.path.basename(path)}  ·  {where}  ·  {span}  ·  {metrics} metric"
            f"{'s' if metrics > 1 else ''} (not live)")
