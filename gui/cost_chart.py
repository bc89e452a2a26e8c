"""The profiler's own cost over time, beside the overhead table (as bpftop draws its programs' cost):
the BPF programs' kernel CPU, the metric processes' and the window's user CPU, and their total, each a
share of one CPU, one point per overhead sample (once a second), the last `history` samples; and the
overhead budget in force at each sample (gui/budget_panel.py), dashed, in the same unit."""

from __future__ import annotations

import html
import time
from collections import deque

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from gui.chart_axes import ClockAxis, CompactAxis
from gui.style import BUDGET, PALETTE, TEXT

SERIES = (("total", "total (% of one CPU)", TEXT), ("bpf", "BPF programs", PALETTE[0]),
          ("processes", "metric processes and window", PALETTE[1]))


class CostChart(QWidget):
    def __init__(self, history: int = 600, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.points: dict[str, tuple[deque, deque]] = {
            key: (deque(maxlen=history), deque(maxlen=history)) for key, _, _ in SERIES}
        self.plot = pg.PlotWidget(self, axisItems={"left": CompactAxis(), "bottom": ClockAxis()})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("left", "% of one CPU")
        self.lines = {key: self.plot.plot(pen=pg.mkPen(colour, width=2), name=name) for key, name, colour in SERIES}
        # the budget: a series, not a line across, so the plot's range keeps it in view
        self.budget: float | None = None          # % of one CPU
        self.budget_points: tuple[deque, deque] = (deque(maxlen=history), deque(maxlen=history))
        self.budget_curve = self.plot.plot(pen=pg.mkPen(BUDGET, width=1, style=Qt.PenStyle.DashLine), name="budget")
        # the legend above the plot, not on it: it hid the lines and ran past a narrow plot's edge; an
        # entry is never split, the entries wrap
        self.legend = QLabel("&nbsp;&nbsp; ".join(
            f"<span style='color:{colour}'>■</span>&nbsp;{html.escape(name).replace(' ', '&nbsp;')}"
            for _, name, colour in (*SERIES, ("budget", "budget", BUDGET))), self)
        self.legend.setObjectName("cost_legend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.legend)
        layout.addWidget(self.plot, 1)

    def add_sample(self, rows: list[dict], now: float | None = None) -> None:
        """One overhead sample: the subtotal and app rows carry each part (programs' rows are in them)."""
        now = time.time() if now is None else now
        totals = [r for r in rows if r.get("type") in ("subtotal", "app")]
        if not totals:
            return
        bpf = sum(r.get("cpu_pct") or 0.0 for r in totals)
        processes = sum(r.get("proc_cpu_pct") or 0.0 for r in totals)
        for key, value in (("total", bpf + processes), ("bpf", bpf), ("processes", processes)):
            xs, ys = self.points[key]
            xs.append(now)
            ys.append(value)
        if self.budget is not None:
            self.budget_points[0].append(now)
            self.budget_points[1].append(self.budget)
        if self.isVisible():
            self.draw()

    def set_budget(self, one_cpu_pct: float | None) -> None:
        """The budget from the next sample on, as a share of one CPU (its share of the machine times the
        machine's CPUs); None: none."""
        self.budget = one_cpu_pct

    def draw(self) -> None:
        for key, (xs, ys) in self.points.items():
            self.lines[key].setData(list(xs), list(ys))
        self.budget_curve.setData(list(self.budget_points[0]), list(self.budget_points[1]))

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - drawn when the overhead tab is shown
        self.draw()
        super().showEvent(event)
