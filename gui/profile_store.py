"""The profile a stack-bearing metric's tab shows: its latest interval, the last N seconds, or the whole run.

Cheap and bounded on the GUI thread: add_records() only queues; process() works through the queue for
at most `budget_s` per call (the window's 5 Hz timer calls it), so a burst of stacks is spread over a
few ticks instead of freezing the window, and a queue past `max_pending` records drops the oldest,
counted in `dropped`. Only the range shown keeps a call tree and function table (an Aggregate), updated
per stack as it is taken and, for the last N seconds, by taking out each interval that leaves it;
choosing another range rebuilds that Aggregate from the intervals kept. Rebuilding and taking out are
queued work too, done under the same budget before new records.

The whole run is bounded too: past max_stacks distinct stacks, a new stack is summed into its process's
"[other stacks]" (counted in folded_away). 20,000 stacks of 31 frames that share no caller make 600,000
tree nodes, 194 MB (tracemalloc); real profiles share most of their callers and take a small part of that.

A metric whose intervals each restate the whole state (compmem's outstanding bytes: Chart.snapshot) has
one profile, its newest interval, whatever the range.

The tree and the function table hold the stacks as the views shape them (profile_data.views.simplify: a
Python program's own frames without the interpreter's, unless `interpreter`; an off-CPU stack ended at
the frame that blocked, unless `scheduler`); the profiles kept hold the stacks as recorded. A sampling
metric's records say their frequency (cpuprofile's summary: frequency_hz): period_ns, a sample's time.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from profile_data import Frame, Functions, Node, Profile, Stack, simplify, stack_of
from profile_data.model import OTHER
from profile_data.records import weight_of

RANGES = ("latest", "window", "whole")


class Aggregate:
    """A profile with its call tree and function table, kept together as stacks come and go; the tree and
    the table take each stack as `shape` makes it (the profile keeps it as it came)."""

    def __init__(self, unit: str, shape: Callable[[Stack], Stack] | None = None) -> None:
        self.profile = Profile(unit)
        self.tree = Node()
        self.functions = Functions()
        self.shape = shape

    def add(self, stack: Stack, weight: float) -> None:
        self.profile.add(stack, weight)
        shaped = self.shape(stack) if self.shape else stack
        self.tree.add(shaped, weight)
        self.functions.add(shaped, weight)

    def remove(self, stack: Stack, weight: float) -> None:
        self.profile.remove(stack, weight)
        shaped = self.shape(stack) if self.shape else stack
        self.tree.remove(shaped, weight)
        self.functions.remove(shaped, weight)

    def apply(self, stack: Stack, weight: float) -> None:
        """Add a stack, or with a negative weight take it out."""
        if weight > 0:
            self.add(stack, weight)
        else:
            self.remove(stack, -weight)

    @classmethod
    def of(cls, profile: Profile, shape: Callable[[Stack], Stack] | None = None) -> Aggregate:
        out = cls(profile.unit, shape)
        for stack, weight in profile:
            out.add(stack, weight)
        return out


@dataclass
class Interval:
    key: Any                     # the records' interval number
    ts: float                    # the newest record's time
    profile: Profile = field(default_factory=Profile)
    in_window: bool = True       # still inside the last N seconds


class ProfileStore:
    def __init__(self, unit: str, weight: str, snapshot: bool = False, shown: str = "whole",
                 window_s: float = 60.0, max_window_s: float = 600.0, max_stacks: int = 20_000,
                 max_pending: int = 200_000, budget_s: float = 0.04, blocked: bool = False) -> None:
        self.unit, self.weight, self.snapshot = unit, weight, snapshot
        self.interpreter, self.scheduler = False, not blocked     # the frames the views show (simplify)
        self.period_ns = 0.0             # a sample's time, once a record says the frequency (0: unknown)
        self.window_s, self.max_window_s, self.max_stacks = window_s, max_window_s, max_stacks
        self.budget_s = budget_s
        self.range = shown
        self.pending: deque[dict] = deque(maxlen=max_pending)   # stack records not yet taken
        self.dropped = 0                 # stack records the queue had no room for
        self.received = 0
        self.folded_away = 0             # stacks summed into "[other stacks]" by the bound
        self.version = 0                 # bumped on every change; views compare it
        self.baseline: Aggregate | None = None                   # pinned; complete once baseline_work is done
        self.baseline_work: deque[tuple[Stack, float]] = deque()
        self._reset()

    def _reset(self) -> None:
        self.intervals: deque[Interval] = deque()         # the last max_window_s of intervals
        self.whole = Profile(self.unit)
        self.shown = self._aggregate()
        self.work: deque[tuple[Stack, float]] = deque()     # stacks still to add to `shown` (< 0: take out)
        self.first_ts: float | None = None
        self.version += 1

    def clear(self) -> None:
        self.pending.clear()
        self.baseline, self.baseline_work = None, deque()
        self.dropped = self.received = self.folded_away = 0
        self._reset()

    # --- intake -------------------------------------------------------------------------------------
    def add_records(self, records: Sequence[dict]) -> None:
        """Queue the batch's stack records (cheap: no parsing here); note a sampling frequency."""
        for record in records:
            if record.get("kind") in ("summary", "meta") and "frequency_hz" in record:
                hz = record["frequency_hz"]
                if isinstance(hz, (int, float)) and not isinstance(hz, bool) and hz > 0:
                    self.period_ns = 1e9 / hz
            elif record.get("kind") == "stack" or record.get("level") == "stack":
                if len(self.pending) == self.pending.maxlen:
                    self.dropped += 1
                self.pending.append(record)
                self.received += 1

    @property
    def backlog(self) -> int:
        return len(self.pending) + len(self.work) + len(self.baseline_work)

    def process(self, budget_s: float | None = None) -> bool:
        """Take queued work for at most budget_s (at least 64 items); True when the profile changed."""
        deadline = time.perf_counter() + (self.budget_s if budget_s is None else budget_s)
        changed = False
        while True:
            for _ in range(64):
                if self.work:                # a rebuild or an expiry comes first: new records wait
                    self.shown.apply(*self.work.popleft())
                    changed = True
                elif self.baseline_work and self.baseline is not None:
                    self.baseline.add(*self.baseline_work.popleft())
                    changed = changed or not self.baseline_work
                elif self.pending:
                    changed = self._take(self.pending.popleft()) or changed
                else:
                    break
            if not self.backlog and not (changed and self._expire()):
                break
            if time.perf_counter() >= deadline:
                break
        if changed:
            self.version += 1
        return changed

    def _take(self, record: dict) -> bool:
        stack = stack_of(record)
        value = weight_of(record, self.weight, self.unit) if stack else None
        if not stack or not value or value <= 0:
            return False
        key, ts = record.get("interval"), record.get("ts")
        ts = float(ts) if isinstance(ts, (int, float)) else (self.intervals[-1].ts if self.intervals else 0.0)
        if not self.intervals or self.intervals[-1].key != key:
            if self.snapshot:
                self._reset()
            elif self.range == "latest":
                self.shown = self._aggregate()
            self.intervals.append(Interval(key, ts, Profile(self.unit)))
        current = self.intervals[-1]
        current.ts = max(current.ts, ts)
        self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        if stack not in self.whole.stacks and len(self.whole) >= self.max_stacks:
            stack = (stack[0], Frame(OTHER, "", stack[0].kind))
            self.folded_away += 1
        current.profile.add(stack, value)
        self.whole.add(stack, value)
        self.shown.add(stack, value)
        return True

    def _expire(self) -> bool:
        """Intervals past the window leave it (and past max_window_s are forgotten); True when that
        queued work (taking them out of the window shown)."""
        if not self.intervals:
            return False
        queued = len(self.work)
        newest = self.intervals[-1].ts
        while len(self.intervals) > 1 and newest - self.intervals[0].ts >= self.max_window_s:
            self._leave_window(self.intervals.popleft())
        for interval in self.intervals:
            if newest - interval.ts < self.window_s or interval is self.intervals[-1]:
                break
            self._leave_window(interval)
        return len(self.work) > queued

    def _leave_window(self, interval: Interval) -> None:
        if interval.in_window:
            interval.in_window = False
            if self.range == "window" and not self.snapshot:
                self.work.extend((stack, -weight) for stack, weight in interval.profile)

    # --- choices ------------------------------------------------------------------------------------
    def pin(self, profile: Profile | None = None) -> None:
        """Keep the profile shown now (or `profile`: a saved session's, a collector's) as the baseline: its
        tree is built by process(), a budget at a time."""
        profile = self.shown.profile if profile is None else profile
        if profile.unit != self.unit:
            raise ValueError(f"a baseline in {profile.unit} cannot compare with a profile in {self.unit}")
        self.baseline = self._aggregate()
        self.baseline_work = deque(profile.stacks.items())

    def _aggregate(self) -> Aggregate:
        shape = None if self.interpreter and self.scheduler else partial(
            simplify, interpreter=self.interpreter, scheduler=self.scheduler)
        return Aggregate(self.unit, shape)

    def set_frames(self, interpreter: bool | None = None, scheduler: bool | None = None) -> None:
        """Show (or leave out) the interpreter's frames of Python stacks and the scheduler's of blocks: the
        range shown and the baseline are rebuilt by process(), a budget at a time."""
        self.interpreter = self.interpreter if interpreter is None else interpreter
        self.scheduler = self.scheduler if scheduler is None else scheduler
        if self.baseline is not None:
            pinned = self.baseline.profile.stacks.items()
            self.baseline_work = deque([*pinned, *self.baseline_work])
            self.baseline = self._aggregate()
        self._rebuild()

    @property
    def baseline_ready(self) -> bool:
        return self.baseline is not None and not self.baseline_work

    def set_range(self, which: str) -> None:
        """Show another range: its Aggregate is rebuilt by process(), a budget at a time."""
        if which not in RANGES:
            raise ValueError(f"range {which!r}: one of {', '.join(RANGES)}")
        self.range = which
        self._rebuild()

    def set_window(self, seconds: float) -> None:
        """A new "last N seconds" (at most max_window_s: older intervals are not kept)."""
        self.window_s = min(seconds, self.max_window_s)
        newest = self.intervals[-1].ts if self.intervals else 0.0
        for interval in self.intervals:
            interval.in_window = interval is self.intervals[-1] or newest - interval.ts < self.window_s
        if self.range == "window":
            self._rebuild()

    def _sources(self) -> list[Profile]:
        """The profiles the range shown is the sum of."""
        if self.snapshot or self.range == "whole":
            return [self.whole]
        if self.range == "window":
            return [i.profile for i in self.intervals if i.in_window]
        return [self.intervals[-1].profile] if self.intervals else []

    def _rebuild(self) -> None:
        self.shown = self._aggregate()
        self.work = deque(item for profile in self._sources() for item in profile.stacks.items())
        self.version += 1

    def range_profile(self) -> Profile:
        """Every stack of the range shown, taken so far (whole even while its tree is being rebuilt)."""
        out = Profile(self.unit)
        for profile in self._sources():
            out.merge(profile)
        return out

    def span_s(self) -> float:
        """Seconds of records in the range shown, for the status line."""
        if not self.intervals or self.range == "latest" or self.snapshot:
            return 0.0
        newest = self.intervals[-1].ts
        if self.range == "whole":
            return newest - (self.first_ts if self.first_ts is not None else newest)
        return newest - next(i.ts for i in self.intervals if i.in_window)
