"""What each metric cost in the recorded benchmarks, for the window's metric list before a metric starts
(while it runs, the list shows what it costs now). Read from bench/results.json, which `make bench`
writes and BENCHMARKS.md's tables are made from, so the figures are the recorded ones and never copied
by hand:

- cpuprofile: "CPU taken" at its default 49 Hz (section 9, its process's CPU plus its BPF run time
  while bench/mixed.c runs), in ms of CPU per second: a share of one CPU, as the live figure is;
- every other metric: how much longer bench/mixed.c took under it alone at its defaults (section 2,
  "slowdown"); the bench measures no CPU figure of theirs.

A missing or unreadable file gives no figures. No Qt.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from registry.spec import ROOT

RESULTS = os.path.join(ROOT, "bench", "results.json")
CPUPROFILE_ROW = "cpuprofile -F 49"          # cpuprofile's default frequency


@dataclass(frozen=True)
class RecordedCost:
    text: str       # what the list's cell shows, e.g. "bench +18.7 %"
    tip: str        # what it is and where it comes from


def recorded_costs(path: str = RESULTS) -> dict[str, RecordedCost]:
    """{metric: its recorded figure} of those the results hold."""
    try:
        with open(path, encoding="utf-8") as f:
            benchmarks = json.load(f)["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    found: dict[str, RecordedCost] = {}
    overhead = benchmarks.get("metric_overhead") or {}
    for row in overhead.get("rows", []):
        slowdown = (row.get("slowdown_pct") or {}).get("median")
        if row.get("kind") == "metric" and isinstance(slowdown, (int, float)):
            found[row["config"]] = RecordedCost(
                f"bench {slowdown:+.1f} %",
                f"bench/mixed.c's time under {row['config']} alone at its defaults: {slowdown:+.1f} % against bare "
                f"({_range(row)}; BENCHMARKS.md section 2, {_when(overhead)}); measured CPU shows here while it runs")
    profile = benchmarks.get("cpuprofile_overhead") or {}
    for row in profile.get("rows", []):
        taken = row.get("cpu_cost_ms_per_s")
        if row.get("config") == CPUPROFILE_ROW and isinstance(taken, (int, float)):
            found["cpuprofile"] = RecordedCost(
                f"bench {taken / 10:.2f} % CPU",
                f"{taken:g} ms/s of CPU (its process and its BPF programs, {taken / 10:.2f} % of one CPU) while "
                f"bench/mixed.c ran, at its default 49 Hz (BENCHMARKS.md section 9, {_when(profile)}); measured "
                "CPU shows here while it runs")
    return found


def _range(row: dict) -> str:
    """'median of 5 repetitions, 16.1 to 24.8': a range across 0 is within the machine's noise."""
    figure = row.get("slowdown_pct") or {}
    low, high, n = figure.get("min"), figure.get("max"), figure.get("n")
    spread = f", {low:+.1f} to {high:+.1f}" if isinstance(low, (int, float)) and isinstance(high, (int, float)) else ""
    return f"median of {n or 'its'} repetitions{spread}"


def _when(result: dict) -> str:
    date = result.get("date") or "undated"
    return f"{date}, a quick run: not a recorded figure" if result.get("quick") else date
