"""The stream page's chart: which numeric field to draw (the registry's chart.y for a registered
metric, else the first numeric field found) and the chart itself as inline SVG — no third-party code,
so the dashboard works offline."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from registry import units
from registry.spec import Figure

try:
    import config  # the metric registry, beside server.py
except ImportError:  # the collector can run without the profiler's files
    config = None
if TYPE_CHECKING:
    from registry.spec import MetricSpec

ENVELOPE_KEYS = {"ts", "interval", "schema", "pid"}  # numbers that are not the measurement
WIDTH, HEIGHT, PAD_L, PAD_R, PAD_T, PAD_B = 860, 280, 76, 16, 16, 36
MAX_POINTS = 2000  # per series; more only blurs the line
MAX_SERIES = 8
HOVER_POINTS = 600  # a line of up to this many points gets a hover target on each
USUAL = ("ok",)  # a scatter's split value drawn first, as plain dots; any other (failed) stands apart
MARKERS = ("circle", "cross", "square", "triangle", "diamond")  # a scatter's series' shapes, in order
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Plot:
    field: str
    kind: str | None  # record kind to draw; None: any
    label: str
    unit: str = ""
    series: str | None = None  # field whose value splits lines
    registered: bool = False
    dots: bool = False  # events and per-row values: points, not a line
    hist: str | None = None  # draw the event count of the hist records with this name
    hist_unit: str = ""  # the unit of its buckets' bounds
    split: str | None = None  # a scatter's field whose value makes each event's marker (tcpconnlat's status)
    where: tuple[tuple[str, object], ...] = ()  # only records with these field values
    summed: bool = False  # an interval's records summed per series (collector/timeline.py)
    per: tuple[str, ...] = ()  # summary fields each summed point is divided by
    scale: float = 1.0  # and multiplied by
    figure: Figure | None = None  # the registry's key figure of summary records: what value() reads

    def wants(self, record: dict) -> bool:
        """A record this plot draws: one with its `where` values, and not the summary of an interval cut
        short (`partial`: a stop's 0.3 s of shutdown work read as a rate ended a line with a spike)."""
        return record.get("partial") is not True and self.matches(record)

    def matches(self, record: dict) -> bool:
        """The record has this plot's `where` values."""
        return all(record.get(k) == v for k, v in self.where)

    @property
    def field_sql(self) -> tuple[str, str | None]:
        """(the record field the database reads for this plot's value, the hist name its records must
        carry): a hist record's event count is its total, the sum of its buckets' counts."""
        return ("total", self.hist) if self.hist is not None else (self.field, None)

    def value(self, record: dict) -> float | None:
        if self.figure is not None:
            try:
                return self.figure.value(record)
            except OverflowError:
                return None
        if self.hist is not None:
            buckets = record.get("buckets")
            if record.get("name") != self.hist or not isinstance(buckets, list):
                return None
            counts = [b.get("count") for b in buckets if isinstance(b, dict)]
            return float(sum(c for c in counts if _is_number(c)))
        value = record.get(self.field)
        if not _is_number(value):
            return None
        try:
            return float(value)
        except OverflowError:  # an integer past a double's range (a 310-digit one was stored as sent)
            return None

    @property
    def title(self) -> str:
        """Its label with its declared unit: "connect latency (ms)", "block I/O (B/s)"."""
        shown = units.symbol(self.unit)
        return self.label + (f" ({shown})" if shown and not self.label.endswith(shown) else "")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def registered(source: str) -> MetricSpec | None:
    """The registry's entry for a stream's source (config.MetricSpec), or None."""
    if config is None:
        return None
    try:
        return config.get(source)
    except KeyError:
        return None


def declared(source: str) -> Plot | None:
    """The chart the registry declares for a source (None: not registered): a flame graph's metric's
    timeline (CPU or blocked time per process over time), else its chart (a stacks chart without a
    timeline: its records' weights)."""
    spec = registered(source)
    if spec is None:
        return None
    c = spec.chart
    if c.kind == "stacks" and spec.timeline is not None:
        t = spec.timeline
        return Plot(t.y, t.record_kind, t.label, t.unit, t.series, registered=True, where=t.where, summed=t.summed,
                    per=t.per_interval, scale=t.scale)
    if c.kind == "histogram":
        return Plot("count", c.record_kind, f"{c.label or c.series} events", "", registered=True, hist=c.series,
                    hist_unit=c.unit)
    return Plot(c.y, c.record_kind, c.label or units.guess(c.y)[0], c.unit, c.series if c.kind == "timeseries" else None,
                registered=True, dots=c.kind != "timeseries", split=c.series if c.kind == "scatter" else None)


def figure_plot(source: str) -> Plot | None:
    """The registry's key figure of a source as a plot of its summary records (None: not registered, or
    none declared): the lab overview's trend, and the compare page's line for a profile's metric."""
    spec = registered(source)
    if spec is None or spec.key_figure is None:
        return None
    f = spec.key_figure
    return Plot(f.field, "summary", f.noun or spec.field(f.field, "summary").label, f.unit, registered=True,
                figure=f)


def choose(source: str, sample: list[dict]) -> Plot | None:
    """What to chart for a stream, given a sample of its stored rows (with the record as JSON text)."""
    records = [(row["kind"], json.loads(row["data"])) for row in sample]
    plot = declared(source)
    if plot is not None:
        if any(k == plot.kind and plot.matches(r) and plot.value(r) is not None for k, r in records):
            return plot
    for kind, record in records:
        if kind == "meta":
            continue
        for key, value in record.items():
            if key not in ENVELOPE_KEYS and _is_number(value):
                return Plot(key, kind, *units.guess(key))   # its label in words, its unit from its name
    return None


def points(plot: Plot, rows: list[dict], split: bool = True) -> dict[str, list[tuple[float, float]]]:
    """{series name: [(ts, y), ...]} in time order; at most MAX_SERIES lines. A scatter's events are
    split by their split field's value (split=False: one series), the usual value ("ok") first."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        record = json.loads(row["data"])
        value = plot.value(record) if plot.wants(record) else None
        if value is None:
            continue
        if plot.series:
            name = series_name(plot, record)
        elif plot.split and split:
            name = str(record[plot.split]) if record.get(plot.split) is not None else plot.label
        else:
            name = plot.label
        if name in lines or len(lines) < MAX_SERIES:
            lines.setdefault(name, []).append((row["ts"], value))
    if plot.split and split:
        lines = dict(sorted(lines.items(), key=lambda kv: (kv[0] not in USUAL, kv[0])))
    return {name: thin(pts, MAX_POINTS) for name, pts in lines.items()}


def partial_note(summaries: list[dict]) -> str:
    """What the chart leaves out: the newest summary's interval when it was cut short ('final interval
    (partial, 0.317 s) not drawn'); '' otherwise."""
    newest = max(summaries, key=lambda r: r.get("interval") if _is_number(r.get("interval")) else -1, default=None)
    if newest is None or newest.get("partial") is not True:
        return ""
    took = f", {units.quantity(newest['interval_s'], 's')}" if _is_number(newest.get("interval_s")) else ""
    return f"final interval (partial{took}) not drawn"


def series_name(plot: Plot, record: dict) -> str:
    """A line's name: its series field's value; a process by its command and pid ("python (4242)")."""
    value = record.get(plot.series or "", "")
    if plot.series == "pid" and record.get("comm"):
        return f"{record['comm']} ({value})"
    return str(value)


def thin(pts: list[tuple[float, float]], most: int) -> list[tuple[float, float]]:
    """At most about `most` of the points, evenly spread, the newest kept."""
    if len(pts) <= most:
        return pts
    step = len(pts) / most
    return [pts[int(i * step)] for i in range(most)] + [pts[-1]]


Y_TICKS = 6  # about this many labelled values on the Y axis
X_TICKS = 6  # and times on the X axis
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def si(value: float, unit: str = "") -> str:
    """A short, whole label for a value with its unit, scaled to its size (registry/units.py): 103k/s,
    1.5 KiB, 250 µs, 12%. (A label like 1.034e+05 lost its first digit off the chart's edge.)"""
    factor, shown = units.axis(unit, value)
    text = units.compact(value * factor)
    if not shown:
        return text
    return text + shown if shown[0] in "/%" else f"{text} {shown}"


def value_text(plot: Plot, value: float) -> str:
    """A plot's newest value as the overview and the compare page show it: a key figure in its words
    ("33,374 syscalls/s", "96.8% CPU"), any other value short with its unit (103k/s, 250 µs)."""
    return plot.figure.text(value) if plot.figure is not None else si(value, plot.unit)


def value_scale(plot: Plot, lines: dict[str, list[tuple[float, float]]]) -> tuple[float, str]:
    """(factor, unit text) of the chart's value axis: the plot's unit scaled to the largest value its
    ticks reach, so a latency axis up to 0.1 ms reads 0-100 µs and its title says µs."""
    values = [v for pts in lines.values() for _t, v in pts]
    if not values:
        return 1.0, units.symbol(plot.unit)
    ticks = nice_ticks(min(0.0, min(values)), max(values))
    return units.axis(plot.unit, max(abs(ticks[0]), abs(ticks[-1])))


def heading(plot: Plot, lines: dict[str, list[tuple[float, float]]]) -> str:
    """The chart's title with the unit its axis is in: "connect latency (µs)", "syscalls/s"."""
    _factor, shown = value_scale(plot, lines)
    return plot.label if not shown or plot.label.endswith(shown) or f"({shown})" in plot.label \
        else f"{plot.label} ({shown})"


def nice_ticks(lo: float, hi: float, count: int = Y_TICKS) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) covering lo..hi."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    ticks, value = [], first
    while value < hi + step * 0.999:
        ticks.append(round(value, 12))
        value += step
    return ticks


