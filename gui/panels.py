"""The three panels below the metric tabs: the collector's state, the bounded log, and what the BPF
programs cost. Each is handed its widgets from ui_main_window.py and owns what it shows; the window
(gui/main_window.py) only routes the controller's hooks to them."""

from __future__ import annotations

import time
from collections import deque

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QTableView, QWidget

from gui.cost_chart import CostChart
from gui.fitting import TwoLineHeaders, fit_columns
from gui.models import OVERHEAD_COLUMNS, SORT_ROLE, OverheadModel
from gui.style import ALARM_STYLE, BAD, ERROR_STYLE, GOOD, QUIET, QUIET_STYLE
from host.bpf_sampler import OverheadSampler
from host.bpf_stats import BpfStatsSwitch


class TransportPanel:
    """Where records go: the collector reachable or not, buffered, sent, waiting in the outbox, dropped,
    and the last error — the transport's, else the last "Test connection" of this URL that failed, else
    a URL the window refused (none of which the transport ever saw)."""

    def __init__(self, labels: dict[str, QLabel]) -> None:
        self.labels = labels
        self.status: dict = {}
        self.refused = ""                          # why the URL typed was not applied
        self.check: tuple[str, bool | None, str] | None = None   # (base URL, ok, line) of the last test

    def refuse_url(self, reason: str) -> None:
        self.refused = reason
        self.show(self.status)

    def checking(self, url: str) -> None:
        self.refused = ""
        self.check = (url, None, "checking…")
        self.show(self.status)

    def show_check(self, url: str, ok: bool, text: str) -> None:
        self.check = (url, ok, text)
        self.show(self.status)

    def show(self, status: dict) -> None:
        self.status = dict(status)
        labels = self.labels
        reachable, error = status.get("reachable"), status.get("last_error") or ""
        tested = self.check if self.check is not None and self.check[0] == status.get("url") else None
        if reachable is None and tested is not None:
            reachable = tested[1]                  # the transport has not looked yet: the test has
        if tested is not None and tested[1] is False:
            error = error or tested[2]
        text, colour = {True: ("● reachable", GOOD), False: ("● unreachable", BAD)}.get(
            reachable, ("● not checked yet" if status.get("url") else "● none set: records stay local", QUIET))
        if self.refused:
            text, colour, error = "● URL refused", BAD, self.refused
        labels["reachable"].setText(text)
        labels["reachable"].setStyleSheet(f"color: {colour};")
        labels["reachable"].setToolTip(str(status.get("url") or ""))
        labels["buffered"].setText(f"{status.get('buffered', 0):,} records")
        labels["sent"].setText(f"{status.get('sent_batches', 0):,} batches, {status.get('sent_records', 0):,} records")
        labels["pending_outbox"].setText(f"{status.get('pending_outbox', 0):,} batches")
        dropped = status.get("dropped", 0) or 0
        labels["dropped"].setText(f"{dropped:,}")
        labels["dropped"].setStyleSheet(ALARM_STYLE if dropped else "")
        labels["last_error"].setText(error or "none")
        labels["last_error"].setStyleSheet(ERROR_STYLE if error else QUIET_STYLE)
        checked = self.check
        labels["test"].setText(checked[2] if checked else "not tested")
        labels["test"].setToolTip(checked[0] if checked else "")
        labels["test"].setStyleSheet({True: f"color: {GOOD};", False: ERROR_STYLE}.get(
            checked[1] if checked else None, QUIET_STYLE))


class LogPanel:
    """A bounded log: lines queue as they come and are appended by the window's refresh timer, at most
    1000 at a time (the rest are counted, and said)."""

    def __init__(self, view: QPlainTextEdit, keep: int = 1000) -> None:
        self.view = view
        self._pending: deque[str] = deque(maxlen=keep)
        self._dropped = 0

    def add(self, name: str, line: str) -> None:
        if len(self._pending) == self._pending.maxlen:
            self._dropped += 1
        stamp = time.strftime("%H:%M:%S")
        self._pending.append(f"{stamp}  {name or 'app':<11} {line.rstrip()}")

    def flush(self) -> None:
        if not self._pending:
            return
        lines = list(self._pending)
        self._pending.clear()
        if self._dropped:
            lines.insert(0, f"{time.strftime('%H:%M:%S')}  app         ({self._dropped:,} log lines skipped)")
            self._dropped = 0
        self.view.appendPlainText("\n".join(lines))


class OverheadPanel:
    """Per BPF program the metrics hold: runs/s, average run time, CPU share (bpf_stats, on while metrics run);
    per metric its subtotal with its process's CPU and PSS; the app's own row; and the total over time."""

    def __init__(self, table: QTableView, status: QLabel, parent: QObject, sampler: OverheadSampler | None = None,
                 stats_switch: BpfStatsSwitch | None = None, chart_host: QWidget | None = None) -> None:
        self.status = status
        self.stats_switch = stats_switch or BpfStatsSwitch()
        self.sampler = sampler or OverheadSampler(parent=parent)
        self.model = OverheadModel(parent)
        proxy = TwoLineHeaders(parent)            # "BPF CPU / of one core (%)": narrow numbers, narrow columns
        proxy.setSourceModel(self.model)
        proxy.setSortRole(SORT_ROLE)
        table.setModel(proxy)
        # every number whole in the table's width; the names (metric, program, its type) share the rest
        keys = [key for key, _, _ in OVERHEAD_COLUMNS]
        fit_columns(table, stretch=tuple(keys.index(k) for k in ("metric", "name", "type")))
        self.sampler.sampled.connect(self.show_sample)
        self.chart = CostChart(parent=chart_host)
        if chart_host is not None and chart_host.layout() is not None:
            chart_host.layout().addWidget(self.chart)

    def set_targets(self, targets: dict[str, tuple[int | None, set[int]]]) -> None:
        self.sampler.set_targets(targets)

    def show_sample(self, rows: list, summary: str) -> None:
        if rows or self.model.rows:
            self.model.set_rows(rows)
        self.chart.add_sample(rows)
        self.show_state(summary)

    def show_state(self, summary: str = "") -> None:
        # an app that is not root: the privilege helper holds bpf_stats on, not the switch
        text = f"bpf_stats: {getattr(self.sampler, 'stats_state', '') or self.stats_switch.state}"
        self.status.setText(f"{text}  —  {summary}" if summary else text)

    def stats_on(self) -> None:
        self.stats_switch.enable()
        self.show_state()

    def stats_off(self) -> None:
        self.stats_switch.restore()
        self.show_state()
