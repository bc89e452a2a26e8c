"""The chart of a metric with stacks (Chart kind "stacks": offcpu, compmem, cpuprofile): a flame graph of the
chosen range beside its top functions, a search, a baseline to compare with, and "Export folded…".

Views (gui/profile_views.py): the flame graph, bottom-up, and the sandwich of the function picked in Top
functions, whose direct callers and callees the "Callers & callees" tab lists (the butterfly). Top
functions follow the flame graph: those of the zoomed frame's stacks, of the stacks matching the search.
Python stacks are shown without the interpreter's frames, and an off-CPU metric's stacks end at the frame
that blocked, unless the toggles ask for them. A sampling metric's samples are also shown as time.

Ranges: the latest interval, the last N seconds, or the whole run (gui/profile_store.py keeps all three up
to date as records arrive). "Pin baseline" keeps the profile shown now; "Baseline from file…" takes the
metric's profile in a saved session (all of it or a span), "Baseline from collector…" a selection's from
a collector (gui/baseline_dialogs.py, read off the GUI thread). "Compare" then colours the live graph by
each frame's change of share against the baseline (shares per side: runs of different lengths compare)
and lists the functions by change; the status line names where the baseline came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

import config
from gui.baseline import Baseline
from gui.baseline_dialogs import CollectorBaselineDialog, FileBaselineDialog
from gui.fitting import TwoLineHeaders, fit_columns
from gui.flamegraph import FlameGraph, format_weight
from gui.live import LiveChart
from gui.models import SORT_ROLE, ColumnsModel
from gui.profile_store import Aggregate, ProfileStore
from gui.profile_views import VIEWS, ProfileViews
from gui.style import GREW, QUIET_STYLE, SHRANK
from profile_data import Frame, Functions, differential, functions_in, sandwich, to_folded
from profile_data.display import weight_text
from profile_data.records import profile_unit

RANGE_LABELS = {"latest": "latest interval", "window": "last N seconds", "whole": "whole run"}
TABLE_ROWS = 200            # functions listed; the graph and the export have every stack
BURST_DRAW_S = 1.0          # while a burst is taken, at most one draw per this many seconds


def _shown_unit(unit: str) -> tuple[str, float]:
    """The unit a table shows weights in, and the factor from the profile's unit."""
    return {"ns": ("ms", 1e-6), "bytes": ("bytes", 1.0)}.get(unit, ("count", 1.0))


def _table(parent: QWidget, model: ColumnsModel) -> QTableView:
    proxy = TwoLineHeaders(parent)           # "Total\n(ms)": a column as narrow as its numbers
    proxy.setSourceModel(model)
    proxy.setSortRole(SORT_ROLE)
    view = QTableView(parent)
    view.setModel(proxy)
    view.setSortingEnabled(True)
    view.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.verticalHeader().setVisible(False)
    view.verticalHeader().setDefaultSectionSize(20)
    # the numbers whole ("Total" was cut off at the pane's edge), the module narrow, the function the rest
    fit_columns(view, stretch=(0,), narrow=(model.columnCount() - 1,))
    return view


