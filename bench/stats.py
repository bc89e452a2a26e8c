"""Figures from repetitions: alternating runs, their median/min/max, per-repetition differences and
ratios, a target's verdict, and the markdown they are shown in.

The machine is shared and noisy, so a benchmark never compares a number with one taken minutes
apart: each repetition runs every configuration once, in a rotated order, and figures are medians of
per-repetition differences or ratios, with min and max shown.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable


class BenchError(Exception):
    """A run that failed in a way the benchmark reports rather than crashes on."""


def summary(values: Iterable[float], digits: int = 1) -> dict:
    """median, min, max and n of a list (None when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(vals), digits), "min": round(min(vals), digits),
            "max": round(max(vals), digits), "n": len(vals)}


def alternate(configs: list[str], run_one: Callable[[str, int], float | dict | None], reps: int,
              log: Callable[[str], None] | None = None) -> dict[str, list]:
    """Run every configuration once per repetition, rotating the order so none is always first.

    Returns {config: [value per repetition]} (None where a run failed)."""
    out: dict[str, list] = {c: [] for c in configs}
    for rep in range(reps):
        shift = rep % len(configs)
        for name in configs[shift:] + configs[:shift]:
            value = _attempt(run_one, name, rep, log)
            out[name].append(value)
            if log and value is not None and not isinstance(value, dict):
                log(f"  rep {rep + 1}/{reps} {name}: {value:g}")
    return out


def _attempt(run_one: Callable[[str, int], float | dict | None], name: str, rep: int,
             log: Callable[[str], None] | None) -> float | dict | None:
    """One run of a configuration; None, said in the log, when it failed with a BenchError."""
    try:
        return run_one(name, rep)
    except BenchError as exc:
        if log:
            log(f"  {name} rep {rep + 1}: {exc}")
        return None


def bracketed(configs: list[str], base: str, run_one: Callable[[str, int], float | dict | None], reps: int,
              every: int = 3, log: Callable[[str], None] | None = None) -> tuple[dict[str, list], dict[str, list]]:
    """alternate() for long repetitions: `base` runs first, after every `every` configurations and last,
    so each configuration is compared with the base runs just before and after it (minutes apart at
    most) rather than with one run per repetition, which slow drift — the shared machine's load, a
    database that grows — would put in its ratio. The order of the others rotates per repetition.

    Returns ({config: [value per repetition]} with every base run under `base`,
             {config: [[the base values either side of it] per repetition]}); a failed run is None."""
    values: dict[str, list] = {name: [] for name in [base, *configs]}
    around: dict[str, list] = {name: [] for name in configs}

    def one(name: str, rep: int) -> float | dict | None:
        value = _attempt(run_one, name, rep, log)
        values[name].append(value)
        return value

    for rep in range(reps):
        shift = rep % len(configs) if configs else 0
        order = configs[shift:] + configs[:shift]
        before = one(base, rep)
        for start in range(0, len(order), max(1, every)):
            group = [(name, one(name, rep)) for name in order[start:start + max(1, every)]]
            after = one(base, rep)
            for name, _ in group:
                around[name].append([b for b in (before, after) if b is not None])
            before = after
        if log:
            log(f"  rep {rep + 1}/{reps} done")
    return values, around


def paired(values: dict[str, list], base: str, how: str = "diff") -> dict[str, list]:
    """Per-repetition difference (or ratio) of every configuration to `base`, same repetition."""
    out = {}
    for name, vals in values.items():
        pairs = zip(vals, values[base], strict=True)
        if how == "diff":
            out[name] = [v - b for v, b in pairs if v is not None and b is not None]
        else:
            out[name] = [v / b for v, b in pairs if v is not None and b]
    return out


def percentile(values: list[float], p: float) -> float:
    """The value below which p per cent of `values` fall (nearest rank); 0.0 when empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


def target(name: str, goal: str, measured: float | None, limit: float, higher_is_better: bool,
           unit: str = "") -> dict:
    """One target's verdict: met or not, and the margin as a factor of the limit."""
    if measured is None:
        return {"name": name, "target": goal, "measured": None, "met": None, "margin": "not measured"}
    met = measured >= limit if higher_is_better else measured <= limit
    if higher_is_better:
        margin = f"{measured / limit:.2f}x the target" if limit else ""
    else:
        margin = f"{measured / limit:.2f}x the limit" if limit else ""
    return {"name": name, "target": goal, "measured": f"{measured:g}{unit}", "met": met, "margin": margin}


def fmt(s: dict | None, unit: str = "", digits: int | None = None) -> str:
    """A summary as `median (min–max)`, or `n/a`."""
    if not s or s.get("median") is None:
        return "n/a"

    def num(v: float) -> str:
        if digits is not None:
            return f"{v:,.{digits}f}"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2g}" if abs(v) < 1 else f"{v:,.1f}"

    if s.get("n", 1) > 1 and num(s["min"]) != num(s["max"]):
        return f"{num(s['median'])}{unit} ({num(s['min'])}–{num(s['max'])})"
    return f"{num(s['median'])}{unit}"


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
