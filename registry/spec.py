"""What a metric is to the app, the collector and the tests: MetricSpec (its script, arguments, probes,
table fields and charts), and the Field and Chart declarations it is made of."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from registry.args import Arg, BadValue
from registry.records import parse_ndjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the checkout: MetricSpec.file is relative to it


@dataclass(frozen=True)
class Field:
    """A field of the records the GUI tables show; unit is one of '', 'count', 'us', 'ms', 'ns',
    'bytes', 'pct', '/s'."""

    name: str
    label: str
    unit: str = ""


@dataclass(frozen=True)
class Chart:
    """What to draw for a metric.

    kind: "timeseries" (y over time, one point per record of `kind`), "histogram" (log2 buckets from
    `hist` records named `series`), "scatter" (y per event), "stacks" (a flame graph of the stack records,
    each weighted by its field y: see profile_data.stack_of), "heatmap" (log2 buckets over time: one
    column per interval, from `hist` records named `series`, or from each event's y times `scale`).
    series: field whose value splits lines (e.g. per-device), or the hist name for histograms.
    snapshot (stacks): each interval's stacks restate the whole state (outstanding bytes), so a range
    shows the newest interval instead of a sum.
    blocked (stacks): each stack ends where its thread left the CPU, in the scheduler's frames: the views
    end it at the frame that blocked (profile_data.views.simplify), so top functions are blocking sites.
    lines (timeseries): several fields of one record, each its own line: ((field, legend name), ...).
    per: a record field each value is divided by (interval_s: an interval's total becomes a rate).
    scale (heatmap of events): y times scale is binned (latency_ms x 1000: log2 buckets of us)."""

    kind: str
    y: str
    record_kind: str = "summary"
    label: str = ""
    unit: str = ""
    series: str | None = None
    snapshot: bool = False
    blocked: bool = False
    lines: tuple[tuple[str, str], ...] = ()
    per: str = ""
    scale: float = 1.0


@dataclass(frozen=True)
class MetricSpec:
    name: str
    file: str
    description: str
    args: tuple[Arg, ...]
    probes: tuple[str, ...]                      # tracepoints required, "category:event"
    fields: tuple[Field, ...]                    # table columns, from records of table_kind
    chart: Chart
    table_kind: str = "row"                      # "row" (per interval) or "event" (per event)
    output_parser: Callable[[str], dict | None] = parse_ndjson
    doc: str = ""
    # the one number headless progress shows per interval: (summary field, unit text, scale)
    key_figure: tuple[str, str, float] | None = None
    # the window's further charts of this metric, each in its own tab beside `chart` (the collector's)
    more_charts: tuple[Chart, ...] = ()

    @property
    def charts(self) -> tuple[Chart, ...]:
        return (self.chart, *self.more_charts)

    def key_figure_text(self, summary: dict) -> str:
        """'33,374 syscalls/s' from an interval's summary record; '' when it lacks the field."""
        if self.key_figure is None or not isinstance(summary.get(self.key_figure[0]), (int, float)):
            return ""
        field, unit, scale = self.key_figure
        return f"{summary[field] * scale:,.0f} {unit}"

    @property
    def path(self) -> str:
        return os.path.join(ROOT, self.file)

    def validate(self, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """(converted values, {arg name: reason}) for a form's raw values."""
        converted, errors = {}, {}
        for arg in self.args:
            try:
                converted[arg.name] = arg.value_of(values.get(arg.name, arg.default))
            except BadValue as exc:
                errors[arg.name] = str(exc)
        return converted, errors

    def command(self, values: dict[str, Any], python: str | None = None, json_output: bool = True) -> list[str]:
        """argv that runs this metric with validated values (raises ValueError on a bad value)."""
        converted, errors = self.validate(values)
        if errors:
            raise ValueError("; ".join(errors.values()))
        argv = [python or sys.executable, self.path]
        positionals = []
        for arg in self.args:
            value = converted.get(arg.name)
            if value is None or value is False:
                if arg.flag is None:
                    positionals.append(None)
                continue
            if arg.flag is None:
                positionals.append(str(value))
            elif arg.type == "flag":
                argv.append(arg.flag)
            else:
                argv += [arg.flag, str(value)]
        # positionals are [interval] [count]: a later one needs the earlier ones present
        while positionals and positionals[-1] is None:
            positionals.pop()
        if None in positionals:
            raise ValueError("a positional argument is missing before a later one")
        argv += positionals
        if json_output:
            argv.append("--json")
        return argv
