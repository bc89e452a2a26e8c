"""The measurements at /metrics: a prometheus_client collector that reads the stored records and turns
each registered metric's chart declaration (config.py) into Prometheus families, so a new metric with a
chart needs no code here.

- chart "timeseries": the newest record's y as a gauge (`profiler_<metric>_<y>`), split by the chart's
  series field when it has one (top SERIES_TOP values kept, the rest summed into series="other").
- chart "histogram": every `hist` record of the run summed into a cumulative Prometheus histogram per
  hist name (`profiler_<metric>_<name>_seconds`, le = each log2 slot's upper end). A log2 slot holds no
  sum, so these have buckets only (histogram_quantile works; no _sum/_count is made up).
- chart "scatter": the events' y summed into a cumulative log2 histogram in seconds, with its exact sum
  and count.
- chart "stacks": the newest interval's rows' y summed per process name (top SERIES_TOP, the rest
  summed into comm="other") as a gauge.

Labels are host (and the series or comm above): only the newest run of a (host, metric) is exported, so
a series lives as long as the lab's hosts do. Samples carry the record's own time, so a PromQL query at
an interval's time gives that interval's value whatever the scrape period.

Histograms are summed incrementally: this process remembers, per stream, the last record id it read
and the counts so far, and reads only newer records on the next scrape."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.chart import registered
from collector.store import Store

SERIES_TOP = 10  # label values kept per family and host; the rest are summed into "other"
OTHER = "other"
SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
READ_CHUNK = 5000  # records read per query while catching up


def family_name(metric: str, y: str, unit: str = "", label: str = "") -> str:
    """Prometheus' conventions from a record field: base units in the name (_seconds, _bytes),
    'per second' spelt out; a bare rate field (sysnest's per_sec) is named by its chart label's noun."""
    base = y
    if base in ("per_sec", "per_s") and label:
        base = label.split("/")[0].strip().replace(" ", "_") + "_" + base
    for suffix, seconds_unit in (("_ns", "ns"), ("_us", "us"), ("_ms", "ms")):
        if base.endswith(suffix):
            base, unit = base[: -len(suffix)], seconds_unit
    for rate in ("_per_sec", "_per_s"):
        if base.endswith(rate):
            base = base[: -len(rate)] + "_per_second"
    if unit in SECONDS and not base.endswith("_seconds"):
        base += "_seconds"
    elif unit == "bytes" and "bytes" not in base:
        base += "_bytes"
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in f"profiler_{metric}_{base}")
    return name.replace("__", "_")


def unit_scale(field_name: str, unit: str) -> float:
    for suffix, seconds_unit in (("_ns", "ns"), ("_us", "us"), ("_ms", "ms")):
        if field_name.endswith(suffix):
            return SECONDS[seconds_unit]
    return SECONDS.get(unit, 1.0)


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def log2_slot(value: float) -> int:
    """The log2 slot whose upper end (2^s - 1, bcctool.log2_buckets' slots) is the first >= value."""
    return max(1, math.ceil(math.log2(value + 1)))


def top_n(values: dict[str, float], n: int = SERIES_TOP) -> dict[str, float]:
    """The n largest values by name, the rest summed under OTHER (bounded label cardinality)."""
    ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[:n])
    if len(ranked) > n:
        kept[OTHER] = kept.get(OTHER, 0.0) + sum(v for _k, v in ranked[n:])
    return kept


@dataclass
class _Hist:
    """Cumulative log2 slot counts of one stream (per hist name), and up to which record they go."""
    after_id: int = 0
    ts: float = 0.0
    slots: dict[str, dict[int, float]] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)  # events' exact sum (scatter only)

    def buckets(self, name: str) -> list[tuple[str, float]]:
        counts, scale = self.slots[name], self.scale[name]
        out, running = [], 0.0
        for slot in range(1, max(counts) + 1):
            running += counts.get(slot, 0)
            out.append((repr(((1 << slot) - 1) * scale), running))
        out.append(("+Inf", running))
        return out


