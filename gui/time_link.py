"""One time range for every chart over wall-clock time in the window (issue 19): zooming or panning one
time chart shows the same range on every other, in every metric tab, and Reset zoom on one makes them
all follow live data again. Charts with other x axes (histograms, flame graphs) never join.

A range the link sets is set in code, which pyqtgraph does not report as a manual change, so it is not
spread again; the `spreading` flag keeps that true even if a chart's own handler reacts to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import shiboken6


class TimeLink:
    def __init__(self) -> None:
        self.charts: list[Any] = []                     # MetricCharts with a clock x axis
        self.enabled = True
        self.range: tuple[float, float] | None = None    # the shared zoomed range; None: all follow live data
        self.spreading = False

    def join(self, chart: Any) -> None:
        """A new time chart takes the range the others show, then moves with them."""
        if chart in self.charts:
            return
        self.charts.append(chart)
        chart.time_link = self
        if self.enabled and self.range is not None:
            chart.show_time_range(*self.range)

    def leave(self, charts: list[Any]) -> None:
        self.charts = [c for c in self.charts if c not in charts]

    def set_enabled(self, on: bool) -> None:
        """Off: each chart zooms alone. On again: they meet at the next zoom or reset."""
        self.enabled = on
        if not on:
            self.range = None

    def zoomed(self, source: Any, x0: float, x1: float) -> None:
        """The person zoomed or panned `source` to x0..x1: every other time chart shows x0..x1 too."""
        if not self.enabled or self.spreading:
            return
        self.range = (x0, x1)
        self._each_other(source, lambda chart: chart.show_time_range(x0, x1))

    def reset(self, source: Any) -> None:
        """Reset zoom on `source`: every time chart follows its live data again."""
        if not self.enabled or self.spreading:
            return
        self.range = None
        self._each_other(source, lambda chart: chart.follow_live())

    def _each_other(self, source: Any, apply: Callable[[Any], object]) -> None:
        self.charts = [c for c in self.charts if shiboken6.isValid(c)]     # a closed tab's charts are gone
        self.spreading = True
        try:
            for chart in self.charts:
                if chart is not source:
                    apply(chart)
        finally:
            self.spreading = False
