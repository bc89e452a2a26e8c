"""The measurements at /metrics: a prometheus_client collector that reads the stored records and turns
each registered metric's chart declaration (config.py) into Prometheus families, so a new metric with a
chart needs no code here.

- chart "timeseries": the newest record's y as a gauge (`profiler_<metric>_<y>`), split by the chart's
  series field when it has one (top SERIES_TOP values kept, the rest summed into series="other").
- chart "histogram": every `hist` record of the run summed into a cumulative Prometheus histogram per
  hist name (`profiler_<metric>_<name>_seconds`, le = each log2 slot's upper end). A log2 slot holds no
  sum, so these have buckets only (histogram_quantile works; no _sum/_count is made up).
- chart "scatter": the events' y summed into a cumulative log2 histogram in seconds, slotted in
  microseconds (le = 1, 3, 7, ... us, whatever the field's unit: a 50 us connect is not lost in a first
  bucket of 1 ms), with its exact sum and count.
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.chart import registered
from collector.store import Store

if TYPE_CHECKING:
    from registry.spec import Chart

SERIES_TOP = 10  # label values kept per family and host; the rest are summed into "other"
OTHER = "other"
SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
EVENT_SLOT_S = 1e-6  # events are slotted in log2 of microseconds, the finest slot the hist records have
READ_CHUNK = 1000  # records read per stream and query while catching up
NEWEST_WINDOW_S = 60.0  # a stream's newest interval lies within this of its newest record


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


def _json_number(text: str | None) -> float | None:
    """A record field's JSON text (as the database reads it) as a finite number; a string, a bool, null or
    a missing field is none."""
    if text is None or text[:1] in ('"', "t", "f", "n", "[", "{"):
        return None
    try:
        return _number(float(text))
    except (ValueError, OverflowError):
        return None


def slot_le(slot: int, scale: float) -> str:
    """A log2 slot's upper end (2^s - 1 units of `scale` seconds) as the le label, in seconds: divided
    by units per second, so 15 us reads 1.5e-05, not 1.4999999999999999e-05."""
    top = (1 << slot) - 1
    return repr(top / round(1 / scale) if scale < 1 else top * scale)


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
    stored: int = -1  # the stream's records count when last read up to its newest: unchanged, nothing to read
    ts: float = 0.0
    slots: dict[str, dict[int, float]] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)  # events' exact sum (scatter only)

    def buckets(self, name: str) -> list[tuple[str, float]]:
        counts, scale = self.slots[name], self.scale[name]
        out, running = [], 0.0
        for slot in range(1, max(counts) + 1):
            running += counts.get(slot, 0)
            out.append((slot_le(slot, scale), running))
        out.append(("+Inf", running))
        return out


@dataclass(frozen=True)
class _Shown:
    """A stream whose measurements are exported: each (host, metric)'s newest run."""
    stream_id: int
    host: str
    run_id: str
    spec: object  # config.MetricSpec
    stored: int  # records the stream holds (any kind)


def _newest_interval(rows: list[tuple[float, str | None]]) -> tuple[float, dict, list[dict]] | None:
    """(ts, record, records of its interval) of a stream's newest record, given its newest records
    (newest first, as Store.newest_records reads them); None when it has none or it is too large."""
    if not rows or rows[0][1] is None:
        return None
    newest = json.loads(rows[0][1])
    interval = newest.get("interval")
    same = [newest]
    for _ts, data in rows[1:]:
        if data is not None:
            record = json.loads(data)
            if record.get("interval") == interval:
                same.append(record)
    return rows[0][0], newest, same


