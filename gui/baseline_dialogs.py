"""The flame graph's "Baseline from file…" and "Baseline from collector…": a small form each, whose Load
reads the baseline on a thread of its own (gui/baseline.py) and says in one line, under the form, why
it could not; a baseline read is handed to the panel by `chosen` and the dialog closes."""

from __future__ import annotations

import os
from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

import config
from client.transport import collector_url
from gui.baseline import Baseline, BaselineLoader, from_collector, from_file
from gui.style import ERROR_STYLE
from monitor.session import SESSION_FILES
from profile_data.records import profile_unit

RANGES = ("run", "latest", "5m", "1h", "24h")       # as the collector's range takes them (or 90s, 7d, …)


def _values(text: str) -> list[str]:
    """'a, b' -> ['a', 'b']: several values of one parameter mean any of them."""
    return [v.strip() for v in text.split(",") if v.strip()]


class BaselineDialog(QDialog):
    chosen = Signal(object)            # the Baseline read

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setMinimumWidth(520)              # a path, a URL and a collector's reason read whole
        self.form = QFormLayout()
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.load_button = self.buttons.addButton("Load", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.load)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(self.form)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)
        self.loader = BaselineLoader(self)
        self.loader.done.connect(self._done)

    def job(self) -> Callable[[], Baseline]:
        """What Load runs off the GUI thread; ValueError names a field filled wrongly."""
        raise NotImplementedError

    def load(self) -> None:
        try:
            job = self.job()
        except ValueError as e:
            self.say(str(e), error=True)
            return
        self.say("loading…")
        self.load_button.setEnabled(False)
        self.loader.start(job)

    def say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(ERROR_STYLE if error else "")

    def _done(self, baseline: Baseline | None, why: str) -> None:
        self.load_button.setEnabled(True)
        if baseline is None:
            self.say(why, error=True)
        elif self.isVisible():                  # not when cancelled meanwhile
            self.say("")
            self.chosen.emit(baseline)
            self.accept()


class FileBaselineDialog(BaselineDialog):
    """A saved session (the window's Record…, or --headless --record) and, if not all of it, a span."""

    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None) -> None:
        super().__init__(f"{spec.name}: baseline from a saved session", parent)
        self.spec = spec
        self.path = QLineEdit(self)
        self.path.setPlaceholderText("a session file (Record…, or --headless --record FILE)")
        browse = QPushButton("Browse…", self)
        browse.clicked.connect(self.browse)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        self.from_s, self.to_s = QDoubleSpinBox(self), QDoubleSpinBox(self)
        for box in (self.from_s, self.to_s):
            box.setRange(0.0, 1e7)
            box.setDecimals(1)
            box.setSuffix(" s")
        self.to_s.setSpecialValueText("the end")         # 0: to the session's end
        self.form.addRow("Session", row)
        self.form.addRow("From", self.from_s)
        self.form.addRow("To", self.to_s)
        self.from_s.setToolTip("seconds from the session's start")
        self.to_s.setToolTip("seconds from the session's start; 'the end' for all of it")

    def browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A saved session for the baseline", os.getcwd(), SESSION_FILES)
        if path:
            self.path.setText(path)

    def job(self) -> Callable[[], Baseline]:
        path = self.path.text().strip()
        if not path:
            raise ValueError("choose a session file")
        spec, start, end = self.spec, self.from_s.value(), self.to_s.value() or None
        return lambda: from_file(path, spec, start, end)


class CollectorBaselineDialog(BaselineDialog):
    """A selection of a collector's profiles: the metric, its hosts and runs (any of those given), a range."""

    def __init__(self, spec: config.MetricSpec, url: str = "", token: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(f"{spec.name}: baseline from a collector", parent)
        self.spec = spec
        self.unit = profile_unit(spec.chart.unit)
        self.url, self.token = QLineEdit(url, self), QLineEdit(token, self)
        self.url.setPlaceholderText("http://collector:5000")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setToolTip("a token the collector reads with, when it has tokens")
        self.metric_box = QComboBox(self)
        # the metrics whose profiles weigh in this one's unit: their shares compare
        for other in config.METRICS:
            if other.chart.kind == "stacks" and profile_unit(other.chart.unit) == self.unit:
                self.metric_box.addItem(other.name)
        self.metric_box.setCurrentText(spec.name)
        self.host, self.run_id = QLineEdit(self), QLineEdit(self)
        for field in (self.host, self.run_id):
            field.setPlaceholderText("one, or several separated by commas (any of them)")
        self.range_box = QComboBox(self)
        self.range_box.setEditable(True)
        self.range_box.addItems(RANGES)
        self.range_box.setToolTip("the whole run, its latest interval, or its last 90s, 5m, 1h, 7d")
        for label, field in (("Collector", self.url), ("Token", self.token), ("Metric", self.metric_box),
                             ("Host", self.host), ("Run", self.run_id), ("Range", self.range_box)):
            self.form.addRow(label, field)

    def selection(self) -> dict[str, list[str]]:
        return {"source": [self.metric_box.currentText()], "host": _values(self.host.text()),
                "run_id": _values(self.run_id.text()), "range": _values(self.range_box.currentText())[:1]}

    def job(self) -> Callable[[], Baseline]:
        if not self.url.text().strip():
            raise ValueError("no collector URL: type one above")
        url = collector_url(self.url.text())               # ValueError: one line, as the panel's
        selection, token, unit, shown = self.selection(), self.token.text() or None, self.unit, self.spec.name
        return lambda: from_collector(url, selection, unit, token, shown)
