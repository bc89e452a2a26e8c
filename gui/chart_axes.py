"""How the charts read: time axes as wall-clock ticks, value axes in the unit that suits their range
(a latency axis in µs, ms or s, named in its title; sizes in KiB, MiB; numbers as 1.2k or 3.4M), and a
value with its unit as a person reads it (12.5 KiB/s, 741/s, 101 µs): registry/units.py, as the
tables and the dashboard use it; and pyqtgraph's colours, set once here, where every plot of the
window comes through: the metric charts (gui/charts.py) and the overhead panel's cost chart
(gui/cost_chart.py)."""

from __future__ import annotations

import time

import pyqtgraph as pg

from gui.style import TEXT
from registry import units

pg.setConfigOptions(background="w", foreground=TEXT, antialias=False)


class ClockAxis(pg.AxisItem):
    """Wall-clock ticks as HH:MM:SS, one label per ~100 px, on whole seconds (or minutes, hours)."""

    STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)

    def __init__(self) -> None:
        super().__init__("bottom")

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N802, N803
        wanted = (maxVal - minVal) / max(2.0, size / 100.0)
        return [(next((s for s in self.STEPS if s >= wanted), self.STEPS[-1]), 0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [time.strftime("%H:%M:%S", time.localtime(v)) for v in values]


class CompactAxis(pg.AxisItem):
    """Numbers as 950, 1.2k, 3.4M rather than 1.2e+06; with a unit (show_unit), the ticks in the unit
    that suits the range shown and the title naming it: "latency (ms)" over 0-800 reads "0 200 400",
    and zoomed to 0-0.5 ms becomes "latency (µs)" over "0 100 200"."""

    def __init__(self, orientation: str = "left") -> None:
        self.unit, self.title, self.factor = "", "", 1.0     # before the base class sets a range
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)     # no "(x0.001)" in the label: the ticks carry the scale

    def show_unit(self, unit: str, title: str) -> None:
        """Values in `unit` under `title`; the title gets the unit the ticks are in."""
        self.unit, self.title = unit, title
        self._scale_to(*self.range)

    def setRange(self, mn: float, mx: float) -> None:  # noqa: N802
        self._scale_to(mn, mx)
        super().setRange(mn, mx)

    def _scale_to(self, mn: float, mx: float) -> None:
        self.factor, shown = units.axis(self.unit, max(abs(mn), abs(mx)))
        if self.title:
            label = axis_title(self.title, shown) if shown else self.title
            if label != self.labelText:
                self.setLabel(label)

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [units.compact(v * scale * self.factor) for v in values]


def axis_title(title: str, shown: str) -> str:
    """"latency (ms)"; a title that ends with its unit already ("syscalls/s") is left as it is."""
    return title if title.endswith(shown) or f"({shown})" in title else f"{title} ({shown})"


def clock(ts: float, millis: bool = False) -> str:
    text = time.strftime("%H:%M:%S", time.localtime(ts))
    return f"{text}.{int(ts * 1000) % 1000:03d}" if millis else text


def value_text(value: float, unit: str) -> str:
    """A value as a person reads it, with its unit scaled to its size: 12.5 KiB/s, 741/s, 101 µs, 3,120."""
    return units.quantity(float(value), unit)


def unit_label(unit: str) -> str:
    return units.symbol(unit)
