#!/usr/bin/env python3
"""Rewrite the generated parts of BENCHMARKS.md from bench/results.json.

Each benchmark's table lives between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`; the machine
line and the targets table have their own markers (`machine`, `targets`). Everything outside the
markers is prose and is left alone. Run by bench/run.py; by hand: `.venv/bin/python bench/report.py`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from types import ModuleType

import harness
import stats
from suite import BENCHES

RESULTS = os.path.join(harness.BENCH, "results.json")
DOC = os.path.join(harness.ROOT, "BENCHMARKS.md")


def load() -> dict:
    try:
        with open(RESULTS) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"benchmarks": {}}


def save_section(name: str, section: dict) -> None:
    """Store one benchmark's result; the others' stay as they were."""
    results = load()
    results["machine"] = harness.machine()
    results.setdefault("benchmarks", {})[name] = section
    with open(RESULTS, "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
        f.write("\n")


def machine_line(m: dict) -> str:
    return (f"Measured on {m.get('nproc')} CPUs ({m.get('cpu')}), {m.get('mem_gb')} GB, kernel {m.get('kernel')}, "
            f"{m.get('os')}, Python {m.get('python')}; results.json written {m.get('date')}.")


def targets_table(results: dict) -> str:
    rows = []
    for name, _ in BENCHES:
        section = results["benchmarks"].get(name)
        if not section:
            continue
        for t in section.get("targets", []):
            verdict = {True: "met", False: "**not met**", None: "not measured"}[t["met"]]
            rows.append([t["name"], t["target"], t["measured"] or "n/a", verdict, t["margin"]])
    return stats.md_table(["target", "goal", "measured (median)", "verdict", "margin"], rows) if rows else "(none yet)"


def section_blocks(name: str, module: ModuleType, section: dict | None) -> dict[str, str]:
    """marker -> markdown for one benchmark (a module with MARKERS and tables() fills several)."""
    markers = getattr(module, "MARKERS", [name])
    if not section:
        return dict.fromkeys(markers, "(not run yet)")
    head = f"*{section.get('date', '')}{', quick mode' if section.get('quick') else ''}"
    head += f", {section['reps']} alternating repetitions*" if section.get("reps") else "*"
    if section.get("error"):
        return dict.fromkeys(markers, f"{head}\n\nFailed: `{section['error']}`")
    if section.get("skipped"):
        return dict.fromkeys(markers, f"{head}\n\nNot run: {section['skipped']}")
    bodies = module.tables(section) if hasattr(module, "tables") else {name: module.table(section)}
    return {marker: f"{head}\n\n{body}" for marker, body in bodies.items()}


def replace_block(text: str, marker: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- bench:{marker} -->\n).*?(\n<!-- /bench:{marker} -->)", re.S)
    if not pattern.search(text):
        return text.rstrip("\n") + f"\n\n<!-- bench:{marker} -->\n{body}\n<!-- /bench:{marker} -->\n"
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def render(results: dict | None = None) -> None:
    results = results or load()
    with open(DOC) as f:
        text = f.read()
    if results.get("machine"):
        text = replace_block(text, "machine", machine_line(results["machine"]))
    text = replace_block(text, "targets", targets_table(results))
    for name, module in BENCHES:
        for marker, body in section_blocks(name, module, results["benchmarks"].get(name)).items():
            text = replace_block(text, marker, body)
    with open(DOC, "w") as f:
        f.write(text)


if __name__ == "__main__":
    render()
    sys.exit(0)
