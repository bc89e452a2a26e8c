"""Table models for the desktop app: a metric's latest records, and the BPF overhead rows.

Columns come from the registry (config.Field), so a new metric needs no code here. Updates arrive in
batches from a timer (never one signal per record), and every model holds a bounded number of rows.
Display text is formatted by unit; the raw value is kept under SORT_ROLE so sorting is numeric.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QFont

import config

SORT_ROLE = Qt.ItemDataRole.UserRole
# bytes have no header suffix: their cells carry their own unit (512 B, 888.0 KiB)
UNIT_SUFFIX = {"us": "µs", "ms": "ms", "ns": "ns", "pct": "%", "/s": "/s"}
# fields that name things rather than count them: no thousands separators (pid 26712, port 5999)
IDENTIFIERS = {"pid", "tid", "ppid", "tgid", "uid", "gid", "port", "lport", "dport", "sport", "cpu", "cgroup_id",
               "id", "dev", "major", "minor", "inode", "syscall_nr", "nr"}


def is_identifier(key: str, unit: str = "") -> bool:
    return unit == "id" or key in IDENTIFIERS or key.endswith(("_pid", "_tid", "_port", "_id"))
NUMERIC = (int, float)


def header_label(label: str, unit: str) -> str:
    """The column's label with its unit once: not added when the label says it already (CPU%)."""
    suffix = UNIT_SUFFIX.get(unit)
    if not suffix or label.endswith(suffix) or f"({suffix})" in label:
        return label
    return f"{label} ({suffix})"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_value(value: Any, unit: str = "", key: str = "") -> str:
    """A cell's text: thousands separators (not in identifiers), a few decimals, bytes with their unit
    (B, KiB, MiB), lists joined."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        if is_identifier(key, unit):
            return str(value)
        return _bytes(value) if unit == "bytes" else f"{value:,}"
    if isinstance(value, float):
        if unit == "bytes":
            return _bytes(value)
        if value != value:  # NaN
            return ""
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


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

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.columns):
            return None
        key, label, unit = self.columns[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return header_label(label, unit)
        if role == Qt.ItemDataRole.ToolTipRole:
            return key
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        key, _, unit = self.columns[index.column()]
        value = self.rows[index.row()].get(key)
        if role == Qt.ItemDataRole.DisplayRole:
            return format_value(value, unit, key)
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
