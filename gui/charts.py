"""A metric's chart, chosen by its registry entry (config.Chart.kind): a time series for rates, bars for
log2 histograms, a scatter of per-event values, or a flame graph of its stacks (gui/profile_panel.py).

Every chart keeps a bounded history and only marks itself dirty when records arrive (gui/live.py).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

import config
from gui.live import LiveChart
from gui.models import UNIT_SUFFIX
from gui.profile_panel import ProfilePanel
from gui.style import PALETTE, TEXT

pg.setConfigOptions(background="w", foreground=TEXT, antialias=False)
MAX_SERIES = len(PALETTE)


class ClockAxis(pg.AxisItem):
    """Wall-clock ticks as HH:MM:SS, one label per ~100 px, on whole seconds (or minutes, hours)."""

    STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)

    def __init__(self) -> None:
        super().__init__("bottom")

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N802, N803
        wanted = (maxVal - minVal) / max(2.0, size / 100.0)
        return [(next((s for s in self.STEPS if s >= wanted), self.STEPS[-1]), 0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [time.strftime("%H:%M:%S", time.localtime(v)) for v in values]


class CompactAxis(pg.AxisItem):
    """Numbers as 950, 1.2k, 3.4M rather than 1.2e+06."""

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)     # no "(x0.001)" in the label: the ticks carry the scale

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [compact_number(v * scale) for v in values]


def compact_number(value: float) -> str:
    for suffix, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.4g}{suffix}"
    return f"{value:.4g}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class MetricChart(LiveChart):
    """A pyqtgraph plot fed by records."""

    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None) -> None:
        super().__init__(spec, parent)
        self.plot = pg.PlotWidget(self, axisItems={"left": CompactAxis()})
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        unit = UNIT_SUFFIX.get(self.chart.unit, "")
        ylabel = self.chart.label or self.chart.y
        self.plot.setLabel("left", ylabel if not unit or unit in ylabel else f"{ylabel} ({unit})")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def series_name(self, record: dict) -> str:
        if self.chart.series:
            return str(record.get(self.chart.series, "?"))
        return self.chart.label or self.chart.y


class TimeSeriesChart(MetricChart):
    """y over wall-clock time, one line per series value (at most MAX_SERIES), last `history` points."""

    def __init__(self, spec: config.MetricSpec, history: int = 600, parent: QWidget | None = None) -> None:
        super().__init__(spec, parent)
        self.history = history
        self.keep = history * MAX_SERIES
        self.plot.setAxisItems({"bottom": ClockAxis()})
        self.legend = self.plot.addLegend(offset=(10, 5)) if self.chart.series else None
        self.points: dict[str, tuple[deque, deque]] = {}
        self.lines: dict[str, pg.PlotDataItem] = {}

    def take(self, record: dict) -> None:
        y, ts = _number(record.get(self.chart.y)), _number(record.get("ts"))
        if y is None or ts is None:
            return
        name = self.series_name(record)
        if name not in self.points:
            if len(self.points) >= MAX_SERIES:
                return
            self.points[name] = (deque(maxlen=self.history), deque(maxlen=self.history))
        xs, ys = self.points[name]
        xs.append(ts)
        ys.append(y)

    def draw(self) -> None:
        for name, (xs, ys) in self.points.items():
            line = self.lines.get(name)
            if line is None:
                color = PALETTE[len(self.lines) % len(PALETTE)]
                line = self.plot.plot(pen=pg.mkPen(color, width=2), name=name)
                self.lines[name] = line
            line.setData(list(xs), list(ys))

    def clear(self) -> None:
        super().clear()
        self.points.clear()
        for line in self.lines.values():
            self.plot.removeItem(line)
        self.lines.clear()
        if self.legend is not None:
            self.legend.clear()


def bucket_label(lo: Any) -> str:
    """A log2 bucket by its lower bound: 1, 2, 4 ... 512, 1K, 2K ... (bounds are powers of two)."""
    n = int(lo)
    for suffix, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


class HistogramChart(MetricChart):
    """The latest interval's log2 histogram (records of kind hist named chart.series) as bars."""

    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None) -> None:
        super().__init__(spec, parent)
        self.keep = 1
        self.bars: pg.BarGraphItem | None = None
        self.latest: dict | None = None
        self.plot.setLabel("left", "count")
        unit = self.chart.unit or self.chart.label
        self.plot.setLabel("bottom", unit)

    def wants(self, record: dict) -> bool:
        if record.get("kind") != "hist" or not isinstance(record.get("buckets"), list):
            return False
        wanted = self.chart.series or (self.latest or record).get("name")
        return record.get("name") == wanted

    def take(self, record: dict) -> None:
        self.latest = record

    def draw(self) -> None:
        buckets = [b for b in (self.latest or {}).get("buckets", []) if isinstance(b, dict)]
        if self.bars is not None:
            self.plot.removeItem(self.bars)
            self.bars = None
        if not buckets:
            return
        heights = [b.get("count", 0) for b in buckets]
        self.bars = pg.BarGraphItem(x=list(range(len(buckets))), height=heights, width=0.8, brush=PALETTE[0])
        self.plot.addItem(self.bars)
        step = max(1, -(-len(buckets) // 12))          # at most a dozen labels
        ticks = [(i, bucket_label(b.get("lo", 0))) for i, b in enumerate(buckets) if i % step == 0]
        self.plot.getAxis("bottom").setTicks([ticks])
        record = self.latest or {}
        unit = record.get("unit") or self.chart.unit
        self.plot.setLabel("bottom", f"{record.get('name', '')} ({unit})" if unit else record.get("name", ""))
        self.plot.setTitle(f"interval {record.get('interval', '')}: {sum(heights):,} in all", size="9pt")

    def clear(self) -> None:
        super().clear()
        self.latest = None


class ScatterChart(MetricChart):
    """One dot per event: y against time, coloured by series; the last `history` events."""

    def __init__(self, spec: config.MetricSpec, history: int = 2000, parent: QWidget | None = None) -> None:
        super().__init__(spec, parent)
        self.plot.setAxisItems({"bottom": ClockAxis()})
        self.legend = self.plot.addLegend(offset=(10, 5)) if self.chart.series else None
        self.keep = history
        self.events: deque[tuple[str, float, float]] = deque(maxlen=history)
        self.items: dict[str, pg.PlotDataItem] = {}

    def take(self, record: dict) -> None:
        y, ts = _number(record.get(self.chart.y)), _number(record.get("ts"))
        if y is not None and ts is not None:
            self.events.append((self.series_name(record), ts, y))

    def draw(self) -> None:
        per_series: dict[str, tuple[list, list]] = {}
        for name, ts, y in self.events:
            if name not in per_series and len(per_series) >= MAX_SERIES:
                continue
            xs, ys = per_series.setdefault(name, ([], []))
            xs.append(ts)
            ys.append(y)
        for name, item in self.items.items():
            if name not in per_series:
                item.setData([], [])
        for name, (xs, ys) in per_series.items():
            item = self.items.get(name)
            if item is None:
                color = PALETTE[len(self.items) % len(PALETTE)]
                item = self.plot.plot(pen=None, symbol="o", symbolSize=5, symbolPen=None, symbolBrush=color,
                                      name=name)
                self.items[name] = item
            item.setData(xs, ys)

    def clear(self) -> None:
        super().clear()
        self.events.clear()


CHARTS: dict[str, type[LiveChart]] = {
    "timeseries": TimeSeriesChart,
    "histogram": HistogramChart,
    "scatter": ScatterChart,
    "stacks": ProfilePanel,
}


def make_chart(spec: config.MetricSpec, parent: QWidget | None = None) -> QWidget:
    """The chart the registry entry asks for; a note instead of a crash for a kind this app lacks."""
    cls = CHARTS.get(spec.chart.kind)
    if cls is None:
        return QLabel(f"no chart of kind {spec.chart.kind!r} (known: {', '.join(CHARTS)})", parent)
    return cls(spec, parent=parent)