def time_ticks(t0: float, t1: float, count: int = X_TICKS) -> list[float]:
    """Times on whole steps (1 s .. 1 day) inside t0..t1, about count of them."""
    step = next((s for s in TIME_STEPS if (t1 - t0) / s <= count), TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    return [first + i * step for i in range(int((t1 - first) // step) + 1)]


def colour(i: int, n: int) -> str:
    """The i-th of n lines' colour: the palette's for up to 8, else n hues around the wheel."""
    if n <= len(COLOURS):
        return COLOURS[i % len(COLOURS)]
    return f"hsl({round(i * 360 / n)}, 70%, 40%)"


def _pick_columns(spans: dict[float, tuple[float, float]], pick: Callable[[float, float], str] | None,
                  x: Callable[[float], float], bounds: tuple[float, float], plot_h: float) -> list[str]:
    """A link over each interval's column (spans) of the chart: pick(since, until) is where a click goes."""
    t0, t1 = bounds
    parts = []
    for since, until in spans.values():
        left, right = x(max(since, t0)), x(min(until, t1))
        parts.append(f'<a class="pick" href="{escape(pick(since, until))}"><rect x="{left:.1f}" y="{PAD_T}" '
                     f'width="{max(right - left, 1.0):.1f}" height="{plot_h}" fill="#1f77b4" fill-opacity="0">'
                     f'<title>{time.strftime("%H:%M:%S", time.gmtime(since))} – '
                     f'{time.strftime("%H:%M:%S", time.gmtime(until))}: show this range</title></rect></a>')
    return parts


def svg(plot: Plot, lines: dict[str, list[tuple[float, float]]], legend: bool = True,
        pick: Callable[[float, float], str] | None = None) -> str:
    """The chart as an <svg> element (escaped; safe to embed). legend: each line's name in the chart
    (the page draws its own otherwise). Each point names its time, series and value on hover; its
    time range (data-t0, data-t1 between x data-x0 and data-x1) lets a script turn a range dragged on
    it into times. pick(since, until): a link for each interval's column (a point's time halfway to
    its neighbours'), so a click shows that interval (the flame graph of its stacks)."""
    all_pts = [p for pts in lines.values() for p in pts]
    if not all_pts:
        return ""
    t0, t1 = min(p[0] for p in all_pts), max(p[0] for p in all_pts)
    y0, y1 = min(0.0, min(p[1] for p in all_pts)), max(p[1] for p in all_pts)
    if t1 == t0:
        t0, t1 = t0 - 1, t1 + 1
    yticks = nice_ticks(y0, y1)
    y0, y1 = yticks[0], yticks[-1]
    factor, _shown = value_scale(plot, lines)
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def x(t: float) -> float:
        return PAD_L + (t - t0) / (t1 - t0) * plot_w

    def y(v: float) -> float:
        return PAD_T + plot_h - (v - y0) / (y1 - y0) * plot_h

    def tip(name: str, t: float, v: float) -> str:
        return f"<title>{time.strftime('%H:%M:%S', time.gmtime(t))}  {escape(name)}: {escape(units.quantity(v, plot.unit))}</title>"

    title = heading(plot, lines)
    parts = [f'<svg class="chart" data-field="{escape(plot.field)}" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{escape(title)} over time" data-t0="{t0!r}" data-t1="{t1!r}" data-x0="{PAD_L}" '
             f'data-x1="{PAD_L + plot_w}">',
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>']
    spans = columns_of(sorted({t for t, _v in all_pts})) if pick is not None else {}
    parts.extend(_pick_columns(spans, pick, x, (t0, t1), plot_h))
    for value in yticks:
        parts.append(f'<line class="grid" x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                     f'stroke="#e4e4e4"/>')
        parts.append(f'<text class="ytick" x="{PAD_L - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="11">'
                     f'{escape(units.compact(value * factor))}</text>')
    for t in time_ticks(t0, t1):
        label = time.strftime("%H:%M:%S", time.gmtime(t))
        anchor = "start" if x(t) < PAD_L + 30 else "end" if x(t) > WIDTH - PAD_R - 30 else "middle"  # inside the box
        parts.append(f'<text class="xtick" x="{x(t):.1f}" y="{HEIGHT - 20}" text-anchor="{anchor}" font-size="11">'
                     f'{label}</text>')
    parts.append(f'<text x="{PAD_L + plot_w / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" font-size="12">'
                 f'{escape(title)} over time (UTC)</text>')
    for i, (name, pts) in enumerate(lines.items()):
        paint = colour(i, len(lines))
        if plot.split:  # a scatter split by status: a shape and a colour per value, and a legend of both
            shape = MARKERS[i % len(MARKERS)]
            parts.append(f'<g class="series" data-series="{escape(name)}" data-marker="{shape}" fill="{paint}" '
                         f'stroke="{paint}"><title>{escape(name)}</title>'
                         + "".join(_marker(shape, x(t), y(v), f' data-t="{t!r}" data-v="{v!r}"', tip=tip(name, t, v))
                                   for t, v in pts)
                         + "</g>")
            if legend:
                lx, ly = WIDTH - PAD_R - 120, PAD_T + 14 + 14 * i
                parts.append(f'<g class="legend" data-series="{escape(name)}" fill="{paint}" stroke="{paint}">'
                             + _marker(shape, lx, ly - 4, "", "key")
                             + f'<text x="{lx + 8}" y="{ly}" font-size="11" stroke="none">'
                             f'{escape(name)} ({len(pts)})</text></g>')
            continue
        if plot.dots:
            parts.append(f'<g class="series" fill="{paint}"><title>{escape(name)}</title>'
                         + "".join(f'<circle class="point" cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5">{tip(name, t, v)}'
                                   '</circle>' for t, v in pts)
                         + "</g>")
        else:
            coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            parts.append(f'<polyline class="series" fill="none" stroke="{paint}" stroke-width="1.5" '
                         f'points="{coords}"><title>{escape(name)}</title></polyline>')
            if len(pts) <= HOVER_POINTS:  # an invisible dot on each point names it on hover (a click: its range)
                parts.append(f'<g class="hover" fill="{paint}">' + "".join(
                    _linked(f'<circle class="point" cx="{x(t):.1f}" cy="{y(v):.1f}" r="4" fill-opacity="0">'
                            f'{tip(name, t, v)}</circle>', pick, spans.get(t)) for t, v in pts) + "</g>")
        if len(pts) == 1 and not plot.dots:
            parts.append(f'<circle cx="{x(pts[0][0]):.1f}" cy="{y(pts[0][1]):.1f}" r="3" fill="{paint}"/>')
        if len(lines) > 1 and legend:
            parts.append(f'<text x="{PAD_L + 8}" y="{PAD_T + 14 + 14 * i}" font-size="11" fill="{paint}">'
                         f'{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def columns_of(times: list[float]) -> dict[float, tuple[float, float]]:
    """Each point time's column: from halfway to the time before to halfway to the time after (the
    first and last reach as far on their outer side; a lone time, a second either way)."""
    spans = {}
    for i, t in enumerate(times):
        half_before = (t - times[i - 1]) / 2 if i else (times[1] - t) / 2 if len(times) > 1 else 1.0
        half_after = (times[i + 1] - t) / 2 if i + 1 < len(times) else half_before
        spans[t] = (t - half_before, t + half_after)
    return spans


def _linked(element: str, pick: Callable[[float, float], str] | None, span: tuple[float, float] | None) -> str:
    return f'<a href="{escape(pick(*span))}">{element}</a>' if pick is not None and span is not None else element


def _marker(shape: str, cx: float, cy: float, data: str, cls: str = "point", tip: str = "") -> str:
    """One scatter point drawn as its series' shape, centred on (cx, cy); tip: its <title>."""
    end = f">{tip}</{'circle' if shape == 'circle' else 'rect' if shape == 'square' else 'path'}>" if tip else "/>"
    if shape == "circle":
        return f'<circle class="{cls}" cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" stroke="none"{data}{end}'
    if shape == "cross":
        return (f'<path class="{cls}" d="M{cx - 3:.1f},{cy - 3:.1f}l6,6m0,-6l-6,6" fill="none" '
                f'stroke-width="1.5"{data}{end}')
    if shape == "square":
        return f'<rect class="{cls}" x="{cx - 2.5:.1f}" y="{cy - 2.5:.1f}" width="5" height="5" stroke="none"{data}{end}'
    if shape == "triangle":
        return f'<path class="{cls}" d="M{cx:.1f},{cy - 3.5:.1f}l3.5,6h-7z" stroke="none"{data}{end}'
    return f'<path class="{cls}" d="M{cx:.1f},{cy - 3.5:.1f}l3.5,3.5l-3.5,3.5l-3.5,-3.5z" stroke="none"{data}{end}'


def sparkline(values: list[float], width: int = 120, height: int = 24) -> str:
    """A small trend line (no axes) for the overview."""
    if not values:
        return ""
    lo, hi = min(0.0, min(values)), max(values)
    span = (hi - lo) or 1.0
    step = width / max(1, len(values) - 1)
    scale = (height - 4) / span
    coords = " ".join(f"{i * step:.1f},{height - 2 - (v - lo) * scale:.1f}" for i, v in enumerate(values))
    return (f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}"><polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{coords}"/></svg>')
