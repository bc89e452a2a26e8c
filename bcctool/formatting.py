"""Human output shared by the metric scripts: aligned tables, BCC's log2 histograms, byte sizes, stacks."""

from __future__ import annotations

from typing import Any


def print_stack(kernel_frames: list[str], user_frames: list[str], indent: str) -> None:
    """A stack as BCC's tools print one: kernel frames innermost first, "--", then the user frames."""
    for frame in kernel_frames:
        print(f"{indent}{frame}")
    if user_frames:
        print(f"{indent}--")
        for frame in user_frames:
            print(f"{indent}{frame}")


def table(columns: list[tuple[str, int]], rows: list[list[Any]]) -> str:
    """Columns (header, width; negative width = left-aligned) and rows as one block of text."""
    return "\n".join([table_line(columns, [h for h, _ in columns]), *(table_line(columns, r) for r in rows)])


def table_line(columns: list[tuple[str, int]], values: list[Any]) -> str:
    """One line of a table() (for tools that print rows as events arrive)."""
    cells = []
    for (_, width), value in zip(columns, values, strict=False):
        text = str(value)
        cells.append(text.ljust(-width) if width < 0 else text.rjust(width))
    return " ".join(cells).rstrip()


def log2_buckets(values: dict[int, int]) -> list[dict[str, int]]:
    """Log2 slots {slot: count} as [{lo, hi, count}], lowest first. Slot s >= 1 holds values
    2^(s-1) .. 2^s - 1 and slot 1 also holds 0, as BCC's bpf_log2l() assigns them."""
    if not values:
        return []
    out = []
    for slot in range(1, max(values) + 1):
        lo, hi = (1 << slot) >> 1, (1 << slot) - 1
        if lo == hi:
            lo = 0
        out.append({"lo": lo, "hi": hi, "count": int(values.get(slot, 0))})
    return out


def print_log2(title: str, unit: str, buckets: list[dict[str, int]]) -> None:
    """A log2 histogram the way BCC's print_log2_hist shows it."""
    print(f"\n{title}")
    print(f"{unit:>23} : count     distribution")   # the colon under the rows' colons
    if not buckets:
        print("    (no events)")
        return
    peak = max(b["count"] for b in buckets) or 1
    for b in buckets:
        bar = "*" * int(40 * b["count"] / peak)
        print(f"{b['lo']:>10} -> {b['hi']:<10}: {b['count']:<9} |{bar:<40}|")


def human_bytes(n: float) -> str:
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)
