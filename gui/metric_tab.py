"""One running metric's tab: its state (running, stopped, failed with the error), its charts (several
in tabs), a sortable table of its latest interval or events, and a line with the interval's summary and
lost counts. "Export CSV" writes the rows the table shows; "Save PNG" the chart on screen (gui/export.py).

Records are queued by feed() (cheap, any thread-side batch size) and applied by refresh(), which the
window runs from one timer for all tabs, a step per event-loop turn (refresh_steps); the queue is
bounded, so a burst costs memory once at most.
"""

from __future__ import annotations

import functools
import html
import os
import time
from collections import deque
from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

import config
from gui import cgroup_groups, group_tree
from gui.charts import MetricChart, make_charts
from gui.export import Exporter, csv_header, shown_rows, write_csv, write_png
from gui.fitting import ElidedLabel
from gui.live import LiveChart
from gui.models import SORT_ROLE, ColumnsModel, RecordTableModel
from gui.pid_filter import PidFilterProxy
from gui.style import BAD, ERROR_BANNER_STYLE, NOTE_BANNER_STYLE, QUIET_STYLE, STATE_STYLE
from gui.time_link import TimeLink
from monitor.intervals import RunTotals

# beside the many rows, events, hists and stacks: pid, summary, lost, and what the app did to the run
FEW = ("meta", "summary", "lost", "note")
NOTES_SHOWN = 3


