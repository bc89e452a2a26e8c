"""A metric's charts, chosen by its registry entry (config.Chart.kind): a time series for rates, bars for
log2 histograms, a scatter of per-event values, a heatmap of log2 buckets over time, or a flame graph of
its stacks (gui/profile_panel.py).

Every chart keeps a bounded history and only marks itself dirty when records arrive (gui/live.py). The
plots zoom with the mouse wheel and pan by dragging (along time; the scatter in both directions), and
stop following new data until "Reset zoom"; the point under the cursor is named in the bar above the
plot (its time, series and value, from the data, not from the pixels); "Pause" freezes the picture while
records keep arriving, and resuming draws them. Each chart says which time range it shows. The charts
over time share one time range across the window (gui/time_link.py): zooming one zooms them all.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTabWidget, QVBoxLayout, QWidget

import config
from gui.chart_axes import ClockAxis, CompactAxis, axis_title, clock, unit_label, value_text
from gui.live import LiveChart
from gui.profile_panel import ProfilePanel
from gui.style import PALETTE, QUIET_STYLE, SERIES_COLOURS, TEXT
from registry import units

MAX_SERIES = len(PALETTE)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class MetricChart(LiveChart):
    """A pyqtgraph plot fed by records, under a bar: the range shown, the hovered point, Pause, Reset zoom."""

    zoom_y = False          # the wheel and a drag act along time only; y follows what is visible
    millis = False          # hover times to the millisecond (single events)
    filters_pid = False     # its records name their process, so a drill-down filters it
    time_based = False      # x is wall-clock time: joins the window's shared time range

    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None, chart: config.Chart | None = None) -> None:
        super().__init__(spec, parent, chart)
        self.value_axis = CompactAxis()
        self.plot = pg.PlotWidget(self, axisItems={"left": self.value_axis})
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setMouseEnabled(x=True, y=self.zoom_y)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.view_box = self.plot.getPlotItem().getViewBox()
        self.view_box.setAutoVisible(y=not self.zoom_y)
        self.unit = unit_label(self.chart.unit)
        # the axis title names the unit its ticks are in, which follows the range shown (µs, ms, s)
        self.value_axis.show_unit(self.chart.unit, self.chart.label or units.guess(self.chart.y)[0])
        self.marker = pg.ScatterPlotItem(size=11, pen=pg.mkPen(TEXT, width=2), brush=None)
        self.marker.setZValue(10)
        self.plot.addItem(self.marker, ignoreBounds=True)

        self.range_label = QLabel(self)
        self.range_label.setStyleSheet(QUIET_STYLE)
        self.hover_label = QLabel(self)
        self.pause_button = QPushButton("Pause", self)
        self.pause_button.setCheckable(True)
        self.pause_button.setToolTip("freeze this chart; records keep arriving and show on resume")
        self.pause_button.toggled.connect(self.set_paused)
        self.reset_button = QPushButton("Reset zoom", self)
        self.reset_button.setToolTip("wheel: zoom · drag: pan · this: show everything and follow new data")
        self.reset_button.clicked.connect(self.reset_view)
        bar = QHBoxLayout()
        bar.addWidget(self.range_label, 1)
        bar.addWidget(self.hover_label)
        bar.addWidget(self.pause_button)
        bar.addWidget(self.reset_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.plot, 1)
        self.pid: int | None = None             # drill-down: the process shown, where records name one
        self.time_link = None                   # the window's TimeLink, once joined
        self.plot.scene().sigMouseMoved.connect(self._mouse_moved)
        self.view_box.sigRangeChangedManually.connect(self._moved_by_hand)

    # --- zoom, pause, hover -----------------------------------------------------------------------
    @property
    def zoomed(self) -> bool:
        """The user zoomed or panned: the view no longer follows new data."""
        return not self.view_box.autoRangeEnabled()[0]

    def reset_view(self) -> None:
        self.follow_live()
        if self.time_link is not None:
            self.time_link.reset(self)

    def follow_live(self) -> None:
        self.view_box.enableAutoRange()
        self._show_range()

    def show_time_range(self, x0: float, x1: float) -> None:
        """Show x0..x1 along time (set by the shared time range, not by this chart's mouse)."""
        self.view_box.setXRange(x0, x1, padding=0)
        self._show_range()

    def _moved_by_hand(self, *_: object) -> None:
        self._show_range()
        if self.time_link is not None and self.zoomed:
            (x0, x1), _ = self.view_box.viewRange()
            self.time_link.zoomed(self, x0, x1)

    def set_paused(self, paused: bool) -> None:
        super().set_paused(paused)
        if self.pause_button.isChecked() != paused:
            self.pause_button.setChecked(paused)
        self.pause_button.setText("Resume" if paused else "Pause")
        self._show_range()

    def add_records(self, records: Sequence[dict]) -> None:
        super().add_records(records)
        if self.paused:
            self._show_range()

    def _mouse_moved(self, scene_pos: QPointF) -> None:
        if not self.view_box.sceneBoundingRect().contains(scene_pos):
            self.show_hover(None)
            return
        point = self.view_box.mapSceneToView(scene_pos)
        self.show_hover(self.point_at(point.x(), point.y()))

    def show_hover(self, found: tuple[float, float, str] | None) -> None:
        """Mark the point (x, y) and name it in the bar; None clears both."""
        if found is None:
            self.marker.setData([], [])
            self.hover_label.clear()
            return
        x, y, text = found
        self.marker.setData([x], [y])
        self.hover_label.setText(text)

    def point_at(self, x: float, y: float) -> tuple[float, float, str] | None:
        """The data point nearest the view coordinates (x, y): its place and its text; None if none."""
        return None

    def pixel_scale(self) -> tuple[float, float]:
        """View units per pixel along x and y, so nearness is judged as the eye sees it."""
        (x0, x1), (y0, y1) = self.view_box.viewRange()
        rect = self.view_box.sceneBoundingRect()
        return (x1 - x0) / max(1.0, rect.width()), (y1 - y0) / max(1.0, rect.height())

    # --- what the chart shows ---------------------------------------------------------------------
    def time_span(self) -> tuple[float, float] | None:
        """The first and last time of the data held, for charts over time."""
        return None

    def _show_range(self) -> None:
        parts = []
        span = self.time_span()
        if span is not None:
            if self.zoomed:
                (x0, x1), _ = self.view_box.viewRange()
                parts.append(f"zoomed: {clock(x0)} – {clock(x1)}")
            else:
                parts.append(f"{clock(span[0])} – {clock(span[1])}")
        if self.pid is not None:
            parts.append(f"process {self.pid} only" if self.filters_pid else "all processes (its records name none)")
        if self.paused:
            parts.append(f"paused, {self.held:,} new records held")
        self.range_label.setText("  ·  ".join(parts))

    def set_pid(self, pid: int | None) -> None:
        self.pid = pid
        self.dirty = True
        self.redraw(force=True)
        self._show_range()

    def series_name(self, record: dict) -> str:
        if self.chart.series:
            return str(record.get(self.chart.series, "?"))
        return self.chart.label or self.chart.y

    def legend_name(self, name: str) -> str:
        """A line's name in the legend: the series alone (the axis title names the unit, which follows
        the range shown, so a unit fixed here could contradict it)."""
        return name

    def colour(self, name: str, taken: int) -> str:
        return SERIES_COLOURS.get(name) or PALETTE[taken % len(PALETTE)]

    def draw(self) -> None:
        self.draw_data()
        self._show_range()

    def draw_data(self) -> None:
        raise NotImplementedError


class TimeSeriesChart(MetricChart):
    """y over wall-clock time, one line per series value (at most MAX_SERIES) or per declared field, last
    `history` points."""

    time_based = True

    def __init__(self, spec: config.MetricSpec, history: int = 600, parent: QWidget | None = None,
                 chart: config.Chart | None = None) -> None:
        super().__init__(spec, parent, chart)
        self.history = history
        self.keep = history * MAX_SERIES
        self.plot.setAxisItems({"bottom": ClockAxis()})
        self.legend = self.plot.addLegend(offset=(10, 5))
        self.points: dict[str, tuple[deque, deque]] = {}
        self.lines: dict[str, pg.PlotDataItem] = {}
        self.left_out: dict | None = None       # the newest summary of a partial interval, not drawn

    def wants(self, record: dict) -> bool:
        """Not a partial interval's summary: a stop's 0.3 s of shutdown made a rate spike at the line's
        end (bcctool/tool.py marks such an interval; the range label says it is left out)."""
        if not super().wants(record):
            return False
        if record.get("partial") is True:
            self.left_out, self.dirty = record, True      # drawn again, for the range label's note
            return False
        return True

    def values(self, record: dict) -> list[tuple[str, float]]:
        """(series name, y) this record adds: one per declared line, else chart.y under its series."""
        fields = self.chart.lines or ((self.chart.y, self.series_name(record)),)
        per = _number(record.get(self.chart.per)) if self.chart.per else 1.0
        if not per:
            return []
        found = []
        for field, name in fields:
            y = _number(record.get(field))
            if y is not None:
                found.append((name, y / per))
        return found

    def take(self, record: dict) -> None:
        ts = _number(record.get("ts"))
        if ts is None:
            return
        for name, y in self.values(record):
            if name not in self.points:
                if len(self.points) >= MAX_SERIES:
                    continue
                self.points[name] = (deque(maxlen=self.history), deque(maxlen=self.history))
            xs, ys = self.points[name]
            xs.append(ts)
            ys.append(y)

    def draw_data(self) -> None:
        for name, (xs, ys) in self.points.items():
            line = self.lines.get(name)
            if line is None:
                colour = self.colour(name, len(self.lines))
                line = self.plot.plot(pen=pg.mkPen(colour, width=2), name=self.legend_name(name))
                self.lines[name] = line
            line.setData(list(xs), list(ys))

    def _show_range(self) -> None:
        super()._show_range()
        if self.left_out is not None:
            seconds = self.left_out.get("interval_s")
            took = f", {seconds:g} s" if isinstance(seconds, (int, float)) else ""
            note = f"final interval (partial{took}) not drawn"
            self.range_label.setText("  ·  ".join(t for t in (self.range_label.text(), note) if t))

    def time_span(self) -> tuple[float, float] | None:
        firsts = [xs[0] for xs, _ in self.points.values() if xs]
        lasts = [xs[-1] for xs, _ in self.points.values() if xs]
        return (min(firsts), max(lasts)) if firsts else None

    def point_at(self, x: float, y: float) -> tuple[float, float, str] | None:
        # the nearest time in each series, then the series whose value there is nearest the cursor
        px, py = self.pixel_scale()
        best = None
        for name, (xs, ys) in self.points.items():
            if not xs:
                continue
            times = list(xs)
            i = bisect.bisect_left(times, x)
            for j in (i - 1, i):
                if 0 <= j < len(times):
                    d = math.hypot((times[j] - x) / px, (ys[j] - y) / py)
                    if best is None or d < best[0]:
                        best = (d, times[j], ys[j], name)
        if best is None:
            return None
        _, ts, value, name = best
        return ts, value, f"{clock(ts)}  {name}: {value_text(value, self.chart.unit)}"

    def clear(self) -> None:
        super().clear()
        self.left_out = None
        self.points.clear()
        for line in self.lines.values():
            self.plot.removeItem(line)
        self.lines.clear()
        self.legend.clear()


def bucket_label(lo: Any) -> str:
    """A log2 bucket by its lower bound: 1, 2, 4 ... 512, 1K, 2K ... (bounds are powers of two)."""
    n = int(lo)
    for suffix, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def bucket_range(lo: int, hi: int, unit: str) -> str:
    return f"{bucket_label(lo)}–{bucket_label(hi + 1) if hi + 1 >= 1024 else hi} {unit_label(unit)}".rstrip()


class HistogramChart(MetricChart):
    """The latest interval's log2 histogram (records of kind hist named chart.series) as bars."""

    def __init__(self, spec: config.MetricSpec, parent: QWidget | None = None, chart: config.Chart | None = None) -> None:
        super().__init__(spec, parent, chart)
        self.keep = 1
        self.bars: pg.BarGraphItem | None = None
        self.latest: dict | None = None
        self.buckets: list[dict] = []
        self.value_axis.show_unit("count", "count")
        self.plot.setLabel("bottom", self.bucket_title(self.chart.series or "", self.chart.unit))

    def wants(self, record: dict) -> bool:
        if record.get("kind") != "hist" or not isinstance(record.get("buckets"), list):
            return False
        wanted = self.chart.series or (self.latest or record).get("name")
        return record.get("name") == wanted

    def take(self, record: dict) -> None:
        self.latest = record

    def draw_data(self) -> None:
        buckets = self.buckets = [b for b in (self.latest or {}).get("buckets", []) if isinstance(b, dict)]
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
        self.plot.setLabel("bottom", self.bucket_title(str(record.get("name", "")), record.get("unit") or self.chart.unit))
        self.plot.setTitle(f"interval {record.get('interval', '')}: {sum(heights):,} in all", size="9pt")

    def bucket_title(self, name: str, unit: str) -> str:
        """The buckets' axis: the histogram in words (the chart's label for its own, else from the hist's
        name: run_time is "Run time"), with the unit of its bounds."""
        title = self.chart.label if name == self.chart.series and self.chart.label else units.guess(name)[0]
        return axis_title(title, unit_label(unit)) if unit_label(unit) else title

    def point_at(self, x: float, y: float) -> tuple[float, float, str] | None:
        i = round(x)
        if not 0 <= i < len(self.buckets):
            return None
        b = self.buckets[i]
        unit = (self.latest or {}).get("unit") or self.chart.unit
        count = b.get("count", 0)
        return i, count, f"{bucket_range(b.get('lo', 0), b.get('hi', 0), unit)}: {count:,}"

    def _show_range(self) -> None:
        super()._show_range()
        if self.latest and not self.paused:
            self.range_label.setText(f"interval {self.latest.get('interval', '')} (the newest)")

    def clear(self) -> None:
        super().clear()
        self.latest = None


class ScatterChart(MetricChart):
    """One dot per event: y against time, coloured by series; the last `history` events."""

    zoom_y = True
    millis = True
    time_based = True
    filters_pid = True

    def __init__(self, spec: config.MetricSpec, history: int = 2000, parent: QWidget | None = None,
                 chart: config.Chart | None = None) -> None:
        super().__init__(spec, parent, chart)
        self.plot.setAxisItems({"bottom": ClockAxis()})
        self.legend = self.plot.addLegend(offset=(10, 5))
        self.keep = history
        self.events: deque[tuple[str, float, float, Any]] = deque(maxlen=history)     # series, ts, y, pid
        self.items: dict[str, pg.PlotDataItem] = {}

    def take(self, record: dict) -> None:
        y, ts = _number(record.get(self.chart.y)), _number(record.get("ts"))
        if y is not None and ts is not None:
            self.events.append((self.series_name(record), ts, y, record.get("pid")))

    def draw_data(self) -> None:
        per_series: dict[str, tuple[list, list]] = {}
        for name, ts, y, _ in self.shown():
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
                colour = self.colour(name, len(self.items))
                item = self.plot.plot(pen=None, symbol="o", symbolSize=5, symbolPen=None, symbolBrush=colour,
                                      name=self.legend_name(name))
                self.items[name] = item
            item.setData(xs, ys)

    def shown(self) -> list[tuple[str, float, float, Any]]:
        return [e for e in self.events if e[3] == self.pid] if self.pid is not None else list(self.events)

    def time_span(self) -> tuple[float, float] | None:
        if not self.events:
            return None
        times = [ts for _, ts, _, _ in self.events]
        return min(times), max(times)

    def point_at(self, x: float, y: float) -> tuple[float, float, str] | None:
        px, py = self.pixel_scale()
        best = min(self.shown(), key=lambda e: math.hypot((e[1] - x) / px, (e[2] - y) / py), default=None)
        if best is None:
            return None
        name, ts, value, _ = best
        return ts, value, f"{clock(ts, millis=True)}  {name}: {value_text(value, self.chart.unit)}"

    def clear(self) -> None:
        super().clear()
        self.events.clear()


def row_bounds(row: int) -> tuple[int, int]:
    """A heatmap row's bucket, as the hist records' buckets: row 0 is 0–1, row r is 2^r to 2^(r+1)-1."""
    return (0, 1) if row == 0 else (1 << row, (2 << row) - 1)


class HeatmapChart(MetricChart):
    """Latency over time: a column per interval, a row per log2 bucket, each cell's count as its colour
    (on a log scale, so the rare slow bucket still shows). From hist records named chart.series, or
    from events, each binned by y times chart.scale."""

    time_based = True

    def __init__(self, spec: config.MetricSpec, history: int = 300, parent: QWidget | None = None,
                 chart: config.Chart | None = None) -> None:
        super().__init__(spec, parent, chart)
        self.history = history
        self.plot.setAxisItems({"bottom": ClockAxis()})
        self.value_axis.show_unit("", f"{self.chart.label} (log2 buckets, {unit_label(self.chart.unit)})")
        self.counts: dict[int, dict[int, int]] = {}        # interval -> {row: count}
        self.times: dict[int, float] = {}                   # interval -> its end (the newest ts seen)
        self.unit = unit_label(self.chart.unit)
        self.image = pg.ImageItem()
        self.image.setColorMap(pg.ColorMap([0.0, 0.05, 1.0], [(255, 255, 255), (200, 220, 255), (13, 40, 120)]))
        self.plot.addItem(self.image)
        self.grid: tuple[list[int], int, float, float] | None = None     # intervals, first row, x0, width

    def wants(self, record: dict) -> bool:
        kind = record.get("kind")
        if self.chart.record_kind == "hist":
            return kind == "hist" and record.get("name") == self.chart.series and isinstance(record.get("buckets"), list)
        return kind in (self.chart.record_kind, "summary")

    def take(self, record: dict) -> None:
        interval, ts = record.get("interval"), _number(record.get("ts"))
        if not isinstance(interval, int) or ts is None:
            return
        self.times[interval] = max(ts, self.times.get(interval, ts))
        cells = self.counts.setdefault(interval, {})
        if record.get("kind") == "hist":
            self.unit = unit_label(record.get("unit") or self.chart.unit)
            for b in record["buckets"]:
                if isinstance(b, dict) and b.get("count"):
                    row = int(b.get("lo", 0)).bit_length() - 1 if b.get("lo", 0) else 0
                    cells[row] = cells.get(row, 0) + int(b["count"])
        elif record.get("kind") == self.chart.record_kind:
            y = _number(record.get(self.chart.y))
            if y is not None and y >= 0:
                scaled = int(y * self.chart.scale)
                row = scaled.bit_length() - 1 if scaled >= 2 else 0
                cells[row] = cells.get(row, 0) + 1
        for old in [i for i in self.times if i <= interval - self.history]:
            self.times.pop(old, None)
            self.counts.pop(old, None)

    def draw_data(self) -> None:
        intervals = sorted(i for i in self.times if self.counts.get(i) is not None)
        rows = [r for i in intervals for r in self.counts[i]]
        if not intervals or not rows:
            self.image.clear()
            self.grid = None
            return
        first, last = intervals[0], intervals[-1]
        width = (self.times[last] - self.times[first]) / (last - first) if last > first else 1.0
        low, high = min(rows), max(rows)
        data = np.zeros((last - first + 1, high - low + 1))
        for i in intervals:
            for r, n in self.counts[i].items():
                data[i - first, r - low] = n
        x0 = self.times[last] - (last - first + 1) * width        # each column ends at its interval's end
        self.image.setImage(np.log1p(data), autoLevels=False, levels=(0.0, max(1.0, float(np.log1p(data.max())))))
        self.plot.setTitle(f"colour: count per bucket and interval, log scale, white 0 to darkest {int(data.max()):,}",
                           size="9pt")
        self.image.setRect(QRectF(x0, low, (last - first + 1) * width, high - low + 1))
        self.grid = (list(range(first, last + 1)), low, x0, width)
        step = max(1, -(-(high - low + 1) // 10))
        ticks = [(r + 0.5, bucket_label(row_bounds(r)[0])) for r in range(low, high + 1) if (r - low) % step == 0]
        self.plot.getAxis("left").setTicks([ticks])

    def cell(self, x: float, y: float) -> tuple[int, int] | None:
        """(interval, row) under view coordinates, or None outside the picture."""
        if self.grid is None:
            return None
        intervals, low, x0, width = self.grid
        column, row = math.floor((x - x0) / width), math.floor(y)
        if not 0 <= column < len(intervals) or row < low or row >= low + self.image.height():
            return None
        return intervals[column], row

    def point_at(self, x: float, y: float) -> tuple[float, float, str] | None:
        found = self.cell(x, y)
        if found is None:
            return None
        interval, row = found
        _, low, x0, width = self.grid
        count = self.counts.get(interval, {}).get(row, 0)
        lo, hi = row_bounds(row)
        end = self.times.get(interval, x0 + (interval - self.grid[0][0] + 1) * width)
        where = f"{clock(end - width)} – {clock(end)}"
        return end - width / 2, row + 0.5, f"{where}  {bucket_range(lo, hi, self.chart.unit if not self.unit else self.unit)}: {count:,}"

    def time_span(self) -> tuple[float, float] | None:
        return (min(self.times.values()), max(self.times.values())) if self.times else None

    def clear(self) -> None:
        super().clear()
        self.counts.clear()
        self.times.clear()
        self.image.clear()
        self.grid = None


CHARTS: dict[str, type[LiveChart]] = {
    "timeseries": TimeSeriesChart,
    "histogram": HistogramChart,
    "scatter": ScatterChart,
    "heatmap": HeatmapChart,
    "stacks": ProfilePanel,
}


def make_chart(spec: config.MetricSpec, parent: QWidget | None = None, chart: config.Chart | None = None) -> QWidget:
    """The chart the registry entry asks for; a note instead of a crash for a kind this app lacks."""
    chart = chart or spec.chart
    cls = CHARTS.get(chart.kind)
    if cls is None:
        return QLabel(f"no chart of kind {chart.kind!r} (known: {', '.join(CHARTS)})", parent)
    if cls is ProfilePanel:
        return cls(spec, parent=parent)
    return cls(spec, parent=parent, chart=chart)


def make_charts(spec: config.MetricSpec, parent: QWidget | None = None) -> tuple[QWidget, list[QWidget]]:
    """Every chart of a metric: (the widget to place, the charts). Several charts go in tabs by label."""
    charts = [make_chart(spec, parent, chart) for chart in spec.charts]
    if len(charts) == 1:
        return charts[0], charts
    tabs = QTabWidget(parent)
    tabs.setDocumentMode(True)
    for chart, declared in zip(charts, spec.charts, strict=True):
        tabs.addTab(chart, declared.label or declared.y)
    return tabs, charts
