"""A profile over a time range of one stream or of a selection of streams (collector/selection.py): their
stack records in the range merged (one query for every stream, the frames read once per distinct
stack), weighted as the metric's registry entry says (Chart "stacks": the field y, in the
chart's unit; a snapshot metric, such as compmem's outstanding bytes, by its newest interval only). A
profile in samples says a sample's time where the streams' newest summaries give one frequency_hz."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from collector.chart import registered
from collector.stack_reads import StackFilters, StackSums
from profile_data import Profile
from profile_data.records import frames_stack, profile_unit, weight_of, weight_scale

if TYPE_CHECKING:
    from collector.store import Store

MAX_RECORDS = 200_000  # stack records read for one profile at most (the newest)
MAX_STREAMS = 500  # streams one selection may match (each stream's newest interval is a term of one query)
INTERVAL_SPREAD_S = 10.0  # "latest": the newest interval's records are read from this far before the newest
RANGE_HELP = "range must be run, latest, or a length such as 90s, 5m, 1h (the stream's last seconds)"
_LENGTH = re.compile(r"^([0-9]{1,7})([smh])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600}
RANGES = ("latest", "60s", "5m", "1h", "run")  # offered on the stream page


class BadRange(ValueError):
    pass


@dataclass(frozen=True)
class Weighting:
    field: str
    unit: str  # a profile unit: samples, ns, bytes
    label: str
    snapshot: bool = False
    blocked: bool = False  # each stack ends in the scheduler: the views end it where it blocked


@dataclass
class RangeProfile:
    profile: Profile
    weighting: Weighting
    since: float | None  # the range covered by the records read (None: no record)
    until: float | None
    records: int
    truncated: bool  # more than MAX_RECORDS records in the range: the newest were read
    period_ns: float = 0.0  # a sample's time (samples only; 0: no frequency said)
    streams: int = 1  # the streams the selection matched


def weighting(source: str) -> Weighting:
    """The registry's stacks chart of this metric; else each stack record's count, in samples."""
    spec = registered(source)
    if spec is not None and spec.chart.kind == "stacks":
        c = spec.chart
        return Weighting(c.y, profile_unit(c.unit), c.label or c.y, c.snapshot, c.blocked)
    return Weighting("count", "samples", "samples")


def parse_range(text: str | None) -> tuple[str, float | None]:
    """(name, seconds): "run" (None), "latest" (None) or a length in seconds."""
    text = (text or "run").strip()
    if text in ("run", "latest"):
        return text, None
    match = _LENGTH.match(text)
    if not match or int(match.group(1)) == 0:
        raise BadRange(RANGE_HELP)
    return text, float(int(match.group(1)) * _SECONDS[match.group(2)])


def bound(name: str, value: str | None) -> float | None:
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except ValueError:
        raise BadRange(f"{name} must be unix seconds") from None
    if not math.isfinite(number) or number < 0:
        raise BadRange(f"{name} must be unix seconds")
    return number


def range_profile(store: Store, host: str, run_id: str, source: str, range_text: str | None = None,
                  since: float | None = None, until: float | None = None, cgroup: str | None = None,
                  cgroup_tree: bool = False) -> RangeProfile:
    """The profile of one stream's stack records in the range (selection_profile of that stream)."""
    return selection_profile(store, source, (host,), (run_id,), range_text, since, until,
                             (cgroup,) if cgroup is not None else (), cgroup_tree)


