"""The overhead budget carried out, the same way in the window and headless: each overhead sample
(host/overhead_reader.py's rows) becomes every metric's share of the machine's CPU, the BudgetWatch
(monitor/budget.py) says when to act, and this does it through the controller — a `note` record in the
metric's stream first (docs/ndjson.md: the collector learns the data changed character), a line in the
log, then the switch to its sampling mode (a restart with its registry entry's `sampling` values) or the
stop. Runs on the controller owner's thread; the controller's calls return at once. No Qt.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from monitor.budget import BudgetWatch, Verdict

SOURCE = "overhead budget"


def machine_shares(rows: list[dict], cpus: int) -> tuple[dict[str, float | None], float]:
    """({metric: its programs' BPF time plus its process's CPU, % of the machine's CPU}, the app's own
    share) from a sample's subtotal and app rows, whose figures are % of one CPU."""
    costs = {r["metric"]: None if r.get("total_cpu_pct") is None else r["total_cpu_pct"] / cpus
             for r in rows if r.get("type") == "subtotal"}
    app = sum(r.get("proc_cpu_pct") or 0.0 for r in rows if r.get("type") == "app") / cpus
    return costs, app


class BudgetKeeper:
    """controller: the MonitorController (or a stand-in with running, values_of, registry, note,
    stop_metric and restart_metric); log(metric, line) says what was done."""

    def __init__(self, controller: Any, watch: BudgetWatch, log: Callable[[str, str], None],
                 cpus: int | None = None) -> None:
        self.controller, self.watch, self.log = controller, watch, log
        self.cpus = cpus or os.cpu_count() or 1
        self.costs: dict[str, float | None] = {}    # the last sample's, per metric (% of the machine)
        self.app_pct = 0.0
        self.actions: list[dict] = []               # every note written, in order

    def sample(self, now: float, rows: list[dict]) -> dict | None:
        """One overhead sample at monotonic time `now`; the note written when it was acted on."""
        self.costs, self.app_pct = machine_shares(rows, self.cpus)
        running = set(self.controller.running())
        # a metric on its way out still costs, but is not named: it counts with the app's share
        ending = sum(c or 0.0 for m, c in self.costs.items() if m not in running)
        verdict = self.watch.add(now, {m: c for m, c in self.costs.items() if m in running}, self.app_pct + ending)
        return self.carry_out(verdict) if verdict is not None else None

    def carry_out(self, verdict: Verdict) -> dict:
        name, action, reason = verdict.metric, verdict.action, ""
        values = self.controller.values_of(name) or {}
        changes: dict[str, Any] = {}
        if action == "sample":
            spec = self.controller.registry.get(name)
            changes = spec.sampling_changes(values) if spec is not None else {}
            if not changes:
                reason = (f"{name} has no cheaper mode" if spec is None or not spec.sampling
                          else f"{name} runs in its sampling mode already")
                action = "warn"
        done = {"warn": "warned", "stop": "stopped",
                "sample": "switched to its sampling mode (" + ", ".join(f"{k} {v}" for k, v in changes.items()) + ")"}
        text = (f"over the overhead budget for {verdict.over_s:.0f} s (the profiler {verdict.total_pct:.2f} % of the "
                f"machine's CPU, budget {verdict.budget_pct:g} %); {name} costs most ({verdict.cost_pct:.2f} %): "
                f"{done[action]}" + (f" — {reason}" if reason else ""))
        fields = {"source": SOURCE, "action": action, "asked": verdict.action, "budget_pct": verdict.budget_pct,
                  "total_pct": round(verdict.total_pct, 4), "cost_pct": round(verdict.cost_pct, 4),
                  "over_s": round(verdict.over_s, 1), "text": text}
        if changes:
            fields["args"] = changes
        if reason:
            fields["reason"] = reason
        self.controller.note(name, fields)
        self.log(name, text)
        self.actions.append({"metric": name, **fields})
        if action == "stop":
            self.controller.stop_metric(name)
        elif action == "sample":
            try:
                self.controller.restart_metric(name, {**values, **changes})
            except ValueError as exc:              # it ended meanwhile, or a value the mode made invalid
                self.log(name, f"not switched: {exc}")
        return fields
