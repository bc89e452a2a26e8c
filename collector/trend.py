"""A stream's trend line for the lab overview: its key figure (the registry's MetricSpec.key_figure, read
from its summary records: syscalls/s, MiB/s of block I/O, % of a CPU, blocked time per second) over its
newest POINTS intervals, kept in the stream's row (streams.trend, JSON {"of": the figure, "points": [[ts,
value], ...]}). The request thread picks a batch's figures out of the records it has just parsed; the
writer merges them into the row in the batch's transaction. So the overview reads one column per stream
instead of walking 40 records of each of 500 streams (50 hosts x 10 metrics: 16,000 records read per
refresh). A row holding another figure's points (an older collector charted the chart's field, untagged)
is taken as empty: the overview reads that stream's figures from its records instead."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence

from collector import chart

POINTS = 40


@functools.lru_cache(maxsize=512)
def declared(source: str) -> chart.Plot | None:
    """The plot whose figure a source's trend follows: its registry entry's key figure, if it has one."""
    return chart.figure_plot(source)


def tag(source: str) -> str:
    """What a stored trend's points are: the figure's fields and scale ('' for a source without one)."""
    plot = declared(source)
    if plot is None or plot.figure is None:
        return ""
    return "/".join(plot.figure.fields) + f"*{plot.figure.scale:g}"


def figures(source: str, kinds: list[str], records: Sequence[dict], ts: list[float]) -> list[tuple[float, float]]:
    """The batch's newest POINTS (ts, figure) of the records its source's figure is read from, in time order
    (only those records are looked at: batch_structs.Records decodes each when asked for)."""
    plot = declared(source)
    if plot is None:
        return []
    found = []
    for index, kind in enumerate(kinds):
        if kind == plot.kind and plot.wants(record := records[index]):
            value = plot.value(record)
            if value is not None and math.isfinite(value):
                found.append((ts[index], value))
    found.sort(key=lambda p: p[0])
    return found[-POINTS:]


def _points(stored: str | None, source: str) -> list[tuple[float, float]]:
    data = json.loads(stored) if stored else None
    if not isinstance(data, dict) or data.get("of") != tag(source):
        return []
    return [(float(t), float(v)) for t, v in data["points"]]


def merge(stored: str | None, new: list[tuple[float, float]], source: str) -> str:
    """The stream's trend text with a batch's figures in it: the newest POINTS by time (a late batch's
    older figures fall where they belong, or out)."""
    points = _points(stored, source) + [tuple(p) for p in new]
    points.sort(key=lambda p: p[0])
    return json.dumps({"of": tag(source), "points": points[-POINTS:]}, separators=(",", ":"))


def values(stored: str | None, source: str) -> list[float]:
    return [v for _t, v in _points(stored, source)]
