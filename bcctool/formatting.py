"""Human output shared by the metric scripts: tables of records under the registry's declarations of
their fields (registry/units.py formats every value, as in the window and on the dashboard), BCC's log2
histograms, stacks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from registry import units
from registry.spec import Field

quantity = units.quantity   # one value with its unit, scaled to its size: 12.7 s, 59.1 MiB, 741/s


def print_stack(kernel_frames: list[str], user_frames: list[str], indent: str) -> None:
    """A stack as BCC's tools print one: kernel frames innermost first, "--", then the user frames."""
    for frame in kernel_frames:
        print(f"{indent}{frame}")
    if user_frames:
        print(f"{indent}--")
        for frame in user_frames:
            print(f"{indent}{frame}")


def table(fields: Sequence[Field], rows: Sequence[Mapping[str, Any]], time_unit: str = "") -> str:
    """Records as a table under their fields' registry declarations (label in words, unit), the way the
    window's table shows them (registry/units.py): each heading the label with the unit its column is
    in; a column of times in the one unit its largest value reads best in, or in `time_unit` (a
    script's -m); sizes in B, KiB, MiB, GiB; rates with /s. Numbers right-aligned, text left and cut
    in the middle past TEXT_WIDTH. No rows: the heading line alone."""
    return "\n".join(SEP.join(line).rstrip() for line in _aligned(columns(fields, rows, time_unit)))


TEXT_WIDTH = 60   # a text cell's most characters: a C++ name or a cgroup path keeps its start and its end
SEP = "  "        # between columns: two spaces, as headings in words hold one


@dataclass(frozen=True)
class Column:
    heading: str
    shown: str                  # the unit its cells are in: the declared one, or the time unit chosen
    cells: tuple[str, ...]
    right: bool                 # numbers: right-aligned


def columns(fields: Sequence[Field], rows: Sequence[Mapping[str, Any]], time_unit: str = "") -> list[Column]:
    """table()'s columns, before alignment."""
    out = []
    for f in fields:
        values = [row.get(f.name) for row in rows]
        shown = _time_unit(f.unit, time_unit) or units.column_unit(f.unit, values)
        cells = tuple(_cut(units.cell(v, f.unit, f.name, shown)) for v in values)
        # right-aligned: a column of numbers (an empty table: one declared with a unit)
        numeric = any(isinstance(v, (int, float)) for v in values) or (not rows and bool(f.unit))
        out.append(Column(units.heading(f.label, shown), shown, cells, numeric))
    return out


class LineTable:
    """A table printed a row at a time, as events arrive (a connect, a thread's exit): each column in
    its declared unit (no later value can change a column's), at least as wide as `widths` says
    (negative: text, left-aligned) and as its heading."""

    def __init__(self, fields: Sequence[Field], widths: Sequence[int]) -> None:
        self.fields = list(fields)
        self.headings = [units.heading(f.label, f.unit) for f in self.fields]
        self.widths = [max(abs(w), len(h)) for w, h in zip(widths, self.headings, strict=True)]
        self.right = [w > 0 for w in widths]

    def heading(self) -> str:
        return self._line(self.headings)

    def line(self, row: Mapping[str, Any]) -> str:
        return self._line([_cut(units.cell(row.get(f.name), f.unit, f.name)) for f in self.fields])

    def _line(self, cells: list[str]) -> str:
        return SEP.join(c.rjust(w) if right else c.ljust(w)
                        for c, w, right in zip(cells, self.widths, self.right, strict=True)).rstrip()


def figures(fields: Sequence[Field], record: Mapping[str, Any]) -> str:
    """Some fields of a record (a summary) as words and values scaled to their size: 'Read 1.2 MiB  Reads
    12  Avg latency 894.1 µs'; a field the record lacks, or holds None, is left out."""
    parts = []
    for f in fields:
        value = record.get(f.name)
        if value is None:
            continue
        identifier = units.is_identifier(f.name, f.unit)
        parts.append(f"{f.label} {units.cell(value, f.unit, f.name) if identifier else units.quantity(value, f.unit)}")
    return "  ".join(parts)


def _aligned(cols: list[Column]) -> list[list[str]]:
    """The heading line and a line per row, each cell padded to its column's width."""
    widths = [max([len(c.heading), *(len(cell) for cell in c.cells)]) for c in cols]
    rows = len(cols[0].cells) if cols else 0
    lines = [[c.heading for c in cols], *([c.cells[i] for c in cols] for i in range(rows))]
    return [[cell.rjust(w) if c.right else cell.ljust(w) for cell, w, c in zip(line, widths, cols, strict=True)]
            for line in lines]


def _time_unit(declared: str, forced: str) -> str:
    """`forced` (a time unit) for a column of times or times per second; '' for any other column."""
    base, rate = units.per_second(declared)
    if not forced or base not in units.TIMES:
        return ""
    return forced + units.PER_S if rate else forced


def _cut(text: str) -> str:
    if len(text) <= TEXT_WIDTH:
        return text
    half = (TEXT_WIDTH - 3) // 2
    return text[:half] + "..." + text[-(TEXT_WIDTH - 3 - half):]


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