class Measurements(Collector):
    """prometheus_client collector over a Store; one per app (it keeps the histogram sums)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._hists: dict[tuple[str, str, str], _Hist] = {}
        self._lock = threading.Lock()  # waitress serves scrapes on several threads

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        newest: dict[tuple[str, str], object] = {}
        for s in self.store.streams():  # most recently seen first: the newest run of each (host, metric)
            newest.setdefault((s.host, s.source), s)
        with self._lock:
            for (host, source), s in sorted(newest.items()):
                spec = registered(source)
                if spec is None:
                    continue
                chart = spec.chart
                if chart.kind == "timeseries":
                    self._timeseries(families, spec.name, chart, host, s.run_id)
                elif chart.kind in ("histogram", "scatter"):
                    self._histograms(families, spec.name, chart, host, s.run_id)
                elif chart.kind == "stacks":
                    self._per_process(families, spec.name, chart, host, s.run_id)
        yield from families.values()

    def _timeseries(self, families: dict[str, Metric], metric: str, chart, host: str, run_id: str) -> None:
        rows = self.store.records(host, run_id, metric, kind=chart.record_kind, limit=1, newest=True)
        if not rows or rows[0]["data"] is None:
            return
        newest_interval = json.loads(rows[0]["data"]).get("interval")
        records = [rows[0]]
        if chart.series:  # one record per series value in an interval: read that interval's records
            records = [r for r in self.store.records(host, run_id, metric, kind=chart.record_kind,
                                                     since=rows[0]["ts"] - 60, newest=True, limit=10_000)
                       if r["data"] and json.loads(r["data"]).get("interval") == newest_interval]
        scale = unit_scale(chart.y, chart.unit)
        values: dict[str, float] = {}
        for row in records:
            record = json.loads(row["data"])
            value = _number(record.get(chart.y))
            if value is not None:
                key = str(record.get(chart.series, "")) if chart.series else ""
                values[key] = values.get(key, 0.0) + value * scale
        if not values:
            return
        name = family_name(metric, chart.y, chart.unit, chart.label)
        labels = ["host", chart.series] if chart.series else ["host"]
        family = families.setdefault(name, GaugeMetricFamily(
            name, f"{metric}: {chart.label or chart.y}, its newest interval (record field {chart.y})", labels=labels))
        for key, value in (top_n(values) if chart.series else values).items():
            family.add_metric([host, key] if chart.series else [host], value, timestamp=rows[0]["ts"])

    def _per_process(self, families: dict[str, Metric], metric: str, chart, host: str, run_id: str) -> None:
        rows = self.store.records(host, run_id, metric, kind=chart.record_kind, limit=1, newest=True)
        if not rows or rows[0]["data"] is None:
            return
        ts = rows[0]["ts"]
        newest_interval = json.loads(rows[0]["data"]).get("interval")
        scale = unit_scale(chart.y, chart.unit)
        values: dict[str, float] = {}
        for row in self.store.records(host, run_id, metric, kind=chart.record_kind, since=ts - 60,
                                      newest=True, limit=10_000, max_text=65536):
            if row["data"] is None:
                continue
            record = json.loads(row["data"])
            value = _number(record.get(chart.y))
            if record.get("interval") == newest_interval and value is not None:
                comm = str(record.get("comm", ""))
                values[comm] = values.get(comm, 0.0) + value * scale
        name = family_name(metric, chart.y, chart.unit)
        family = families.setdefault(name, GaugeMetricFamily(
            name, f"{metric}: {chart.label or chart.y} per process name in its newest interval "
                  f"(top {SERIES_TOP}, the rest summed as comm=\"{OTHER}\")", labels=["host", "comm"]))
        for comm, value in top_n(values).items():
            family.add_metric([host, comm], value, timestamp=ts)

    def _histograms(self, families: dict[str, Metric], metric: str, chart, host: str, run_id: str) -> None:
        key = (host, run_id, metric)
        hist = self._hists.setdefault(key, _Hist())
        for _id, ts, record in self._new_records(key, chart.record_kind, hist):
            hist.after_id, hist.ts = _id, max(hist.ts, ts)
            if chart.kind == "histogram":
                self._add_hist(hist, record)
            else:
                self._add_event(hist, chart, record)
        for name in sorted(hist.slots):
            fam_name = family_name(metric, name, "s")
            family = families.get(fam_name)
            if family is None:
                what = (f"{metric}: {name} (log2 slots of its hist records, summed over the run)"
                        if chart.kind == "histogram" else f"{metric}: {chart.label or name} of each event")
                family = families[fam_name] = HistogramMetricFamily(fam_name, what, labels=["host"])
            total = hist.total.get(name) if chart.kind == "scatter" else None
            family.add_metric([host], hist.buckets(name), total, timestamp=hist.ts)

    def _new_records(self, key: tuple[str, str, str], kind: str, hist: _Hist) -> Iterable[tuple[int, float, dict]]:
        host, run_id, metric = key
        while True:
            chunk = self.store.records_after_id(host, run_id, metric, kind, hist.after_id, READ_CHUNK)
            for row_id, ts, data in chunk:
                yield row_id, ts, json.loads(data)
            if len(chunk) < READ_CHUNK:
                return

    @staticmethod
    def _add_hist(hist: _Hist, record: dict) -> None:
        name, buckets = record.get("name"), record.get("buckets")
        if not isinstance(name, str) or not isinstance(buckets, list):
            return
        scale = SECONDS.get(str(record.get("unit", "us")), 1e-6)
        if hist.scale.setdefault(name, scale) != scale:
            return  # a run's unit does not change; a record that says otherwise is not summed with the rest
        slots = hist.slots.setdefault(name, {})
        for b in buckets:
            count, hi = (_number(b.get("count")), _number(b.get("hi"))) if isinstance(b, dict) else (None, None)
            if count is not None and hi is not None and hi >= 0:
                slot = log2_slot(hi)
                slots[slot] = slots.get(slot, 0) + count

    @staticmethod
    def _add_event(hist: _Hist, chart, record: dict) -> None:
        value = _number(record.get(chart.y))
        if value is None or value < 0:
            return
        name = chart.y
        for suffix in ("_ns", "_us", "_ms"):
            name = name.removesuffix(suffix)
        scale = unit_scale(chart.y, chart.unit)
        hist.scale.setdefault(name, scale)
        slots = hist.slots.setdefault(name, {})
        slot = log2_slot(value)
        slots[slot] = slots.get(slot, 0) + 1
        hist.total[name] = hist.total.get(name, 0.0) + value * scale