def selection_profile(store: Store, source: str, hosts: tuple[str, ...] = (), run_ids: tuple[str, ...] = (),
                      range_text: str | None = None, since: float | None = None, until: float | None = None,
                      cgroups: tuple[str, ...] = (), cgroup_tree: bool = False,
                      comms: tuple[str, ...] = ()) -> RangeProfile:
    """The merged profile of the stack records of `source`'s streams from any of `hosts` and any of
    `run_ids` (none: all), of any of `cgroups` (or their trees) and `comms` when given, in the range:
    since/until (unix seconds) if given, else range_text relative to the newest stack record of those
    streams; "latest", and a snapshot metric's range, is each stream's newest interval (summed over
    the streams). One query reads the records of every stream, the frames once per distinct stack.
    LookupError when no stream matches; BadRange for a range it cannot read or too many streams."""
    name, seconds = parse_range(range_text)
    if since is not None and until is not None and since > until:
        raise BadRange("since is after until")
    w = weighting(source)
    ids = store.selection_streams(source, hosts, run_ids, MAX_STREAMS)
    if not ids:
        raise LookupError(f"no stream of {source!r} matches the selection")
    if len(ids) > MAX_STREAMS:
        raise BadRange(f"the selection matches more than {MAX_STREAMS} streams: name hosts or runs")
    newest_only = name == "latest" or w.snapshot
    since_of = None
    if (seconds is not None or newest_only) and since is None:
        newest = store.newest_stack_times(ids, until)
        if newest_only:  # an interval's records are written together: the newest is within its last seconds
            since_of = {stream: ts - INTERVAL_SPREAD_S for stream, ts in newest.items()}
        elif newest:
            since = max(newest.values()) - seconds
    filters = StackFilters(since, until, since_of, cgroups, cgroup_tree, comms)
    if newest_only:
        summed = newest_intervals(store, ids, filters, w)
    else:  # summed by the database: no record is read here
        summed = store.selection_stack_sums(ids, filters, w.field, weight_scale(w.field, w.unit), MAX_RECORDS)
    profile = Profile(w.unit)
    for digest, comm, value in summed.sums:
        stack = frames_stack(orjson.loads(summed.frames[digest]), comm) if value else None
        if stack:
            profile.add(stack, value)
    return RangeProfile(profile, w, summed.since, summed.until, summed.records, summed.truncated,
                        sample_period_ns(store, ids, until) if w.unit == "samples" else 0.0, len(ids))


def newest_intervals(store: Store, ids: list[int], filters: StackFilters, w: Weighting) -> StackSums:
    """Each stream's newest interval (that of its newest record) of the records the filters keep, summed
    per stack and comm here (an interval's records are few; which interval is each record's field)."""
    rows, frames, truncated = store.selection_stack_records(ids, filters, MAX_RECORDS)
    records = [orjson.loads(row[1]) for row in rows]
    if rows:
        interval = {row[3]: record.get("interval") for row, record in zip(rows, records, strict=True)}
        keep = [i for i, (row, record) in enumerate(zip(rows, records, strict=True))
                if record.get("interval") == interval[row[3]]]
        rows, records = [rows[i] for i in keep], [records[i] for i in keep]
    # summed per (stack, comm) first: a stack tuple is hashed once, not once per record
    weights: dict[tuple[bytes, object], float] = {}
    for row, record in zip(rows, records, strict=True):
        value = weight_of(record, w.field, w.unit)
        if value:
            key = (row[2], record.get("comm"))
            weights[key] = weights.get(key, 0) + value
    return StackSums([(digest, comm, value) for (digest, comm), value in weights.items()], frames, len(rows),
                     rows[0][0] if rows else None, rows[-1][0] if rows else None, truncated)


def sample_period_ns(store: Store, stream_ids: list[int], until: float | None) -> float:
    """1e9 / the frequency_hz of the streams' newest summaries (up to `until`) when they all say the same
    one; else 0 (no time is said beside the samples)."""
    rates = set()
    for text in store.newest_summaries(stream_ids, until).values():
        data = orjson.loads(text) if text else {}
        hz = data.get("frequency_hz") if isinstance(data, dict) else None
        rates.add(hz if isinstance(hz, (int, float)) and not isinstance(hz, bool) and hz > 0 else None)
    return 1e9 / rates.pop() if len(rates) == 1 and None not in rates else 0.0