class Measurements(Collector):
    """prometheus_client collector over a Store; one per app (it keeps the histogram sums)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._hists: dict[tuple[str, str, str], _Hist] = {}
        self._lock = threading.Lock()  # waitress serves scrapes on several threads

    def collect(self) -> Iterator[Metric]:
        """The lab's measurements read in a few grouped queries — one per chart kind and record kind for
        up to 200 streams — not a query or two per stream (1.2 s at 50 hosts x 10 metrics on SQLite,
        3 s on PostgreSQL)."""
        families: dict[str, Metric] = {}
        newest: dict[tuple[str, str], tuple[int, str, int]] = {}
        for stream_id, host, run_id, source, stored in self.store.stream_ids():  # most recently seen first
            newest.setdefault((host, source), (stream_id, run_id, stored))  # the newest run of each (host, metric)
        groups: dict[tuple[str, str], list[_Shown]] = {}
        for (host, source), (stream_id, run_id, stored) in sorted(newest.items()):
            spec = registered(source)
            if spec is None or spec.chart.kind not in ("timeseries", "histogram", "scatter", "stacks"):
                continue
            read = "log2" if spec.chart.kind in ("histogram", "scatter") else spec.chart.kind
            groups.setdefault((read, spec.chart.record_kind), []).append(_Shown(stream_id, host, run_id, spec, stored))
        with self._lock:
            for (read, record_kind), shown in sorted(groups.items()):
                if read == "log2":
                    self._catch_up(shown, record_kind)
                    for s in shown:
                        self._histograms(families, s.spec.name, s.spec.chart, s.host, s.run_id)
                    continue
                rows = self.store.newest_records([s.stream_id for s in shown], record_kind, NEWEST_WINDOW_S,
                                                 max_text=65536 if read == "stacks" else None)
                for s in shown:
                    found = _newest_interval(rows.get(s.stream_id, []))
                    if found is None:
                        continue
                    if read == "timeseries":
                        self._timeseries(families, s.spec.name, s.spec.chart, s.host, *found)
                    else:
                        self._per_process(families, s.spec.name, s.spec.chart, s.host, found[0], found[2])
        yield from families.values()

    def _timeseries(self, families: dict[str, Metric], metric: str, chart: Chart, host: str, ts: float, newest: dict,
                    interval: list[dict]) -> None:
        # one record per series value in an interval: its interval's records; else the newest alone
        records = interval if chart.series else [newest]
        scale = unit_scale(chart.y, chart.unit)
        values: dict[str, float] = {}
        for record in records:
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
            family.add_metric([host, key] if chart.series else [host], value, timestamp=ts)

    def _per_process(self, families: dict[str, Metric], metric: str, chart: Chart, host: str, ts: float,
                     interval: list[dict]) -> None:
        scale = unit_scale(chart.y, chart.unit)
        values: dict[str, float] = {}
        for record in interval:
            value = _number(record.get(chart.y))
            if value is not None:
                comm = str(record.get("comm", ""))
                values[comm] = values.get(comm, 0.0) + value * scale
        name = family_name(metric, chart.y, chart.unit)
        family = families.setdefault(name, GaugeMetricFamily(
            name, f"{metric}: {chart.label or chart.y} per process name in its newest interval "
                  f"(top {SERIES_TOP}, the rest summed as comm=\"{OTHER}\")", labels=["host", "comm"]))
        for comm, value in top_n(values).items():
            family.add_metric([host, comm], value, timestamp=ts)

    def _catch_up(self, shown: list[_Shown], record_kind: str) -> None:
        """Adds the records that arrived since the last scrape to each stream's histogram sums, READ_CHUNK
        a stream per grouped query until every stream is read up to its newest."""
        pending = {s.stream_id: (s, self._hists.setdefault((s.host, s.run_id, s.spec.name), _Hist())) for s in shown}
        # a stream that stored nothing since it was last read (a host gone quiet) is not asked: its
        # query would walk every newer record of the lab (PostgreSQL reads them in id order)
        pending = {i: (s, hist) for i, (s, hist) in pending.items() if hist.stored != s.stored}
        groups: dict[str | None, dict[int, tuple[_Shown, _Hist]]] = {}
        for stream_id, (s, hist) in pending.items():  # events: only their y, read by the database (none parsed)
            field_name = s.spec.chart.y if s.spec.chart.kind == "scatter" else None
            groups.setdefault(field_name, {})[stream_id] = (s, hist)
        for field_name, group in groups.items():
            self._catch_up_group(group, record_kind, field_name)
        for s, hist in pending.values():
            hist.stored = s.stored  # counted before the reads: a batch stored meanwhile makes the next scrape look again

    def _catch_up_group(self, pending: dict[int, tuple[_Shown, _Hist]], record_kind: str, field_name: str | None) -> None:
        while pending:
            found = self.store.records_after_ids({i: hist.after_id for i, (_s, hist) in pending.items()},
                                                 record_kind, READ_CHUNK, field=field_name)
            for stream_id, rows in found.items():
                s, hist = pending[stream_id]
                hist.after_id, hist.ts = rows[-1][0], max(hist.ts, max(ts for _id, ts, _data in rows))
                if field_name is None:
                    for _id, _ts, data in rows:
                        self._add_hist(hist, json.loads(data))
                else:
                    self._add_events(hist, s.spec.chart, [_json_number(data) for _id, _ts, data in rows])
            pending = {i: p for i, p in pending.items() if len(found.get(i, ())) == READ_CHUNK}

    def _histograms(self, families: dict[str, Metric], metric: str, chart: Chart, host: str, run_id: str) -> None:
        hist = self._hists.get((host, run_id, metric))
        if hist is None:
            return
        for name in sorted(hist.slots):
            fam_name = family_name(metric, name, "s")
            family = families.get(fam_name)
            if family is None:
                what = (f"{metric}: {name} (log2 slots of its hist records, summed over the run)"
                        if chart.kind == "histogram" else f"{metric}: {chart.label or name} of each event")
                family = families[fam_name] = HistogramMetricFamily(fam_name, what, labels=["host"])
            total = hist.total.get(name) if chart.kind == "scatter" else None
            family.add_metric([host], hist.buckets(name), total, timestamp=hist.ts)

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
    def _add_events(hist: _Hist, chart: Chart, values: list[float | None]) -> None:
        name = chart.y
        for suffix in ("_ns", "_us", "_ms"):
            name = name.removesuffix(suffix)
        valid = [v for v in values if v is not None and v >= 0]
        if not valid:
            return
        scale = unit_scale(chart.y, chart.unit)
        hist.scale[name] = EVENT_SLOT_S
        slots = hist.slots.setdefault(name, {})
        total = hist.total.get(name, 0.0)
        for value in valid:
            slot = log2_slot(value * scale / EVENT_SLOT_S)
            slots[slot] = slots.get(slot, 0) + 1
            total += value * scale
        hist.total[name] = total
