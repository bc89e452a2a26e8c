"""One metric's profile from a saved session (monitor/session.py), over the whole session or a span of
it: what the window's "Baseline from file…" compares the live profile with. No Qt here.

A span is given in seconds from the session's start (its metric's first record, the meta line); its
stack records with a time in [start + from_s, start + to_s] are summed. A metric whose intervals each
restate the whole state (Chart.snapshot: compmem) gives its newest interval in the span, as the window shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import config
from monitor.session import SessionError, read_session
from profile_data import Profile, from_records
from profile_data.records import is_stack_record, profile_unit


@dataclass(frozen=True)
class SessionProfile:
    profile: Profile
    span_s: float          # the seconds the profile covers (the span asked for, within the session)
    session_s: float       # the whole session's length, for the metric


def _ts(record: dict) -> float | None:
    ts = record.get("ts")
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None


def session_profile(path: str, spec: config.MetricSpec, from_s: float = 0.0,
                    to_s: float | None = None) -> SessionProfile:
    """spec's profile in the session at path (SessionError, one line, when there is none)."""
    if from_s < 0 or (to_s is not None and to_s <= from_s):
        end_text = "the end" if to_s is None else f"{to_s:g} s"
        raise SessionError(f"span {from_s:g} s to {end_text}: 'to' must be after 'from', both 0 or more")
    by_metric, _ = read_session(path, [spec.name])
    records = by_metric[spec.name]
    times = [t for t in map(_ts, records) if t is not None]
    if not times:
        raise SessionError(f"{path}: {spec.name}'s records carry no times")
    start, end = min(times), max(times)
    low, high = start + from_s, end if to_s is None else min(end, start + to_s)
    stacks = [r for r in records if is_stack_record(r) and (t := _ts(r)) is not None and low <= t <= high]
    if spec.chart.snapshot and stacks:
        newest = stacks[-1].get("interval")
        stacks = [r for r in stacks if r.get("interval") == newest]
    profile = from_records(stacks, spec.chart.y, profile_unit(spec.chart.unit))
    if not profile.total:
        where = "" if from_s == 0 and to_s is None else f" between {from_s:g} s and {high - start:g} s"
        raise SessionError(f"{path}: no stacks of {spec.name}{where} (the session lasts {end - start:.1f} s)")
    return SessionProfile(profile, max(0.0, high - low), end - start)
