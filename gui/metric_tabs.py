"""The right side's tabs, one per metric started (or opened from a session), in the order the metrics
were started. A start builds its first tab at once and the others one per turn of the event loop: a
tab's charts take ~30 ms of the GUI thread, and ten tabs built in a row while ten compilers held both
CPUs left the window neither painting nor answering for 2.5 s. Until its tab is built a metric's state
waits here; a waiting tab is built at once when asked for by name or when its first record arrives.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QTabWidget

import config
from gui.metric_tab import MetricTab
from gui.time_link import TimeLink


class _Tabs(dict):
    """metric -> MetricTab; a tab still waiting to be built is built at once when asked for by name."""

    def __init__(self, build: Callable[[str], MetricTab]) -> None:
        super().__init__()
        self._build = build

    def __missing__(self, name: str) -> MetricTab:
        return self._build(name)


class MetricTabs:
    def __init__(self, widget: QTabWidget, specs: dict[str, config.MetricSpec], time_link: TimeLink,
                 on_new_tab: Callable[[MetricTab], None]) -> None:
        self.widget, self.specs, self.time_link = widget, specs, time_link
        self.on_new_tab = on_new_tab             # the window connects a new tab's requests
        self.tabs = _Tabs(self._waiting_tab)
        self.drilled: int | None = None          # the process every tab shows (drill-down), if any
        self._counter = itertools.count()
        self._order: dict[str, int] = {}         # a tab's place among the tabs: when its metric was started
        self._waiting: dict[str, tuple[str, str]] = {}   # the state to show once built, in start order

    def expect(self, name: str) -> None:
        """`name` is being started: its place among the tabs (kept by a tab it has already), and its
        tab to be built showing "starting"."""
        if name not in self.tabs:
            self._order[name] = next(self._counter)
        self.hold(name, "starting")

    def hold(self, name: str, state: str, message: str = "") -> None:
        """The state `name`'s tab shows once built (a tab it has already: at its next build)."""
        self._waiting[name] = (state, message)

    def set_state(self, name: str, state: str, message: str = "") -> None:
        if name in self.tabs:
            self.tabs[name].set_state(state, message)
        elif name in self._waiting:
            self._waiting[name] = (state, message)

    def for_records(self, name: str) -> MetricTab | None:
        """The tab a metric's records go to: built now if it was waiting (its first record before its
        turn), None when it has none (closed)."""
        tab = self.tabs.get(name)
        if tab is None and name in self._waiting:
            tab = self.build(name)
        return tab

    def build(self, name: str) -> MetricTab:
        """A started (or refused) metric's tab, in the state it reached before it was built."""
        state = self._waiting.pop(name, None)
        tab = self.tab_for(name)
        if state is not None:
            tab.set_state(*state)
        return tab

    def build_later(self) -> None:
        """One waiting tab a turn of the event loop, on a timer (not a posted event, which would run
        before the window's own paint timer every turn)."""
        if self._waiting:
            QTimer.singleShot(1, self.widget, self._build_one)

    def _build_one(self) -> None:
        if self._waiting:
            self.build(next(iter(self._waiting)))
        self.build_later()

    def build_waiting(self) -> None:
        """Every waiting tab, now (tests)."""
        while self._waiting:
            self.build(next(iter(self._waiting)))

    def _waiting_tab(self, name: str) -> MetricTab:
        if name not in self._waiting:
            raise KeyError(name)
        return self.build(name)

    def tab_for(self, name: str) -> MetricTab:
        """The metric's tab, made now if it has none."""
        tab = self.tabs.get(name)
        if tab is None:
            tab = MetricTab(self.specs[name], parent=self.widget, time_link=self.time_link)
            self.on_new_tab(tab)
            tab.show_process(self.drilled)
            # in the order the metrics were started, also when a record builds a later one's tab first
            order = self._order.setdefault(name, next(self._counter))
            at = sum(self._order.get(other, -1) < order for other in self.tabs)
            self.tabs[name] = tab
            self.widget.insertTab(at, tab, name)
        return tab

    def tab_at(self, index: int) -> MetricTab | None:
        tab = self.widget.widget(index)
        return tab if isinstance(tab, MetricTab) else None

    def remove(self, tab: MetricTab) -> None:
        self.widget.removeTab(self.widget.indexOf(tab))
        self.tabs.pop(tab.name, None)
        self.time_link.leave(tab.time_charts())
        tab.reset()                         # its refresh steps still queued do nothing
        tab.deleteLater()

    def show_process(self, pid: int | None) -> None:
        """Drill-down: every metric's table shows this process only (None: everything again)."""
        self.drilled = pid
        for tab in self.tabs.values():
            tab.show_process(pid)
