"""The overhead budget's decision, and nothing else: fed once a second what each running metric costs
(its BPF programs' run time plus its process's CPU, as a share of the whole machine's CPU) and what the
app itself costs, it says when the profiler's total has stayed over the budget for `hold_s` seconds,
which metric costs most, and what the user chose to do about it (warn, switch it to its sampling mode,
stop it). Carrying that out is monitor/budget_keeper.py's job; the numbers come from the overhead
sampler (host/overhead_reader.py). Pure logic: no clock, no I/O, no Qt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_BUDGET_PCT = 5.0        # of the machine's CPU (every CPU together)
DEFAULT_HOLD_S = 10.0           # over the budget this long, without a dip, before anything is done
# what the user may choose, and how a person reads each
ACTIONS = {"warn": "warn", "sample": "switch it to its sampling mode", "stop": "stop it"}


class BudgetError(ValueError):
    """Why a budget, an action or a hold time is refused, in one line."""


def parse_budget(text: object) -> float:
    """A budget in % of the machine's CPU: a number above 0 and at most 100 ("5", "0.5", "5 %")."""
    raw = str(text).strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise BudgetError(f"overhead budget {text!r} is not a number: give a share of the machine's CPU in %, "
                          "above 0 and at most 100") from None
    if not math.isfinite(value) or value <= 0 or value > 100:
        raise BudgetError(f"overhead budget {raw}: must be above 0 and at most 100 (% of the machine's CPU)")
    return value


def parse_action(text: object) -> str:
    action = str(text).strip().lower()
    if action not in ACTIONS:
        raise BudgetError(f"over-budget action {text!r}: must be one of {', '.join(ACTIONS)}")
    return action


def parse_hold(text: object) -> float:
    """Seconds over the budget before acting: a finite number above 0."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise BudgetError(f"over-budget time {text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise BudgetError(f"over-budget time {text}: must be a number of seconds above 0")
    return value


@dataclass(frozen=True)
class Verdict:
    """The total has stayed over the budget for over_s seconds: `metric` costs most, do `action`."""

    metric: str
    action: str             # the user's choice: warn, sample or stop
    cost_pct: float         # the metric's share of the machine's CPU in the last sample
    total_pct: float        # the profiler's (every metric and the app)
    budget_pct: float
    over_s: float


class BudgetWatch:
    """The samples' running verdict. A dip to the budget or below starts the hold again; after a
    verdict the next one needs as long over the budget again (time for the action to show), and names
    a metric not acted on since the total was last measured within the budget, so a metric that stays
    costliest after its switch does not hold back the others. A metric with no cost known yet (None: a
    restart's new process before its second sample) counts as 0 and is never named, and a dip it may
    have caused forgets nothing acted on; nor is a metric that costs nothing named."""

    def __init__(self, budget_pct: float, action: str = "warn", hold_s: float = DEFAULT_HOLD_S) -> None:
        self.budget_pct = parse_budget(budget_pct)
        self.action = parse_action(action)
        self.hold_s = parse_hold(hold_s)
        self.total_pct: float | None = None      # the last sample's
        self.over_since: float | None = None     # when the current stretch over the budget began
        self.acted: set[str] = set()             # metrics named since the total was last within the budget

    def over_s(self, now: float) -> float:
        """How long the total has been over the budget (0 when it is not)."""
        return 0.0 if self.over_since is None else now - self.over_since

    def set_budget(self, budget_pct: float) -> None:
        """A new budget: the hold starts again from the next sample."""
        self.budget_pct = parse_budget(budget_pct)
        self.over_since = None

    def add(self, now: float, costs: Mapping[str, float | None], other_pct: float | None = 0.0) -> Verdict | None:
        """One sample at monotonic time `now`: {metric: its share of the machine's CPU} of the metrics
        running, and what the rest of the profiler (the app's own process) costs."""
        known = {name: cost for name, cost in costs.items() if cost is not None}
        total = sum(known.values()) + (other_pct or 0.0)
        self.total_pct = total
        if total <= self.budget_pct:
            self.over_since = None
            if len(known) == len(costs):        # measured within the budget: a new stretch over may name anyone
                self.acted.clear()
            return None
        if self.over_since is None:
            self.over_since = now
        over = now - self.over_since
        if over < self.hold_s:
            return None
        candidates = {name: cost for name, cost in known.items() if cost > 0 and name not in self.acted}
        if not candidates:
            return None
        metric = min(candidates, key=lambda name: (-candidates[name], name))   # equal costs: by name
        self.acted.add(metric)
        self.over_since = now
        return Verdict(metric, self.action, candidates[metric], total, self.budget_pct, over)
