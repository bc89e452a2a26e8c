"""The overhead budget in the window: its setting (a share of the machine's CPU, default 5 %, and what to
do when the profiler stays over it: warn, switch the costliest metric to its sampling mode, or stop it),
remembered between runs; the profiler's total against it, in the overhead tab and as the cost chart's
budget line; and the keeper that acts on it (monitor/budget_keeper.py: a note record in the metric's
stream, shown in its tab, and a line in the log). Fed the overhead sampler's rows on the GUI thread;
what it asks of the controller returns at once."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit

from gui.cost_chart import CostChart
from gui.style import ALARM_STYLE, INVALID_STYLE, QUIET_STYLE
from monitor import budget
from monitor.budget_keeper import BudgetKeeper

KEYS = {"percent": "budget/percent", "action": "budget/action", "hold_s": "budget/hold_s"}
DONE = {"warn": "named in a warning", "sample": "switched to its sampling mode", "stop": "stopped"}


class BudgetPanel:
    def __init__(self, edit: QLineEdit, action_box: QComboBox, over_label: QLabel, state: QLabel, chart: CostChart,
                 controller: Any, settings: QSettings, log: Callable[[str, str], None], cpus: int | None = None) -> None:
        self.edit, self.action_box, self.state, self.chart = edit, action_box, state, chart
        self.settings, self.log = settings, log
        self.cpus = cpus or os.cpu_count() or 1
        percent = self._saved(KEYS["percent"], budget.parse_budget, budget.DEFAULT_BUDGET_PCT)
        action = self._saved(KEYS["action"], budget.parse_action, "warn")
        hold = self._saved(KEYS["hold_s"], budget.parse_hold, budget.DEFAULT_HOLD_S)
        self.watch = budget.BudgetWatch(percent, action, hold)
        self.keeper = BudgetKeeper(controller, self.watch, log, self.cpus)
        edit.setText(f"{percent:g}")
        edit.editingFinished.connect(self.apply_budget)
        for key, words in budget.ACTIONS.items():
            action_box.addItem(words, key)
        action_box.setCurrentIndex(list(budget.ACTIONS).index(action))
        action_box.currentIndexChanged.connect(self._action_chosen)
        over_label.setText(f"% of the machine's CPU; over it for {hold:g} s, the metric that costs most:")
        chart.set_budget(percent * self.cpus)
        self.show()

    def _saved(self, key: str, parse: Callable[[object], Any], default: Any) -> Any:
        """A remembered setting, or its default when it is not set or is refused (said in the log)."""
        raw = self.settings.value(key)
        if raw is None or raw == "":
            return default
        try:
            return parse(raw)
        except budget.BudgetError as exc:
            self.log("", f"settings: {exc}; the default, {default}, is used")
            return default

    def apply_budget(self) -> bool:
        """The budget typed, or refused with the reason beside the field (the budget in force stays)."""
        try:
            percent = budget.parse_budget(self.edit.text())
        except budget.BudgetError as exc:
            self.edit.setStyleSheet(INVALID_STYLE)
            self.edit.setToolTip(str(exc))
            self.state.setText(f"{exc}; the budget stays {self.watch.budget_pct:g} %")
            self.state.setStyleSheet(ALARM_STYLE)
            self.log("", f"budget refused: {exc}")
            return False
        self.edit.setStyleSheet("")
        self.edit.setToolTip("")
        if percent != self.watch.budget_pct:
            self.watch.set_budget(percent)
            self.settings.setValue(KEYS["percent"], percent)
            self.chart.set_budget(percent * self.cpus)
            self.log("", f"overhead budget: {percent:g} % of the machine's CPU")
        self.show()
        return True

    def _action_chosen(self, index: int) -> None:
        self.watch.action = budget.parse_action(self.action_box.itemData(index))
        self.settings.setValue(KEYS["action"], self.watch.action)

    def sample(self, now: float, rows: list[dict]) -> dict | None:
        """One overhead sample (monotonic `now`); the note written when the budget was acted on."""
        note = self.keeper.sample(now, rows)
        self.show(now)
        return note

    def show(self, now: float | None = None) -> None:
        w = self.watch
        if w.total_pct is None:
            text, style = f"budget {w.budget_pct:g} % of the machine's CPU ({self.cpus} CPUs); measured while metrics run", QUIET_STYLE
        elif w.over_since is None or now is None:
            text, style = f"the profiler now {w.total_pct:.2f} % of the machine's CPU: within the {w.budget_pct:g} % budget", QUIET_STYLE
        else:
            text = (f"the profiler now {w.total_pct:.2f} % of the machine's CPU: over the {w.budget_pct:g} % budget for "
                    f"{w.over_s(now):.0f} s; at {w.hold_s:g} s the metric that costs most is {DONE[w.action]}")
            style = ALARM_STYLE
        self.state.setText(text)
        self.state.setStyleSheet(style)
