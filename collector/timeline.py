"""A profile's metric over time, for the stream page's chart (the registry's MetricSpec.timeline): the
records of each interval summed per process (cpuprofile's stacks: its samples; offcpu's stack rows: its
blocked ms), divided by that interval's summary fields (frequency_hz and interval_s: a share of one CPU;
interval_s: blocked time per second). The busiest MAX_SERIES - 1 processes get a line each, the rest
one line together. A point's time is its interval's newest record's, so a range picked around it holds
that interval's stacks: what the flame graph below the chart shows for the range. A bucket of merged
records (retention) is one point, at its start: the mean of its intervals."""

from __future__ import annotations

import json
import math

from collector import chart
from registry.spec import divided

OTHERS = "other processes"


def summary_of(rows: list[dict]) -> dict[object, dict]:
    """The summary records of the rows (stored rows, JSON text) by interval."""
    found = {}
    for row in rows:
        record = json.loads(row["data"])
        found[record.get("interval")] = record
    return found


def points(plot: chart.Plot, rows: list[dict], summaries: dict[object, dict]) -> dict[str, list[tuple[float, float]]]:
    """{series name: [(ts, value), ...]} in time order: an interval's records that the plot wants summed
    per series, then divided as the plot says (an interval without its summary, when it divides, has
    no point)."""
    sums: dict[tuple[object, str], float] = {}
    newest: dict[object, float] = {}
    totals: dict[str, float] = {}
    buckets: set[tuple[int, float]] = set()  # (length, start) of each bucket of merged records
    for row in rows:
        record = json.loads(row["data"])
        value = plot.value(record) if plot.wants(record) else None
        if value is None or not math.isfinite(value):
            continue
        interval, name, n = record.get("interval"), chart.series_name(plot, record), _intervals(record)
        if summaries.get(interval, {}).get("partial") is True:
            continue        # an interval cut short (a stop's): its rate is no rate, not drawn
        if n > 1 and isinstance(record.get("bucket_s"), int) and record["bucket_s"] > 0:
            buckets.add((record["bucket_s"], row["ts"]))
        sums[(interval, name)] = sums.get((interval, name), 0.0) + value / n
        newest[interval] = max(newest.get(interval, row["ts"]), row["ts"])
        totals[name] = totals.get(name, 0.0) + value
    busiest = set(sorted(totals, key=lambda n: (-totals[n], n))[: chart.MAX_SERIES - 1]) \
        if len(totals) > chart.MAX_SERIES else set(totals)
    merged: dict[tuple[object, str], float] = {}
    for (interval, name), value in sums.items():
        key = (interval, name if name in busiest else OTHERS)
        merged[key] = merged.get(key, 0.0) + value
    # an interval a process had nothing in is a 0 on its line, not a gap bridged (from its first record on)
    oldest = min(newest.values(), default=0.0)
    lengths = {length for length, _start in buckets}
    for interval, summary in summaries.items():
        if interval not in newest and _is_time(summary.get("ts")) and summary["ts"] >= oldest and \
                summary.get("partial") is not True and \
                not any((length, summary["ts"] // length * length) in buckets for length in lengths):
            newest[interval] = summary["ts"]  # (an interval merged into a bucket is in the bucket's point)
    names = {name for _interval, name in merged}
    lines: dict[str, list[tuple[float, float]]] = {}
    for interval, ts in newest.items():
        summary = summaries.get(interval, {})
        for name in names:
            shown = divided([merged.get((interval, name), 0.0), *(summary.get(f) for f in plot.per)], plot.scale)
            if shown is not None:
                lines.setdefault(name, []).append((ts, shown))
    order = sorted(lines, key=lambda n: (n == OTHERS, -totals.get(n, 0.0), n))
    return {name: chart.thin(sorted(lines[name]), chart.MAX_POINTS) for name in order}


def _intervals(record: dict) -> int:
    """How many intervals a record stands for: a merged one (collector/retention.py) its bucket's, whose
    mean it then adds to the newest of them; any other one."""
    n = record.get("intervals")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def _is_time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
