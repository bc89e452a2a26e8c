"""A stream's trend line for the lab overview: its key figure (the field its registry entry charts)
over its newest POINTS records, kept in the stream's row (streams.trend, JSON [[ts, value], ...]). The
request thread picks a batch's figures out of the records it has just parsed; the writer merges them
into the row in the batch's transaction. So the overview reads one column per stream instead of
walking 40 records of each of 500 streams (50 hosts x 10 metrics: 16,000 records read per refresh)."""

from __future__ import annotations

import functools
import json
import math

from collector import chart

POINTS = 40


@functools.lru_cache(maxsize=512)
def declared(source: str) -> chart.Plot | None:
    """The plot whose figure a source's trend follows: the registry's chart, unless it is a flame graph
    or splits lines by a field (the overview shows one line)."""
    spec = chart.registered(source)
    if spec is None or spec.chart.kind == "stacks":
        return None
    plot = chart.declared(source)
    return plot if plot is not None and plot.series is None else None


def figures(source: str, kinds: list[str], records: list, ts: list[float]) -> list[tuple[float, float]]:
    """The batch's newest POINTS (ts, figure) of the records its source's chart draws, in time order."""
    plot = declared(source)
    if plot is None:
        return []
    found = []
    for kind, record, t in zip(kinds, records, ts, strict=True):
        if kind == plot.kind:
            value = plot.value(record)
            if value is not None and math.isfinite(value):
                found.append((t, value))
    found.sort(key=lambda p: p[0])
    return found[-POINTS:]


def merge(stored: str | None, new: list[tuple[float, float]]) -> str:
    """The stream's trend text with a batch's figures in it: the newest POINTS by time (a late batch's
    older figures fall where they belong, or out)."""
    points = [tuple(p) for p in json.loads(stored)] if stored else []
    points += new
    points.sort(key=lambda p: p[0])
    return json.dumps(points[-POINTS:], separators=(",", ":"))


def values(stored: str | None) -> list[float]:
    return [float(v) for _t, v in json.loads(stored)] if stored else []
