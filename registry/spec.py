"""What a metric is to the app, the collector and the tests: MetricSpec (its script, arguments, probes,
table fields and charts), and the Field and Chart declarations it is made of."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from registry import units
from registry.args import Arg, BadValue
from registry.records import parse_ndjson

SUMMARY_ENVELOPE = ("metric", "ts", "kind", "interval")   # in every record: not the interval's news
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the checkout: MetricSpec.file is relative to it


@dataclass(frozen=True)
class Field:
    """A field of a metric's records: its name, its label in words (what every heading shows, never the
    name) and its unit, one of registry/units.py's: '', 'count', 'id', 'ns', 'us', 'ms', 's', 'bytes',
    'pct', 'hz', '/s', or a size or time per second ('bytes/s', 's/s')."""

    name: str
    label: str
    unit: str = ""


# fields many metrics' records carry (the envelope, ranks, levels, cgroups): declared once here
COMMON_FIELDS = (
    Field("metric", "Metric"), Field("kind", "Kind"), Field("interval", "Interval", "id"),
    Field("interval_s", "Interval length", "s"), Field("rank", "Rank", "id"), Field("level", "Level"),
    Field("group_by", "Grouped by"), Field("pid", "PID", "id"), Field("tid", "TID", "id"),
    Field("ppid", "PPID", "id"), Field("comm", "Command"), Field("cgroup", "Cgroup"),
    Field("cgroup_id", "Cgroup ID", "id"), Field("processes", "Processes", "count"),
    Field("threads", "Threads", "count"), Field("cgroups", "Cgroups", "count"), Field("count", "Count", "count"),
    Field("total", "Total", "count"), Field("name", "Name"), Field("unit", "Unit"), Field("buckets", "Buckets"),
    Field("lost", "Lost", "count"), Field("schema", "Schema", "id"), Field("kernel", "Kernel"),
    Field("probes", "Probes"), Field("filters", "Filters"), Field("variant", "Variant"), Field("args", "Arguments"),
    Field("top", "Top"), Field("frames", "Stack (root first)"), Field("folded", "Folded stack"),
    Field("kernel_frames", "Kernel stack (innermost first)"), Field("user_frames", "User stack (innermost first)"),
    Field("frame_kind", "Frame kind"), Field("stack_id", "Stack ID", "id"), Field("record", "Record"),
)
_COMMON = {f.name: f for f in COMMON_FIELDS}


def field_of(name: str, declared: dict[str, Field] | None = None) -> Field:
    """A field's declaration: the metric's own (declared), a common one, else one guessed from its name
    (registry/units.py guess: avg_lat_us is "Avg latency" in us), so no heading shows a raw name."""
    found = (declared or {}).get(name) or _COMMON.get(name)
    return found if found is not None else Field(name, *units.guess(name))


def divided(numbers: list[Any], scale: float = 1.0) -> float | None:
    """The first number times scale, divided by each of the others; None when one is not a number or a
    divisor is zero."""
    if not numbers or not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
        return None
    value = numbers[0] * scale
    for divisor in numbers[1:]:
        if not divisor:
            return None
        value /= divisor
    return float(value)


@dataclass(frozen=True)
class Figure:
    """The one number that sums up an interval, read from its summary record: headless progress prints
    it, the dashboard's overview draws its trend. The field times scale, divided by each `per` field of
    the same record (interval_s makes a total over the interval a rate; frequency_hz makes samples
    seconds), in `unit`; noun says what it measures ("syscalls" in "33,374 syscalls/s")."""

    field: str
    unit: str = "count"
    noun: str = ""
    per: tuple[str, ...] = ()
    scale: float = 1.0

    @property
    def fields(self) -> tuple[str, ...]:
        """The summary fields it is computed from."""
        return (self.field, *self.per)

    def value(self, summary: dict) -> float | None:
        """Its value in a summary record; None when the record lacks a field or divides by zero."""
        return divided([summary.get(name) for name in self.fields], self.scale)

    def text(self, value: float) -> str:
        """'33,374 syscalls/s', '8.9 MiB/s of I/O', '96.7% CPU', '23.1 s/s blocked'."""
        if self.unit == units.PER_S:
            return f"{units.number(value).removesuffix('.0')} {self.noun}/s" if self.noun else units.quantity(value, self.unit)
        return f"{units.quantity(value, self.unit)} {self.noun}".rstrip()


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
    scale (heatmap of events): y times scale is binned (latency_ms x 1000: log2 buckets of us); (a
    timeseries summed per interval) each point is multiplied by it.
    where: only records whose fields have these values ((("level", "stack"),): offcpu's stack rows).
    summed (timeseries): the records of one interval summed per series, a point per interval and series
    (a process's stacks make its CPU time), each divided by the fields per_interval names of that
    interval's summary record (frequency_hz and interval_s make samples a share of one CPU)."""

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
    where: tuple[tuple[str, Any], ...] = ()
    summed: bool = False
    per_interval: tuple[str, ...] = ()


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
    # the one number that sums up an interval (headless progress, the dashboard's overview)
    key_figure: Figure | None = None
    # the window's further charts of this metric, each in its own tab beside `chart` (the collector's)
    more_charts: tuple[Chart, ...] = ()
    # the summary record's fields, in the order its headline reads them (the rest follow, guessed)
    summary: tuple[Field, ...] = ()
    # the dashboard's chart over time of a metric whose own chart is a flame graph (which has no time
    # axis): CPU or blocked time per process, a range picked on it showing that range's flame graph
    timeline: Chart | None = None
    # its sampling mode, what the overhead budget may switch it to (monitor/budget_keeper.py): argument
    # values that make it cheaper, each (name, op, value): "=" sets it, "<=" lowers it to at most the
    # value, ">=" raises it to at least the value; () when it has no cheaper mode
    sampling: tuple[tuple[str, str, Any], ...] = ()

    @property
    def charts(self) -> tuple[Chart, ...]:
        return (self.chart, *self.more_charts)

    def key_figure_text(self, summary: dict) -> str:
        """'33,374 syscalls/s' from an interval's summary record; '' when it lacks a field."""
        value = self.key_figure.value(summary) if self.key_figure is not None else None
        return "" if value is None else self.key_figure.text(value)

    def field(self, name: str, kind: str = "") -> Field:
        """The declaration of any field of this metric's records: a table field (a summary field first
        for a summary record's), a common one, else guessed from the name (see field_of)."""
        return field_of(name, self._summary_first if kind == "summary" else self._fields_first)

    @functools.cached_property
    def _fields_first(self) -> dict[str, Field]:
        return {f.name: f for f in (*self.summary, *self.fields)}

    @functools.cached_property
    def _summary_first(self) -> dict[str, Field]:
        return {f.name: f for f in (*self.fields, *self.summary)}

    def summary_text(self, summary: dict, limit: int = 7) -> str:
        """An interval's headline: its key figure, then the summary's fields as label and scaled value
        ('33,374 syscalls/s  ·  Syscalls 33,414  ·  Processes 72  ·  ...'), the declared ones first;
        nested values (lists, dicts) left out."""
        order = [f.name for f in self.summary if f.name in summary]
        order += [k for k in summary if k not in order and k not in SUMMARY_ENVELOPE]
        figure = self.key_figure_text(summary)
        parts = [figure] if figure else []
        plain = self.key_figure is not None and not self.key_figure.per and self.key_figure.scale == 1
        for name in order:
            value = summary[name]
            if isinstance(value, (dict, list)) or (figure and plain and name == self.key_figure.field):
                continue
            f = self.field(name, "summary")
            text = units.cell(value, f.unit, name) if units.is_identifier(name, f.unit) else units.quantity(value, f.unit)
            parts.append(f"{f.label} {text}")
            if len(parts) >= limit:
                break
        return "  ·  ".join(parts)

    @property
    def path(self) -> str:
        return os.path.join(ROOT, self.file)

    def sampling_changes(self, values: dict[str, Any]) -> dict[str, Any]:
        """The arguments its sampling mode changes in `values` (a form's raw values), with their new
        values; {} when it has no sampling mode or runs in it already (a "<=" or ">=" never makes a
        value the user chose dearer: a frequency set below the mode's stays)."""
        declared = {arg.name: arg for arg in self.args}
        changes = {}
        for name, op, target in self.sampling:
            arg = declared[name]
            try:
                current = arg.value_of(values.get(name, arg.default))
            except BadValue:
                current = None
            current = arg.default if current is None else current
            cheaper = {"=": target, "<=": target if current is None else min(current, target),
                       ">=": target if current is None else max(current, target)}[op]
            if cheaper != current:
                changes[name] = cheaper
        return changes

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
