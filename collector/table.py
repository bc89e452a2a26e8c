"""The stream page's table of records: which columns it shows, and how each cell reads.

Columns: the fields the registry declares for the metric (config.py, in its order) that the page's
records carry, then every other field in the order the records first carry it. The first TABLE_COLUMNS
are shown unless the page asks for others (`columns=a,b` or one `columns=` per field, as the page's
column chooser sends them): every field is reachable. A column is headed by its label in words, never
its raw name (the registry's declaration, or one made from the name: registry/spec.py field_of), with
the unit its cells are in: a column of times in the one unit that suits its largest value (registry/
units.py), sizes in KiB, MiB with their own unit. A cell is the value as text, cut at CELL_CHARS (its
raw value kept for sorting); a stack's frames read innermost first, each called by the next (`a ← b ←
c`), its first few on the line and all of them listed when the cell is opened."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from collector.chart import registered
from registry import units
from registry.spec import Field, field_of

TABLE_COLUMNS = 16  # shown when the page asks for none
CELL_CHARS = 80
STACK_LINE = 3  # frames on a stack cell's line
CALLED_BY = " ← "
ENVELOPE = ("metric", "ts", "kind")  # the time and kind have columns of their own; the metric is the page's


@dataclass(frozen=True)
class Cell:
    text: str = ""
    numeric: bool = False
    frames: tuple[str, ...] = ()  # a stack's, innermost first
    value: object = None  # a number's raw value, which the page sorts by


@dataclass(frozen=True)
class Column:
    name: str  # the records' field (what the column chooser sends)
    label: str  # its heading, with the unit its cells are in
    unit: str  # the declared unit of its values
    shown: str  # the unit its cells are in


def fields_of(source: str, names: list[str], records: list[Mapping]) -> list[Column]:
    """The columns' declarations, each in the unit that suits its values in these records; a label two
    fields share (a table field's and a summary field's) is the second one's own words."""
    out, taken = [], set()
    for name in names:
        field = declared(source, name)
        label = field.label if field.label not in taken else units.guess(name)[0]   # offcpu's two "Blocked"
        taken.add(label)
        shown = units.column_unit(field.unit, (r.get(name) for r in records))
        out.append(Column(name, units.heading(label, shown), field.unit, shown))
    return out


def declared(source: str, name: str) -> Field:
    """A field's declaration (its label in words and its unit), registered or not."""
    spec = registered(source)
    return spec.field(name) if spec is not None else field_of(name)


def columns_of(source: str, records: Iterable[Mapping]) -> list[str]:
    """Every field of the records, the registry's declared ones first."""
    seen: dict[str, None] = {}
    for record in records:
        seen.update(dict.fromkeys(k for k in record if k not in ENVELOPE))
    spec = registered(source)
    declared = [f.name for f in spec.fields if f.name in seen] if spec is not None else []
    return declared + [c for c in seen if c not in declared]


def asked_columns(values: list[str]) -> list[str]:
    """The `columns` query values (repeated, or comma-separated) as field names."""
    return [name for value in values for name in value.split(",") if name]


def shown_columns(columns: list[str], asked: list[str]) -> list[str]:
    """The columns asked for that the records have, in the table's order; else the first TABLE_COLUMNS."""
    chosen = [c for c in columns if c in asked]
    return chosen or columns[:TABLE_COLUMNS]


def frames_of(field: str, value: object) -> list[str] | None:
    """A stack field's frames, innermost first; None for any other field or value. kernel_frames and
    user_frames are innermost first already (as BCC walks them); cpuprofile's frames ({name, module})
    and a folded line ("comm;outermost;...;innermost") are root first."""
    if field in ("kernel_frames", "user_frames") and isinstance(value, list):
        return [str(f) for f in value]
    if field == "frames" and isinstance(value, list):
        return [_frame_text(f) for f in reversed(value)]
    if field == "folded" and isinstance(value, str):
        return value.split(";")[::-1]
    return None


def _frame_text(frame: object) -> str:
    if not isinstance(frame, Mapping):
        return str(frame)
    name, module = str(frame.get("name") or "[unknown]"), frame.get("module")
    return f"{name} [{module}]" if module else name


def _cut(text: str) -> str:
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def cell(field: str, value: object, column: Column | None = None) -> Cell:
    """A value as its column shows it: a number in the column's unit, a stack as frames, anything
    else as text (nested values as compact JSON)."""
    frames = frames_of(field, value)
    if frames:
        line = _cut(CALLED_BY.join(frames[:STACK_LINE]))
        if len(frames) > STACK_LINE:
            line += f"{CALLED_BY}… ({len(frames)} frames)"
        return Cell(line, frames=tuple(frames))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        unit, shown = (column.unit, column.shown) if column is not None else ("", None)
        return Cell(units.cell(value, unit, field, shown), True, value=value)
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return Cell(_cut(text))
