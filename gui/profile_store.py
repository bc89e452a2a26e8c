"""The profiles a stack-bearing metric's tab shows: its latest interval, the last N seconds, the whole run.

Records arrive from the window's 5 Hz timer; each stack record is added once to every view it belongs to
(tree and function table included), and an interval leaving the window is subtracted, so a refresh costs
the records that arrived, never a rebuild of the run. The whole run is bounded: past max_stacks distinct
stacks, a new stack is summed into its process's "[other stacks]" (counted in folded_away).

A metric whose intervals each restate the whole state (compmem's outstanding bytes: Chart.snapshot) has
one profile, its newest interval, whatever the range.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from profile_data import Frame, Functions, Node, Profile, Stack, stack_of
from profile_data.model import OTHER
from profile_data.records import weight_of

RANGES = ("latest", "window", "whole")


class Aggregate:
    """A profile with its call tree and function table, kept together as stacks come and go."""

    def __init__(self, unit: str) -> None:
        self.profile = Profile(unit)
        self.tree = Node()
        self.functions = Functions()

    def add(self, stack: Stack, weight: float) -> None:
        self.profile.add(stack, weight)
        self.tree.add(stack, weight)
        self.functions.add(stack, weight)

    def add_profile(self, profile: Profile) -> None:
        for stack, weight in profile:
            self.add(stack, weight)

    def remove_profile(self, profile: Profile) -> None:
        self.profile.subtract(profile)
        for stack, weight in profile:
            self.tree.remove(stack, weight)
            self.functions.remove(stack, weight)

    @classmethod
    def of(cls, profile: Profile) -> Aggregate:
        out = cls(profile.unit)
        out.add_profile(profile)
        return out


@dataclass
class Interval:
    key: Any                     # the records' interval number
    ts: float                    # the newest record's time
    profile: Profile = field(default_factory=Profile)
    in_window: bool = True       # still counted in the "last N seconds" aggregate


class ProfileStore:
    def __init__(self, unit: str, weight: str, snapshot: bool = False, window_s: float = 60.0,
                 max_window_s: float = 600.0, max_stacks: int = 50_000) -> None:
        self.unit, self.weight, self.snapshot = unit, weight, snapshot
        self.window_s, self.max_window_s, self.max_stacks = window_s, max_window_s, max_stacks
        self.version = 0                 # bumped on every change; views compare it
        self.folded_away = 0             # stacks summed into "[other stacks]" by the bound
        self.clear()

    def clear(self) -> None:
        self.intervals: deque[Interval] = deque()         # the last max_window_s of intervals
        self.whole = Aggregate(self.unit)
        self.window = Aggregate(self.unit)
        self._latest: tuple[int, Aggregate] | None = None
        self.first_ts: float | None = None
        self.version += 1

    def add_records(self, records: Sequence[dict]) -> bool:
        """Take a batch (records of any kind); True when a profile changed."""
        changed = False
        for record in records:
            stack = stack_of(record)
            if stack is None:
                continue
            value = weight_of(record, self.weight, self.unit)
            if not value or value <= 0:
                continue
            self._add(record.get("interval"), record.get("ts"), stack, value)
            changed = True
        if changed:
            self._expire()
            self.version += 1
        return changed

    def _add(self, key: Any, ts: Any, stack: Stack, weight: float) -> None:
        ts = float(ts) if isinstance(ts, (int, float)) else (self.intervals[-1].ts if self.intervals else 0.0)
        if not self.intervals or self.intervals[-1].key != key:
            if self.snapshot:
                self.clear()
            self.intervals.append(Interval(key, ts, Profile(self.unit)))
        current = self.intervals[-1]
        current.ts = max(current.ts, ts)
        self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        if stack not in self.whole.profile.stacks and len(self.whole.profile) >= self.max_stacks:
            stack = (stack[0], Frame(OTHER, "", stack[0].kind))
            self.folded_away += 1
        current.profile.add(stack, weight)
        self.whole.add(stack, weight)
        self.window.add(stack, weight)

    def _expire(self) -> None:
        newest = self.intervals[-1].ts
        for interval in list(self.intervals):
            if interval is self.intervals[-1]:
                break
            age = newest - interval.ts
            if age >= self.max_window_s:
                self.intervals.popleft()
            if age >= self.window_s and interval.in_window:
                self.window.remove_profile(interval.profile)
                interval.in_window = False

    def set_window(self, seconds: float) -> None:
        """A new "last N seconds": rebuilt once from the intervals held (at most max_window_s)."""
        self.window_s = min(seconds, self.max_window_s)
        self.window = Aggregate(self.unit)
        newest = self.intervals[-1].ts if self.intervals else 0.0
        for interval in self.intervals:
            inside = interval is self.intervals[-1] or newest - interval.ts < self.window_s
            interval.in_window = inside
            if inside:
                self.window.add_profile(interval.profile)
        self.version += 1

    def view(self, which: str) -> Aggregate:
        """The aggregate of a range: "latest" (the newest interval), "window", or "whole"."""
        if which == "whole" or self.snapshot:
            return self.whole
        if which == "window":
            return self.window
        if self._latest is None or self._latest[0] != self.version:
            newest = self.intervals[-1].profile if self.intervals else Profile(self.unit)
            self._latest = (self.version, Aggregate.of(newest))
        return self._latest[1]

    def span_s(self, which: str) -> float:
        """Seconds of records in a range, for the status line."""
        if not self.intervals or which == "latest" or self.snapshot:
            return 0.0
        newest = self.intervals[-1].ts
        first = self.first_ts if which == "whole" else max(self.intervals[0].ts, newest - self.window_s)
        return newest - (first if first is not None else newest)


def profile_unit(chart_unit: str) -> str:
    """The profile unit for a chart's unit: times become ns, bytes stay bytes, the rest are samples."""
    if chart_unit in ("ns", "us", "ms", "s"):
        return "ns"
    return "bytes" if chart_unit == "bytes" else "samples"

