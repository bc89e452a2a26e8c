"""The registry's entry point: every metric script the app, the collector and the privilege helper know,
with its arguments, fields and charts. The declarations live in registry/ (one module per metric in
registry/entries/, their order in registry/catalog.py); registry/__init__.py says how to declare a
metric and its arguments. Callers use the names below: config.METRICS, config.get(name), config.Arg...
"""

from __future__ import annotations

from registry import (
    CGROUP,
    METRICS,
    PID,
    PPID,
    ROOT,
    TID,
    Arg,
    BadValue,
    Chart,
    Field,
    MetricSpec,
    Shortcut,
    get,
    interval_args,
    parse_ndjson,
)

__all__ = ["METRICS", "get", "Arg", "BadValue", "Shortcut", "interval_args", "PID", "TID", "PPID", "CGROUP",
           "MetricSpec", "Field", "Chart", "ROOT", "parse_ndjson"]
