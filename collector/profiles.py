"""A stream's profile over a time range: its stack records in the range (the frames read once per
distinct stack), weighted as the metric's registry entry says (Chart "stacks": the field y, in the
chart's unit; a snapshot metric, such as compmem's outstanding bytes, by its newest interval only). A
profile in samples says a sample's time where the stream's newest summary gives its frequency_hz."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from collector.chart import registered
from profile_data import Profile, stack_of
from profile_data.records import profile_unit, weight_of

if TYPE_CHECKING:
    from collector.store import Store

MAX_RECORDS = 200_000  # stack records read for one profile at most (the newest)
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
    """The profile of the stream's stack records in the range: since/until (unix seconds) if given,
    else range_text relative to the stream's newest stack record; only a cgroup's (or its tree's)
    records when one is given."""
    name, seconds = parse_range(range_text)
    if since is not None and until is not None and since > until:
        raise BadRange("since is after until")
    w = weighting(source)
    newest_only = name == "latest" or w.snapshot
    if (seconds is not None or newest_only) and since is None:
        newest = store.newest_stack_ts(host, run_id, source, until)
        # an interval's records are written together: the newest is within its last seconds
        since = None if newest is None else newest - (INTERVAL_SPREAD_S if newest_only else seconds)
    rows, frames, truncated = store.stack_records(host, run_id, source, since, until, MAX_RECORDS, cgroup,
                                                  cgroup_tree)
    records = [orjson.loads(data) for _ts, data, _hash in rows]
    if rows and newest_only:
        newest_interval = records[-1].get("interval")
        keep = [i for i, r in enumerate(records) if r.get("interval") == newest_interval]
        rows, records = [rows[i] for i in keep], [records[i] for i in keep]
    # summed per (stack, comm) first: a stack tuple is hashed once, not once per record
    weights: dict[tuple[bytes, object], float] = {}
    first: dict[tuple[bytes, object], dict] = {}
    for (_ts, _data, digest), record in zip(rows, records, strict=True):
        value = weight_of(record, w.field, w.unit)
        if value:
            key = (digest, record.get("comm"))
            if key not in weights:
                weights[key], first[key] = 0, record
            weights[key] += value
    profile = Profile(w.unit)
    for (digest, _comm), value in weights.items():
        stack = stack_of({**first[digest, _comm], **orjson.loads(frames[digest])})
        if stack:
            profile.add(stack, value)
    return RangeProfile(profile, w, rows[0][0] if rows else None, rows[-1][0] if rows else None, len(rows),
                        truncated, sample_period_ns(store, host, run_id, source, until) if w.unit == "samples" else 0.0)


def sample_period_ns(store: Any, host: str, run_id: str, source: str, until: float | None) -> float:
    """1e9 / the frequency_hz of the stream's newest summary (up to `until`), or 0."""
    newest = store.records(host, run_id, source, kind="summary", until=until, limit=1, newest=True, max_text=65536)
    data = orjson.loads(newest[0]["data"]) if newest and newest[0]["data"] else {}
    hz = data.get("frequency_hz") if isinstance(data, dict) else None
    return 1e9 / hz if isinstance(hz, (int, float)) and not isinstance(hz, bool) and hz > 0 else 0.0