class ProfilePanel(LiveChart):
    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None) -> None:
        super().__init__(spec, parent)
        self.unit = profile_unit(self.chart.unit)
        self.store = ProfileStore(self.unit, self.chart.y, snapshot=self.chart.snapshot,
                                  shown="latest" if self.chart.snapshot else "whole", blocked=self.chart.blocked)
        self.baseline_label = ""
        # the collector's URL and token as the window has them configured, for "Baseline from collector…"
        self.collector_settings: Callable[[], tuple[str, str]] = lambda: ("", "")
        self.baseline_dialog: FileBaselineDialog | CollectorBaselineDialog | None = None
        self.loaded_baseline: Baseline | None = None    # from a file or a collector: not of this run, so kept
        self.function: Frame | None = None        # the sandwich's and the butterfly's function
        self._top_frames: list[Frame] = []
        self._drawn_at = 0.0

        self.range_box = QComboBox(self)
        for key, label in RANGE_LABELS.items():
            self.range_box.addItem(label, key)
        self.range_box.setCurrentIndex(list(RANGE_LABELS).index(self.store.range))
        self.range_box.currentIndexChanged.connect(lambda _: self.set_range(self.range_box.currentData()))
        self.window_box = QSpinBox(self)
        self.window_box.setRange(1, int(self.store.max_window_s))
        self.window_box.setValue(int(self.store.window_s))
        self.window_box.setSuffix(" s")
        self.window_box.valueChanged.connect(self.set_window)
        if self.chart.snapshot:
            for box in (self.range_box, self.window_box):
                box.setEnabled(False)
                box.setToolTip(f"each interval of {spec.name} restates the whole state: the newest is shown")
        self.search_box = QLineEdit(self)
        self.search_box.setPlaceholderText("search frames")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.textChanged.connect(self.set_search)
        self.match_label = QLabel(self)
        self.reset_button = QPushButton("Reset zoom", self)
        self.pin_button = QPushButton("Pin baseline", self)
        self.pin_button.setToolTip("keep the profile shown now, to compare the live one with")
        self.pin_button.clicked.connect(self.pin_baseline)
        self.file_baseline_button = QPushButton("Baseline from file…", self)
        self.file_baseline_button.setToolTip(f"compare with {spec.name}'s profile in a saved session, "
                                             "all of it or a span")
        self.file_baseline_button.clicked.connect(lambda: self.ask_baseline("file"))
        self.collector_baseline_button = QPushButton("Baseline from collector…", self)
        self.collector_baseline_button.setToolTip("compare with a collector's profile of a metric's hosts, runs "
                                                  "and time range")
        self.collector_baseline_button.clicked.connect(lambda: self.ask_baseline("collector"))
        self.compare_box = QCheckBox("Compare", self)
        self.compare_box.setToolTip("colour frames by their change of share against the baseline: "
                                    "grew red, shrank blue")
        self.compare_box.setEnabled(False)
        self.compare_box.toggled.connect(lambda _: self._force_draw())
        self.export_button = QPushButton("Export folded…", self)
        self.export_button.setToolTip(f"write every stack of the range shown as folded lines, weights in "
                                      f"{self.unit} (flamegraph.pl, speedscope)")
        self.export_button.clicked.connect(lambda: self.export_folded())
        self.view_box = QComboBox(self)
        for key, label in VIEWS.items():
            self.view_box.addItem(label, key)
        self.view_box.setToolTip("flame graph: callers above callees; bottom-up: where time ends, its callers "
                                 "below; sandwich: the function picked in Top functions, callers above, callees below")
        self.view_box.currentIndexChanged.connect(lambda _: self.set_view(self.view_box.currentData()))
        self.interpreter_box = QCheckBox("Interpreter frames", self)
        self.interpreter_box.setToolTip("Python stacks: also the interpreter's own frames (python3.x, libpython) "
                                        "between the program's Python functions")
        self.interpreter_box.toggled.connect(lambda on: self.set_frames(interpreter=on))
        self.scheduler_box = QCheckBox("Scheduler frames", self)
        self.scheduler_box.setToolTip("also the scheduler's frames (__schedule, schedule, ...) that end every "
                                      "block: without them, each stack ends where its thread blocked")
        self.scheduler_box.setChecked(self.store.scheduler)
        self.scheduler_box.setVisible(self.chart.blocked)
        self.scheduler_box.toggled.connect(lambda on: self.set_frames(scheduler=on))

        controls = QHBoxLayout()
        controls.addWidget(QLabel("Range", self))
        controls.addWidget(self.range_box)
        controls.addWidget(self.window_box)
        controls.addWidget(self.search_box, 1)
        controls.addWidget(self.match_label)
        controls.addWidget(self.reset_button)
        controls.addWidget(self.pin_button)
        controls.addWidget(self.compare_box)
        controls.addWidget(self.export_button)
        view_controls = QHBoxLayout()
        view_controls.addWidget(QLabel("View", self))
        view_controls.addWidget(self.view_box)
        view_controls.addWidget(self.interpreter_box)
        view_controls.addWidget(self.scheduler_box)
        view_controls.addStretch(1)
        view_controls.addWidget(self.file_baseline_button)
        view_controls.addWidget(self.collector_baseline_button)

        self.views = ProfileViews(self)
        self.graph: FlameGraph = self.views.graph
        self.graph.zoom_changed.connect(self._zoomed)
        self.reset_button.clicked.connect(self.graph.reset_zoom)
        scroll = QScrollArea(self)
        scroll.setWidget(self.views)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

        shown, _ = _shown_unit(self.unit)
        # samples are also time, once the records say their frequency (cpuprofile's summary)
        sampled = self.unit == "samples"
        self_time, total_time = ([("self_time", "Self time", "ms")], [("total_time", "Total time", "ms")]) \
            if sampled else ([], [])
        self.top_model = ColumnsModel([("function", "Function", ""), ("self", "Self", shown), *self_time,
                                       ("self_pct", "Self %", "pct"), ("total", "Total", shown), *total_time,
                                       ("total_pct", "Total %", "pct"), ("module", "Module", "")], self)
        self.butterfly_model = ColumnsModel([("function", "Function", ""), ("relation", "Is", ""),
                                             ("total", "Total", shown), *total_time, ("pct", "Share", "pct"),
                                             ("module", "Module", "")], self)
        self.change_model = ColumnsModel([("function", "Function", ""), ("change_pct", "Change (points)", ""),
                                          ("baseline_pct", "Baseline %", "pct"), ("current_pct", "Now %", "pct"),
                                          ("self_change_pct", "Self change", ""), ("module", "Module", "")], self)
        self.top_table, self.change_table = _table(self, self.top_model), _table(self, self.change_model)
        self.butterfly_table = _table(self, self.butterfly_model)
        for view in (self.top_table, self.change_table, self.butterfly_table):
            view.doubleClicked.connect(lambda index, v=view: self.search_box.setText(
                str(v.model().index(index.row(), 0).data())))
        self.top_table.clicked.connect(self._picked)
        self.tables = QTabWidget(self)
        self.tables.addTab(self.top_table, "Top functions")
        self.tables.addTab(self.change_table, "By change")
        self.tables.addTab(self.butterfly_table, "Callers && callees")
        self.tables.setTabEnabled(1, False)

        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(scroll)
        splitter.addWidget(self.tables)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([600, 400])          # the graph first, the tables' numbers whole (gui/fitting.py)
        self.legend = QLabel(self)
        self.legend.hide()
        self.status = QLabel(self)
        self.status.setStyleSheet(QUIET_STYLE)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addLayout(view_controls)
        layout.addWidget(splitter, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.status, 1)
        bottom.addWidget(self.legend)
        layout.addLayout(bottom)
        self._update_window_box()

    # --- records ------------------------------------------------------------------------------------
    def add_records(self, records: Sequence[dict]) -> None:
        """Queue only: the stacks are taken by redraw(), within the store's time budget."""
        self.store.add_records(records)

    def redraw(self, force: bool = False) -> bool:
        """Take queued stacks for at most the store's budget (visible or not), then draw if shown; while
        a burst is still being taken, draw once a second rather than on every tick."""
        if self.store.process():
            self.dirty = True
        if self.store.backlog and not force and time.monotonic() - self._drawn_at < BURST_DRAW_S:
            return False
        drew = super().redraw(force)
        if drew:
            self._drawn_at = time.monotonic()
        return drew

    def clear(self) -> None:
        """A new run (or an opened session): a baseline loaded from a file or a collector stays to compare
        it with; a pinned one was of the run before and goes."""
        self.store.clear()
        if self.loaded_baseline is not None:
            self.store.pin(self.loaded_baseline.profile)
        else:
            self.baseline_label = ""
        super().clear()

    # --- choices ------------------------------------------------------------------------------------
    def set_range(self, which: str) -> None:
        if which != self.store.range:
            self.store.set_range(which)
        if self.range_box.currentData() != which:
            self.range_box.setCurrentIndex(list(RANGE_LABELS).index(which))
        self._update_window_box()
        self._force_draw()

    def set_window(self, seconds: int) -> None:
        self.store.set_window(float(seconds))
        self._force_draw()

    def _update_window_box(self) -> None:
        self.window_box.setVisible(self.store.range == "window")

    def set_search(self, text: str) -> None:
        self.views.set_search(text)
        self._show_match()
        self._fill_top(self.current())

    def set_view(self, view: str) -> None:
        """Show the flame graph, bottom-up, or the sandwich of the function picked."""
        self.views.set_view(view)
        if view == "sandwich" and self.function is None and self._top_frames:
            self.function = self._top_frames[0]          # the heaviest by self, until another is picked
        if self.view_box.currentData() != view:
            self.view_box.setCurrentIndex(list(VIEWS).index(view))
        self._force_draw()

    def set_frames(self, interpreter: bool | None = None, scheduler: bool | None = None) -> None:
        """Show or leave out the interpreter's frames (Python stacks) and the scheduler's (blocks)."""
        self.store.set_frames(interpreter, scheduler)
        for box, on in ((self.interpreter_box, self.store.interpreter), (self.scheduler_box, self.store.scheduler)):
            if box.isChecked() != on:
                box.setChecked(on)
        self._force_draw()

    def set_function(self, frame: Frame | None) -> None:
        """The function the sandwich and the butterfly are of."""
        self.function = frame
        view = self.current()
        self.views.draw(view.tree, self.unit, self.store.period_ns, frame)
        self._fill_butterfly(view)

    def _picked(self, index: Any) -> None:
        row = self.top_table.model().mapToSource(index).row()
        if 0 <= row < len(self._top_frames):
            self.set_function(self._top_frames[row])

    def _zoomed(self) -> None:
        self._fill_top(self.current())

    def _show_match(self) -> None:
        shown = bool(self.graph.search)
        self.match_label.setText(f"matched {100.0 * self.graph.matched_share:.2f} %" if shown else "")

    def current(self) -> Aggregate:
        return self.store.shown

    def pin_baseline(self) -> None:
        """Keep the profile shown now as the baseline (the live one goes on changing); Compare is offered
        once its tree is built, within the store's budget."""
        self.store.pin()
        self.loaded_baseline = None
        self.baseline_label = (f"baseline: {RANGE_LABELS[self.store.range]} pinned at {time.strftime('%H:%M:%S')}, "
                               f"{format_weight(self.current().profile.total, self.unit)}")
        self.compare_box.setEnabled(False)
        self._force_draw()

    def ask_baseline(self, source: str) -> FileBaselineDialog | CollectorBaselineDialog:
        """Open the dialog that reads a baseline from a saved session ("file") or a collector; it hands
        the baseline to set_baseline once read, off the GUI thread."""
        if self.baseline_dialog is not None:
            self.baseline_dialog.close()
            self.baseline_dialog.deleteLater()
        if source == "file":
            dialog: FileBaselineDialog | CollectorBaselineDialog = FileBaselineDialog(self.spec, self)
        else:
            dialog = CollectorBaselineDialog(self.spec, *self.collector_settings(), parent=self)
        dialog.chosen.connect(self.set_baseline)
        self.baseline_dialog = dialog
        dialog.open()
        return dialog

    def set_baseline(self, baseline: Baseline) -> None:
        """Compare with a baseline read from elsewhere (its tree is built within the store's budget)."""
        self.store.pin(baseline.profile)
        self.loaded_baseline, self.baseline_label = baseline, baseline.label
        self.compare_box.setChecked(True)
        self._force_draw()

    def comparing(self) -> bool:
        return self.store.baseline_ready and self.compare_box.isChecked()

    def _force_draw(self) -> None:
        self.dirty = True
        self.redraw(force=True)

    # --- drawing ------------------------------------------------------------------------------------
    def draw(self) -> None:
        view = self.current()
        self.compare_box.setEnabled(self.store.baseline_ready)
        baseline = self.store.baseline if self.comparing() else None
        self.graph.set_tree(view.tree, self.unit, baseline.tree if baseline else None)
        self.views.draw(view.tree, self.unit, self.store.period_ns, self.function)
        self._show_match()
        self._fill_top(view)
        self._fill_butterfly(view)
        self.tables.setTabEnabled(1, baseline is not None)
        self.tables.setTabToolTip(1, self.baseline_label if baseline is not None else "")
        self.legend.setVisible(baseline is not None)
        if baseline is not None:
            self.graph.boxes()                          # lays out now: the strongest change is known then
            strongest = self.graph.strongest_change
            self.legend.setText(f"<span style='background:{GREW}'>&nbsp;grew&nbsp;</span> "
                                f"<span style='background:{SHRANK};color:white'>&nbsp;shrank&nbsp;</span> "
                                f"share against the baseline; full colour at ±{strongest:.2f} points")
        if baseline is not None:
            self.change_model.set_rows([
                {"function": c.frame.name, "module": c.frame.module, "change_pct": round(c.change_pct, 2),
                 "baseline_pct": round(c.baseline_pct, 2), "current_pct": round(c.current_pct, 2),
                 "self_change_pct": round(c.self_change_pct, 2)}
                for c in differential(baseline.functions, view.functions, TABLE_ROWS)])
        self.status.setText(self.status_text(view))

    def _shown(self, value: float) -> float | int:
        """A weight as the tables show it: ms from ns; samples and bytes as whole numbers."""
        return value * _shown_unit(self.unit)[1] if self.unit == "ns" else round(value)

    def _times(self, **weights: float) -> dict[str, float]:
        """Samples as ms, once the frequency is known."""
        period = self.store.period_ns
        return {k: round(v * period / 1e6, 3) for k, v in weights.items()} if period > 0 else {}

    def _fill_top(self, view: Aggregate) -> None:
        """Top functions of what the flame graph shows: the zoomed frame's stacks, those matching the search."""
        zoomed, search = self.graph.zoom_path, self.graph.search
        functions: Functions = functions_in(view.tree, zoomed, search) if zoomed or search else view.functions
        stats = functions.stats(TABLE_ROWS)
        self._top_frames = [s.frame for s in stats]
        self.top_model.set_rows([
            {"function": s.frame.name, "module": s.frame.module, "self": self._shown(s.self_weight),
             "self_pct": round(s.self_pct, 2), "total": self._shown(s.total_weight), "total_pct": round(s.total_pct, 2),
             **self._times(self_time=s.self_weight, total_time=s.total_weight)}
            for s in stats])
        where = [f"in {zoomed[-1].name}"] if zoomed else []
        where += [f"matching “{search}”"] if search else []
        title = " ".join(["Top functions", *where])
        self.tables.setTabText(0, title if len(title) <= 40 else title[:39] + "…")
        self.tables.setTabToolTip(0, title + " (% of those stacks)" if where else "")

    def _fill_butterfly(self, view: Aggregate) -> None:
        """The picked function's direct callers and callees, each with the weight of the stacks through it."""
        cut = self.views.sandwiched if self.views.view == "sandwich" else None     # drawn just now
        if cut is None and self.function is not None:
            cut = sandwich(view.tree, self.function)
        rows = []
        if cut is not None and cut.total > 0:
            pct = 100.0 / cut.total
            rows = [{"function": f.name, "relation": relation, "total": self._shown(w), "pct": round(w * pct, 2),
                     "module": f.module, **self._times(total_time=w)}
                    for relation, pairs in (("caller", cut.callers_of()), ("self", [(cut.frame, cut.self_weight)]),
                                            ("callee", cut.callees_of()))
                    for f, w in pairs]
        self.butterfly_model.set_rows(rows)
        self.tables.setTabToolTip(2, f"direct callers and callees of {self.function.name}" if self.function
                                  else "pick a function in Top functions")

    def status_text(self, view: Aggregate) -> str:
        parts = [f"{len(view.profile):,} stacks",
                 f"{weight_text(view.profile.total, self.unit, self.store.period_ns)} in all"]
        span = self.store.span_s()
        if span:
            parts.append(f"over {span:,.0f} s")
        if self.store.backlog:
            parts.append(f"{self.store.backlog:,} stacks still to take")
        if self.store.dropped:
            parts.append(f"{self.store.dropped:,} stack records dropped (arriving faster than taken)")
        if self.store.folded_away:
            parts.append(f"{self.store.folded_away:,} stacks past {self.store.max_stacks:,} summed as [other stacks]")
        if self.baseline_label:
            parts.append(self.baseline_label)
        return "  ·  ".join(parts)

    # --- export -------------------------------------------------------------------------------------
    def export_folded(self, path: str | None = None) -> str | None:
        """Write every stack of the range shown as folded lines to `path` (asked for when None)."""
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Export folded stacks", f"{self.spec.name}.folded",
                                                  "Folded stacks (*.folded *.txt)")
            if not path:
                return None
        with open(path, "w") as f:
            f.write(to_folded(self.store.range_profile()))
        return path
