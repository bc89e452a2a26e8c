"""Table models for the desktop app: a metric's latest records, and the BPF overhead rows.

Columns come from the registry (config.Field), so a new metric needs no code here. Updates arrive in
batches from a timer (never one signal per record), and every model holds a bounded number of rows.
Display text is formatted by unit (registry/units.py): a column of times in the one unit that suits
its largest value, named in its heading; the raw value is kept under SORT_ROLE so sorting is numeric.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QFont

import config
from registry import units

SORT_ROLE = Qt.ItemDataRole.UserRole
NUMERIC = (int, float)
header_label = units.heading          # "Run (ms)": the label with the unit its cells are shown in


def format_value(value: Any, unit: str = "", key: str = "", shown: str | None = None) -> str:
    """A cell's text (registry/units.py cell): thousands separators (not in identifiers), a few
    decimals, times in the column's shown unit, sizes with their own (B, KiB, MiB), lists joined."""
    return units.cell(value, unit, key, shown)


def sort_key(value: Any) -> Any:
    # Qt compares QVariants of one type; give every cell a comparable value (numbers, else text)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, NUMERIC):
        return value
    return "" if value is None else format_value(value)


class ColumnsModel(QAbstractTableModel):
    """Rows of dicts shown through a fixed list of (key, header, unit) columns."""

    def __init__(self, columns: Sequence[tuple[str, str, str]], parent: Any = None) -> None:
        super().__init__(parent)
        self.columns = list(columns)
        self.rows: list[dict] = []
        self.shown_units = [unit for _, _, unit in self.columns]    # each column's, for the rows held

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.columns):
            return None
        key, label, _ = self.columns[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return header_label(label, self.shown_units[section])
        if role == Qt.ItemDataRole.ToolTipRole:
            return key
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        key, _, unit = self.columns[index.column()]
        value = self.rows[index.row()].get(key)
        if role == Qt.ItemDataRole.DisplayRole:
            return format_value(value, unit, key, self.shown_units[index.column()])
        if role == SORT_ROLE:
            return sort_key(value)
        if role == Qt.ItemDataRole.TextAlignmentRole and isinstance(value, NUMERIC):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole and isinstance(value, (list, tuple, str)):
            text = format_value(value)
            if len(text) <= 30:
                return None
            # a list (a stack's frames) reads one item a line
            return "\n".join(str(v) for v in value) if isinstance(value, (list, tuple)) else text
        return None

    def set_rows(self, rows: list[dict]) -> None:
        """Replace every row at once: one reset per batch, whatever its size."""
        self.beginResetModel()
        self.rows = rows
        self.shown_units = [units.column_unit(unit, (r.get(key) for r in rows)) for key, _, unit in self.columns]
        self.endResetModel()


class RecordTableModel(ColumnsModel):
    """A metric's table: the rows of its latest interval (table_kind "row"), or its latest events,
    newest first (table_kind "event"); at most max_rows either way."""

    def __init__(self, spec: config.MetricSpec, max_rows: int = 1000, parent: Any = None) -> None:
        super().__init__([(f.name, f.label, f.unit) for f in spec.fields], parent)
        self.kind = spec.table_kind
        self.max_rows = max_rows
        self._events: deque[dict] = deque(maxlen=max_rows)
        self._interval: Any = None
        self._interval_rows: list[dict] = []
        self.interval: Any = None        # the interval shown (row tables)

    def add_records(self, records: Sequence[dict]) -> bool:
        """Take a batch (any kinds; others are ignored); True when the table changed. Only the newest
        rows can show, so only those are looked at: a flood costs the rows kept, not the rows received."""
        kind = self.kind
        if kind == "event":
            events = newest(records, lambda r: r.get("kind") == "event", self.max_rows)
            if not events:
                return False
            self._events.extend(events)
            self.set_rows(list(reversed(self._events)))
            return True
        rows = _latest_interval_rows(records)
        if not rows:
            return False
        interval = rows[0].get("interval")
        if interval != self._interval:
            self._interval, self._interval_rows = interval, []
        self._interval_rows.extend(rows[: self.max_rows - len(self._interval_rows)])
        self.interval = interval
        self.set_rows(list(self._interval_rows))
        return True

    def clear(self) -> None:
        self._events.clear()
        self._interval, self._interval_rows, self.interval = None, [], None
        self.set_rows([])


def newest(records: Sequence[dict], wanted: Callable[[dict], bool], limit: int | None) -> list[dict]:
    """The last `limit` records that `wanted` accepts, oldest first (all of them when limit is None);
    scans from the end and stops as soon as it has enough."""
    if limit is None:
        return [r for r in records if wanted(r)]
    found = []
    for record in reversed(records):
        if wanted(record):
            found.append(record)
            if len(found) >= limit:
                break
    found.reverse()
    return found


def _latest_interval_rows(records: Sequence[dict]) -> list[dict]:
    """The row records of the newest interval in a batch, in order (a batch may end mid-interval)."""
    found: list[dict] = []
    interval: Any = None
    for record in reversed(records):
        if record.get("kind") != "row":
            continue
        if found and record.get("interval") != interval:
            break
        interval = record.get("interval")
        found.append(record)
    found.reverse()
    return found


OVERHEAD_COLUMNS = (
    ("metric", "Metric", ""),
    ("id", "Prog ID", ""),
    ("name", "Program", ""),
    ("type", "Type", ""),
    ("run_cnt", "Runs", "count"),
    ("runs_per_s", "Runs", "/s"),
    ("avg_ns", "Avg run", "ns"),
    ("cpu_pct", "BPF CPU of one core", "pct"),
    ("proc_cpu_pct", "Process CPU", "pct"),
    ("total_cpu_pct", "Total CPU", "pct"),
    ("pss_bytes", "PSS", "bytes"),
)


class OverheadModel(ColumnsModel):
    """One row per BPF program the app's metrics hold, each metric's subtotal (programs and process) in
    bold after its programs, and the app's own row (see host/bpf_sampler.py)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(OVERHEAD_COLUMNS, parent)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.FontRole and index.isValid() and self.rows[index.row()].get("type") in ("subtotal", "app"):
            font = QFont()
            font.setBold(True)
            return font
        return super().data(index, role)