class MetricTab(QWidget):
    stop_requested = Signal(str)
    retry_requested = Signal(str)
    drill_requested = Signal(object)          # a pid: show this process in every tab (None: everything)

    def __init__(self, spec: config.MetricSpec, max_pending: int = 2000, parent: QWidget | None = None,
                 time_link: TimeLink | None = None) -> None:
        super().__init__(parent)
        self.spec = spec
        self.name = spec.name
        self.state = "starting"
        self.pid: int | None = None                 # the metric script's pid, from its meta record
        self.pending: deque[list[dict]] = deque(maxlen=max_pending)     # batches, as the controller sent them
        self.records_seen = 0
        self.lost = 0
        self.last_summary: dict | None = None       # the newest whole interval's
        self.final_partial: dict | None = None      # the newest summary, when its interval was cut short
        self.totals = RunTotals()                   # every summary's, for an opened session's headline

        self.state_label = QLabel(self)
        # a long summary must not widen the window: it ends in … at the label's edge, whole in the tooltip
        self.summary_label = ElidedLabel(self)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setToolTip(f"stop {spec.name} only")
        self.stop_button.clicked.connect(lambda: self.stop_requested.emit(self.name))
        self.retry_button = QPushButton("Retry", self)
        self.retry_button.setToolTip(f"start {spec.name} again with its form's values")
        self.retry_button.clicked.connect(lambda: self.retry_requested.emit(self.name))
        self.retry_button.hide()
        header = QHBoxLayout()
        header.addWidget(self.state_label)
        header.addWidget(self.summary_label, 1)
        self.chart_area, self.charts = make_charts(spec, self)
        self.chart = self.charts[0]           # the registry's own chart; the others follow in tabs
        self.time_link = time_link
        if time_link is not None:             # its charts over time share the window's time range
            for chart in self.time_charts():
                time_link.join(chart)
        self.csv_button = QPushButton("Export CSV…", self)
        self.csv_button.setToolTip("the rows the table shows (filtered, in its order), raw values")
        self.csv_button.clicked.connect(lambda: self.ask_export("csv"))
        self.png_button = QPushButton("Save PNG…", self)
        self.png_button.setToolTip("the chart on screen, as a PNG image")
        self.png_button.clicked.connect(lambda: self.ask_export("png"))
        self.exporter = Exporter(self)
        self.exporter.finished.connect(self._exported)
        self.export_note = ""
        header.addWidget(self.csv_button)
        header.addWidget(self.png_button)
        header.addWidget(self.retry_button)
        header.addWidget(self.stop_button)

        self.error_label = QLabel(self)
        self.error_label.setObjectName("metric_error")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(ERROR_BANNER_STYLE)
        self.error_label.hide()
        # what the app did to this run (the overhead budget's note records, docs/ndjson.md), newest last
        self.notes: list[str] = []
        self.note_label = QLabel(self)
        self.note_label.setObjectName("metric_note")
        self.note_label.setWordWrap(True)
        self.note_label.setTextFormat(Qt.TextFormat.PlainText)
        self.note_label.setStyleSheet(NOTE_BANNER_STYLE)
        self.note_label.hide()

        self.model = RecordTableModel(spec, parent=self)
        # the drill-down's filter (Python, a call per row) sits between the model and the view's proxy
        # only while a process is drilled: otherwise a model reset calls no Python per row, and each
        # such call waits for the GIL the worker and transport threads are using
        self.pid_proxy = PidFilterProxy(self)
        self.pid_proxy.setSourceModel(self.model)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.table = QTableView(self)
        self.table.setModel(self.proxy)
        self.table.doubleClicked.connect(self._drill)
        self.table.setToolTip("double-click a row: this process in every metric's tab")
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)   # the metric's own order until a click
        self.table.setAlternatingRowColors(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setResizeContentsPrecision(30)    # size columns from 30 rows, not all
        # a search over every column's text (a command, a pid, a syscall), as the rows arrive
        self.filter_box = QLineEdit(self)
        self.filter_box.setObjectName("table_filter")
        self.filter_box.setPlaceholderText("Filter rows (any column)")
        self.filter_box.setClearButtonEnabled(True)
        self.proxy.setFilterKeyColumn(-1)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.filter_box.textChanged.connect(self.proxy.setFilterFixedString)
        # group/detail rows (sysnest) as a tree: a sort orders the groups, and the details within each
        self.tree_model = QStandardItemModel(self)
        self.tree_proxy = QSortFilterProxyModel(self)
        self.tree_proxy.setSourceModel(self.tree_model)
        self.tree_proxy.setSortRole(SORT_ROLE)
        self.tree_proxy.setFilterKeyColumn(-1)
        self.tree_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.tree_proxy.setRecursiveFilteringEnabled(True)     # a matching detail keeps its group shown
        self.filter_box.textChanged.connect(self.tree_proxy.setFilterFixedString)
        self.tree = QTreeView(self)
        self.tree.setModel(self.tree_proxy)
        self.tree.setSortingEnabled(True)
        self.tree.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.tree.setAlternatingRowColors(True)
        # the same rows summed per cgroup (gui/cgroup_groups.py), when the metric's rows carry one
        self.cgroup_model = ColumnsModel(cgroup_groups.columns(self.model.columns), self)
        self.cgroup_proxy = QSortFilterProxyModel(self)
        self.cgroup_proxy.setSourceModel(self.cgroup_model)
        self.cgroup_proxy.setSortRole(SORT_ROLE)
        self.cgroup_proxy.setFilterKeyColumn(-1)
        self.cgroup_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.filter_box.textChanged.connect(self.cgroup_proxy.setFilterFixedString)
        self.cgroup_table = QTableView(self)
        self.cgroup_table.setObjectName("cgroup_table")
        self.cgroup_table.setModel(self.cgroup_proxy)
        self.cgroup_table.setSortingEnabled(True)
        self.cgroup_table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.cgroup_table.setAlternatingRowColors(True)
        self.cgroup_table.verticalHeader().setVisible(False)
        self.cgroup_table.horizontalHeader().setStretchLastSection(True)
        self.cgroup_table.setToolTip("double-click a cgroup: its rows, ungrouped")
        self.cgroup_table.doubleClicked.connect(self._open_cgroup)
        self.group_by_cgroup = QCheckBox("Group by cgroup", self)
        self.group_by_cgroup.setObjectName("group_by_cgroup")
        self.group_by_cgroup.setToolTip("a row per cgroup: its processes and the sum of each additive column")
        self.group_by_cgroup.setVisible(any(key == "cgroup" for key, _, _ in self.model.columns))
        self.group_by_cgroup.toggled.connect(self._group_toggled)
        self.views = QStackedWidget(self)
        self.views.addWidget(self.table)
        self.views.addWidget(self.tree)
        self.views.addWidget(self.cgroup_table)
        table_pane = QWidget(self)
        table_layout = QVBoxLayout(table_pane)
        table_layout.setContentsMargins(0, 0, 0, 0)
        filter_row = QHBoxLayout()
        filter_row.addWidget(self.filter_box, 1)
        filter_row.addWidget(self.group_by_cgroup)
        table_layout.addLayout(filter_row)
        table_layout.addWidget(self.views, 1)
        self.drill_button = QPushButton(self)     # says which process every tab shows; click: all again
        self.drill_button.clicked.connect(lambda: self.drill_requested.emit(None))
        self.drill_button.hide()
        table_layout.insertWidget(0, self.drill_button)
        self.footer = QLabel(self)
        self.footer.setStyleSheet(QUIET_STYLE)

        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(self.chart_area)
        splitter.addWidget(table_pane)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([520, 160] if spec.chart.kind == "stacks" else [320, 280])   # a flame graph needs rows
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(header)
        layout.addWidget(self.error_label)
        layout.addWidget(self.note_label)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.footer)
        self._sized_columns = False
        self._generation = 0
        self.set_state("starting")

    # --- data -------------------------------------------------------------------------------------
    def feed(self, records: list[dict]) -> None:
        """Queue one batch as it is (no per-record work here: this runs once per controller signal)."""
        self.pending.append(records)
        self.records_seen += len(records)

    def refresh(self) -> None:
        """Apply what arrived since the last call: one model reset, one chart redraw at most."""
        for step in self.refresh_steps():
            step()

    def refresh_steps(self) -> list[Callable[[], object]]:
        """refresh() as separate steps (the table, each chart's records, each chart's redraw), for the
        window to run in separate turns of its event loop, so no one turn holds the GUI for all of it.
        The records are taken now; a step that runs after a reset() does nothing."""
        steps: list[Callable[[], object]] = []
        generation = self._generation
        if self.pending:
            batch = [record for records in self.pending for record in records]
            self.pending.clear()
            steps.append(lambda: self._apply_to_table(batch))
            steps += [functools.partial(chart.add_records, batch) for chart in self.live_charts()]
            steps.append(self._update_labels)
        steps += [chart.redraw for chart in self.live_charts()]
        return [functools.partial(self._step, generation, step) for step in steps]

    def _step(self, generation: int, step: Callable[[], object]) -> None:
        if generation == self._generation:
            step()

    def _apply_to_table(self, batch: list[dict]) -> None:
        for record in [r for r in batch if r.get("kind") in FEW]:
            kind = record["kind"]
            if kind == "meta" and isinstance(record.get("pid"), int):
                self.pid = record["pid"]
            elif kind == "summary":
                self.totals.add(record)
                if record.get("partial") is True:
                    self.final_partial = record
                else:
                    self.last_summary, self.final_partial = record, None
            elif kind == "lost":
                self.lost += int(record.get("count") or 0)
            elif kind == "note":
                self.show_note(record)
        changed = self.model.add_records(batch)
        if changed and self.group_by_cgroup.isChecked():
            self._fill_cgroups()
        if changed and group_tree.has_groups(self.model.rows):
            self._show_tree()
        elif changed and not self._sized_columns:
            self.table.resizeColumnsToContents()
            self._sized_columns = True

    def show_note(self, record: dict) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(record["ts"])) if isinstance(record.get("ts"), (int, float)) else ""
        self.notes.append(f"{stamp}  {record.get('text') or record.get('action') or 'note'}".strip())
        self.note_label.setText("\n".join(self.notes[-NOTES_SHOWN:]))
        self.note_label.setToolTip("\n".join(self.notes))
        self.note_label.show()

    def live_charts(self) -> list[LiveChart]:
        return [chart for chart in self.charts if isinstance(chart, LiveChart)]

    def time_charts(self) -> list[MetricChart]:
        return [chart for chart in self.charts if isinstance(chart, MetricChart) and chart.time_based]

    # --- export -----------------------------------------------------------------------------------
    def shown_chart(self) -> QWidget:
        area = self.chart_area
        return area.currentWidget() if hasattr(area, "currentWidget") else area

    def ask_export(self, what: str) -> None:
        """Ask where (the dialog is the only wait on the GUI thread), then write off it."""
        name = self.spec.name if what == "csv" else f"{self.spec.name}-chart"
        path, _ = QFileDialog.getSaveFileName(self, f"Export {self.spec.name}", os.path.join(os.getcwd(), f"{name}.{what}"),
                                              "CSV (*.csv)" if what == "csv" else "PNG image (*.png)")
        if path and what == "csv":
            self.export_csv(path)
        elif path:
            self.export_png(path)

    def table_export(self) -> tuple[list[str], list[list]]:
        """The header and the rows the current view shows (the tree's groups each before its details)."""
        if self.views.currentWidget() is self.cgroup_table:     # grouped by cgroup: those rows
            return [csv_header(label, unit) for _, label, unit in self.cgroup_model.columns], \
                shown_rows(self.cgroup_proxy)
        model = self.tree_proxy if self.views.currentWidget() is self.tree else self.proxy
        header = [csv_header(label, unit) for _, label, unit in self.model.columns]
        return header, shown_rows(model)

    def export_csv(self, path: str) -> None:
        header, rows = self.table_export()
        self.exporter.start(lambda: write_csv(path, header, rows))

    def export_png(self, path: str) -> None:
        image = self.shown_chart().grab().toImage()        # pixels on the GUI thread, the file off it
        self.exporter.start(lambda: write_png(path, image))

    def _exported(self, message: str, ok: bool) -> None:
        message = html.escape(message)
        self.export_note = message if ok else f"<span style='color:{BAD}'>{message}</span>"
        self._update_labels()

    def _drill(self, index: QModelIndex) -> None:
        column = self._pid_column()
        if column is not None:
            pid = self.proxy.index(index.row(), column).data(SORT_ROLE)
            if isinstance(pid, int) and pid > 0:
                self.drill_requested.emit(pid)

    def _pid_column(self) -> int | None:
        names = [key for key, _, _ in self.model.columns]
        return names.index("pid") if "pid" in names else None

    def show_process(self, pid: int | None) -> None:
        """Drill-down: only this process's rows (none for a metric whose rows name no process)."""
        self.pid_proxy.set_pid(pid, self._pid_column())
        source = self.model if pid is None else self.pid_proxy
        if self.proxy.sourceModel() is not source:
            self.proxy.setSourceModel(source)
        self.drill_button.setText(f"Showing process {pid} only — show all" if pid is not None else "")
        self.drill_button.setVisible(pid is not None)
        for chart in self.live_charts():
            chart.set_pid(pid)
        self._choose_view()

    def _choose_view(self) -> None:
        """A drilled process: the table (the tree shows every group; the table filters); else the
        cgroup table when grouping by cgroup, the tree for group/detail rows, the table otherwise."""
        if self.pid_proxy.pid is not None:
            self.views.setCurrentWidget(self.table)
        elif self.group_by_cgroup.isChecked():
            self.views.setCurrentWidget(self.cgroup_table)
        elif group_tree.has_groups(self.model.rows):
            self.views.setCurrentWidget(self.tree)
        else:
            self.views.setCurrentWidget(self.table)

    def _group_toggled(self, on: bool) -> None:
        if on:
            self._fill_cgroups()
            self.cgroup_table.resizeColumnsToContents()
        self._choose_view()

    def _fill_cgroups(self) -> None:
        self.cgroup_model.set_rows(cgroup_groups.aggregate(self.model.rows, self.model.columns))

    def _open_cgroup(self, index: QModelIndex) -> None:
        """A cgroup's own rows: the filter box holds its path, the grouping is off."""
        path = self.cgroup_proxy.index(index.row(), 0).data()
        if path:
            self.filter_box.setText(path)
            self.group_by_cgroup.setChecked(False)

    def _show_tree(self) -> None:
        if self.pid_proxy.pid is not None:
            return
        headers = [self.model.headerData(i, Qt.Orientation.Horizontal) for i in range(self.model.columnCount())]
        first = self.views.currentWidget() is not self.tree
        group_tree.fill(self.tree_model, self.model.rows, self.model.columns, headers)
        self._choose_view()
        self.tree.expandAll()
        if first:
            for column in range(self.tree_model.columnCount()):
                self.tree.resizeColumnToContents(column)

    def headline(self) -> tuple[str, dict] | None:
        """(what the summary line covers, the summary it shows): an opened session's whole run, else the
        newest whole interval (a partial one only while it is the only one)."""
        if self.state == "recorded" and self.totals.intervals:
            n = self.totals.intervals
            return f"whole session, {n:,} interval{'s' if n > 1 else ''}", self.totals.record()
        shown = self.last_summary or self.final_partial
        if shown is None:
            return None
        return ("final interval, partial" if shown is self.final_partial else ""), shown

    def partial_note(self) -> str:
        if self.final_partial is None:
            return ""
        seconds = self.final_partial.get("interval_s")
        took = f"{seconds:g} s" if isinstance(seconds, (int, float)) else "cut short"
        return f"final interval {self.final_partial.get('interval', '')} partial ({took}): not charted"

    def _update_labels(self) -> None:
        found = self.headline()
        if found is not None:
            what, summary = found
            text = self.spec.summary_text(summary)
            self.summary_label.setText(f"{what}:  {text}" if what else text)
            whole = self.spec.summary_text(summary, limit=100).replace("  ·  ", "\n")
            self.summary_label.setToolTip(f"{what}\n{whole}" if what else whole)
        parts = []
        if self.model.kind == "row" and self.model.interval is not None:
            parts.append(f"interval {self.model.interval}")
        if self.partial_note():
            parts.append(self.partial_note())
        parts.append(f"{self.model.rowCount():,} rows shown")
        parts.append(f"{self.records_seen:,} records received")
        if self.lost:
            parts.append(f"<span style='color:{BAD}'>{self.lost:,} events lost in the kernel</span>")
        if self.export_note:
            parts.append(self.export_note)
        self.footer.setText("  ·  ".join(parts))

    def reset(self) -> None:
        """A new run of the metric: empty table, chart and counters."""
        self.pending.clear()
        self._generation += 1               # steps of a refresh still queued in the window do nothing
        self.records_seen = self.lost = 0
        self.pid, self.last_summary, self.final_partial = None, None, None
        self.notes = []
        self.note_label.clear()
        self.note_label.hide()
        self.totals = RunTotals()
        self.model.clear()
        self.cgroup_model.set_rows([])
        for chart in self.live_charts():
            chart.clear()
        self.summary_label.clear()
        self._update_labels()

    # --- state ------------------------------------------------------------------------------------
    def set_state(self, state: str, message: str = "") -> None:
        self.state = state
        self.state_label.setText(f"● {state}")
        self.state_label.setStyleSheet(STATE_STYLE.get(state, ""))
        self.stop_button.setEnabled(state in ("starting", "running"))
        self.retry_button.setVisible(state == "failed")
        self.error_label.setText(message)
        self.error_label.setVisible(bool(message))
