"""What a run's summary records add up to, and which of them cover a partial interval. No Qt.

A summary whose interval was cut short (a stop, the --duration's end, a traced process's exit) says
`partial: true` (bcctool/tool.py); a session recorded before the scripts said so gets the mark on its
last summary when that one covers under PARTIAL_SHARE of the run's interval (mark_final_partial).

RunTotals adds a run's summaries into one record shaped like them, for the headline of a whole session:
counts summed, rates recomputed over the time covered, means weighted by what they are the mean of,
extremes kept, a state (bytes outstanding now) as it was last. Each summary field has its rule here; a
field without one is left out of the total rather than summed wrongly (tests/monitor/test_intervals.py
holds every metric's sample to that).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from bcctool.tool import PARTIAL_SHARE

# counts of what happened in the interval: over a run, their sum
SUMMED = frozenset({
    "interval_s", "syscalls", "errors", "connects", "failed", "packets", "unmatched", "runs", "waits", "run_ms",
    "wait_ms", "minor", "major", "total", "read_bytes", "write_bytes", "read_ios", "write_ios", "sync_ios",
    "async_ios", "read_hit_pages", "read_miss_pages", "write_hit_folios", "write_miss_folios", "dirtied_folios",
    "allocs", "alloc_bytes", "frees", "freed_bytes", "missed_frees", "samples", "lost", "perf_map_lines_skipped",
    "unnamed", "exits", "total_time_ns", "total_events", "unseen_switch_ins", "unseen_switch_outs",
})
# a state at the interval's end (bytes outstanding, the page cache's size) or a setting: the last one
LAST = frozenset({
    "outstanding_bytes", "active_allocs", "cached_bytes", "buffers_bytes", "dirty_bytes", "mem_total_bytes",
    "mem_free_bytes", "mem_available_bytes", "slab_bytes", "slab_reclaimable_bytes", "slab_unreclaimable_bytes",
    "kernel_stack_bytes", "page_tables_bytes", "vmalloc_used_bytes", "frequency_hz",
})
# how many distinct processes (threads, devices, cgroups) an interval saw: no sum or maximum of them
# says how many the run saw, so the total leaves them out
DISTINCT = frozenset({"processes", "threads", "devices", "cgroups"})
# an interval's mean (or share), weighted over the run by the counts it is the mean of
MEANS: dict[str, tuple[str, ...]] = {
    "avg_ms": ("connects",),
    "avg_lat_us": ("read_ios", "write_ios"),
    "avg_time_ns": ("total_events",),
    "read_hit_pct": ("read_hit_pages", "read_miss_pages"),
    "write_hit_pct": ("write_hit_folios", "write_miss_folios"),
}
RATE_SUFFIXES = ("per_s", "per_sec")     # per_sec, bytes_per_s, minor_per_sec: recomputed over interval_s
ENVELOPE = ("metric", "ts", "kind", "interval", "partial")


def rule(field: str) -> str | None:
    """How `field` of a summary adds up over a run: sum, rate, mean, max, min, last, or None (left out)."""
    if field in SUMMED:
        return "sum"
    if field in LAST:
        return "last"
    if field in MEANS:
        return "mean"
    if field.endswith(RATE_SUFFIXES):
        return "rate"
    if field.startswith("max_") or field.endswith("_max"):
        return "max"
    if field.startswith("min_") or field.endswith("_min"):
        return "min"
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class RunTotals:
    """add() each summary of a run as it comes; record() is their total, a summary of the whole run."""

    def __init__(self) -> None:
        self.intervals = 0
        self.partial = 0
        self._fields: dict[str, None] = {}           # in the order the summaries list them
        self._sums: dict[str, float] = {}             # sum; rate: value x seconds; mean: value x weight
        self._weights: dict[str, float] = {}          # rate: seconds; mean: the counts
        self._kept: dict[str, Any] = {}               # max, min, last
        self._ints: set[str] = set()                  # fields whose values are whole numbers

    def add(self, summary: dict) -> None:
        self.intervals += 1
        self.partial += summary.get("partial") is True
        seconds = _number(summary.get("interval_s"))
        for field, raw in summary.items():
            value = _number(raw)
            how = rule(field)
            if field in ENVELOPE or value is None or how is None:
                continue
            self._fields.setdefault(field)
            if isinstance(raw, int) and how in ("sum", "max", "min", "last"):
                self._ints.add(field)
            if how == "sum":
                self._sums[field] = self._sums.get(field, 0.0) + value
            elif how in ("rate", "mean"):
                weight = seconds if how == "rate" else sum(_number(summary.get(w)) or 0.0 for w in MEANS[field])
                if weight:
                    self._sums[field] = self._sums.get(field, 0.0) + value * weight
                    self._weights[field] = self._weights.get(field, 0.0) + weight
            elif how == "last" or field not in self._kept:
                self._kept[field] = value
            else:
                self._kept[field] = (max if how == "max" else min)(self._kept[field], value)

    def record(self) -> dict[str, Any]:
        """The run's total in the summaries' field order (a field that had no weight left out)."""
        total: dict[str, Any] = {}
        for field in self._fields:
            how = rule(field)
            if how == "sum":
                value = self._sums[field]
            elif how in ("rate", "mean"):
                if not self._weights.get(field):
                    continue
                value = round(self._sums[field] / self._weights[field], 3)
            else:
                value = self._kept[field]
            total[field] = int(value) if field in self._ints else (round(value, 3) if how == "sum" else value)
        return total


def nominal_interval(records: Iterable[dict]) -> float | None:
    """The run's interval, as its meta record's arguments say."""
    for record in records:
        if record.get("kind") == "meta":
            interval = _number((record.get("args") or {}).get("interval"))
            return interval if interval and interval > 0 else None
    return None


def mark_final_partial(records: list[dict]) -> list[dict]:
    """A recorded run's records, its last summary marked partial when it covers under PARTIAL_SHARE of
    the run's interval (a session recorded before the scripts marked it themselves). The records are
    not changed: the marked summary is a copy."""
    last = next((i for i in range(len(records) - 1, -1, -1) if records[i].get("kind") == "summary"), None)
    if last is None or "partial" in records[last]:
        return records
    interval, seconds = nominal_interval(records), _number(records[last].get("interval_s"))
    if interval is None or seconds is None or seconds >= PARTIAL_SHARE * interval:
        return records
    return [*records[:last], {**records[last], "partial": True}, *records[last + 1:]]


def span_text(first: float, last: float) -> str:
    """'2025-01-02 12:01:03 – 12:03:10 (2 min 7 s)' in local time; the end's date only if it differs."""
    start, end = time.localtime(first), time.localtime(last)
    same_day = start[:3] == end[:3]
    seconds = max(0, round(last - first))
    length = (f"{seconds // 3600} h {seconds % 3600 // 60} min" if seconds >= 3600 else
              f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{last - first:.1f} s")
    return (f"{time.strftime('%Y-%m-%d %H:%M:%S', start)} – "
            f"{time.strftime('%H:%M:%S' if same_day else '%Y-%m-%d %H:%M:%S', end)} ({length})")
