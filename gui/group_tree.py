"""A metric's group and detail rows (sysnest: a process and its syscalls) as a tree, so sorting a column
sorts the groups and, under each group, its own details: never one process's syscalls under another.

Built from the flat rows a RecordTableModel holds (a detail row follows its group and carries its rank);
cells are formatted as the table formats them, with the raw value under SORT_ROLE for numeric sorting.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtGui import QStandardItem, QStandardItemModel

from gui.models import SORT_ROLE, format_value, sort_key
from registry import units

GROUP, DETAIL = "group", "detail"


def has_groups(rows: Sequence[dict]) -> bool:
    return any(r.get("level") == DETAIL for r in rows)


def _items(row: dict, columns: Sequence[tuple[str, str, str]], shown: Sequence[str]) -> list[QStandardItem]:
    items = []
    for (key, _, unit), shown_unit in zip(columns, shown, strict=True):
        value = row.get(key)
        item = QStandardItem(format_value(value, unit, key, shown_unit))
        item.setData(sort_key(value), SORT_ROLE)
        item.setEditable(False)
        items.append(item)
    return items


def fill(model: QStandardItemModel, rows: Sequence[dict], columns: Sequence[tuple[str, str, str]],
         headers: Sequence[str]) -> None:
    """Replace the model's contents: each group a top-level row, its details its children; a column's
    times in one unit for all its rows (the headers name it: the table model's, for the same rows)."""
    model.clear()
    model.setHorizontalHeaderLabels(list(headers))
    shown = [units.column_unit(unit, (r.get(key) for r in rows)) for key, _, unit in columns]
    parent: QStandardItem | None = None
    for row in rows:
        items = _items(row, columns, shown)
        if row.get("level") == DETAIL and parent is not None:
            parent.appendRow(items)
        else:
            model.appendRow(items)
            parent = items[0] if row.get("level") == GROUP else None
