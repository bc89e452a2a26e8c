"""A metric's table grouped by cgroup (the tab's "Group by cgroup" toggle): one row per cgroup with the
processes in it and the sum of each additive column, from the rows the table holds.

Additive: counts, bytes, times, rates and CPU shares (a cgroup's CPU% is its threads' sum). A `max_`
column takes the largest; averages, minimums and percentiles are not derivable from the rows' own
values and stay blank, as do the identifiers and names (pid, comm, syscall). Only one level of a
nested table is summed (sysnest's group rows, offcpu's and compmem's process rows, never their
detail or stack rows), so nothing is counted twice; an event table counts its events.
"""

from __future__ import annotations

from collections.abc import Sequence

SUMMED_UNITS = ("count", "bytes", "us", "ms", "ns", "pct", "/s")
NOT_SUMMED = ("avg", "mean", "min", "p50", "p90", "p95", "p99", "median")
NESTED = ("detail", "stack")    # levels below a group: their values are in the group's row already
KEY = ("cgroup", "Cgroup", "")
COUNTS = (("processes", "Processes", ""), ("rows", "Rows", ""))


def how(name: str, unit: str) -> str | None:
    """'sum', 'max' or None (not derivable by cgroup) for a column."""
    if name == "cgroup" or unit not in SUMMED_UNITS:   # identifiers and names have no unit
        return None
    words = name.split("_")
    if words[0] == "max" or words[-1] == "max":
        return "max"
    if any(w in NOT_SUMMED for w in words):
        return None
    return "sum"


def columns(fields: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The grouped table's columns: the cgroup, its processes and rows, then every derivable column."""
    return [KEY, *COUNTS, *(f for f in fields if how(f[0], f[2]))]


def aggregate(rows: Sequence[dict], fields: Sequence[tuple[str, str, str]]) -> list[dict]:
    """One row per cgroup path, largest first by the first summed column; rows with no cgroup are
    left out."""
    carrying = [r for r in rows if r.get("cgroup") is not None and r.get("level") != "stack"]
    top = [r for r in carrying if r.get("level") not in NESTED]
    chosen = top or carrying
    ops = [(f[0], how(f[0], f[2])) for f in fields if how(f[0], f[2])]
    groups: dict[str, dict] = {}
    pids: dict[str, set] = {}
    for r in chosen:
        path = r["cgroup"] or "(gone)"
        g = groups.get(path)
        if g is None:
            g = groups[path] = {"cgroup": path, "rows": 0}
            pids[path] = set()
        g["rows"] += 1
        if r.get("pid") is not None:
            pids[path].add(r["pid"])
        for name, op in ops:
            value = r.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if op == "sum":
                g[name] = g.get(name, 0) + value
            else:
                g[name] = max(g.get(name, value), value)
    for path, g in groups.items():
        g["processes"] = len(pids[path]) if pids[path] else None
    first = next((name for name, op in ops if op == "sum"), "rows")
    return sorted(groups.values(), key=lambda g: (-(g.get(first) or 0), g["cgroup"]))
