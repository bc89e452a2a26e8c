"""How the charts read: time axes as wall-clock ticks, numbers as 1.2k or 3.4M, and a value with its unit
as a person reads it (12.5 KiB/s, 741/s, 0.101 ms); and pyqtgraph's colours, set once here, where every
plot of the window comes through: the metric charts (gui/charts.py) and the overhead panel's cost chart
(gui/cost_chart.py)."""

from __future__ import annotations

import time

import pyqtgraph as pg

from gui.models import UNIT_SUFFIX, format_value
from gui.style import TEXT

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
    """Numbers as 950, 1.2k, 3.4M rather than 1.2e+06."""

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)     # no "(x0.001)" in the label: the ticks carry the scale

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [compact_number(v * scale) for v in values]


def compact_number(value: float) -> str:
    for suffix, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.4g}{suffix}"
    return f"{value:.4g}"


def clock(ts: float, millis: bool = False) -> str:
    text = time.strftime("%H:%M:%S", time.localtime(ts))
    return f"{text}.{int(ts * 1000) % 1000:03d}" if millis else text


def value_text(value: float, unit: str) -> str:
    """A value as a person reads it, with its unit: 12.5 KiB/s, 741/s, 0.101 ms, 3,120."""
    if unit in ("bytes", "bytes/s"):
        return format_value(float(value), "bytes") + unit[5:]
    number = format_value(float(value)).removesuffix(".0")
    suffix = UNIT_SUFFIX.get(unit, unit)
    if suffix in ("", "count"):
        return number
    return f"{number}{suffix}" if suffix.startswith(("/", "%")) else f"{number} {suffix}"


def unit_label(unit: str) -> str:
    return "" if unit in ("", "count") else UNIT_SUFFIX.get(unit, unit)
