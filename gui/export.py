"""Export from a metric tab: a table as CSV (the rows its filter shows, in the order shown) and a chart
as PNG. What to write is taken on the GUI thread (the rows' values, the chart's pixels: both bounded and
quick); the writing itself runs on a worker thread, so a slow or stuck disk never freezes the window.
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QImage

from gui.models import SORT_ROLE
from registry import units


def csv_header(label: str, unit: str) -> str:
    """A column's name with the unit of its raw values, which a CSV keeps unscaled ("Total (µs)",
    "Read (bytes)"): the cells' own units are not in a CSV."""
    base, rate = units.per_second(unit)
    suffix = "bytes" + ("/s" if rate else "") if base == "bytes" else units.symbol(unit)
    return f"{label} ({suffix})" if suffix and suffix not in label else label


def shown_rows(model: QAbstractItemModel, parent: QModelIndex | None = None) -> list[list[Any]]:
    """Every row a (proxy) model shows, depth first (a tree's groups each followed by its details), as
    raw values: numbers stay numbers, text stays text."""
    parent = parent or QModelIndex()
    rows = []
    for row in range(model.rowCount(parent)):
        cells = []
        for column in range(model.columnCount(parent)):
            value = model.index(row, column, parent).data(SORT_ROLE)
            if value is None:
                value = model.index(row, column, parent).data(Qt.ItemDataRole.DisplayRole)
            cells.append("" if value is None else value)
        rows.append(cells)
        first = model.index(row, 0, parent)
        if model.hasChildren(first):
            rows.extend(shown_rows(model, first))
    return rows


def write_csv(path: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return f"saved {len(rows):,} rows to {path}"


def write_png(path: str, image: QImage) -> str:
    if not image.save(path, "PNG"):
        raise OSError(f"cannot write {path}")
    return f"saved the chart to {path}"


class Exporter(QObject):
    """Runs one write at a time off the GUI thread; `finished` reports, on the GUI thread, one line: what
    was saved, or why not."""

    finished = Signal(str, bool)          # message, ok

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread: threading.Thread | None = None

    def start(self, write: Callable[[], str]) -> None:
        self.thread = threading.Thread(target=self._run, args=(write,), name="export", daemon=True)
        self.thread.start()

    def _run(self, write: Callable[[], str]) -> None:
        try:
            message, ok = write(), True
        except (OSError, csv.Error) as e:
            message, ok = f"export failed: {e.strerror or e}" if isinstance(e, OSError) else f"export failed: {e}", False
            if isinstance(e, OSError) and e.filename:
                message += f" ({e.filename})"
        try:
            self.finished.emit(message, ok)   # queued to the GUI thread: this object lives there
        except RuntimeError:
            pass                              # the tab was closed meanwhile: nobody to tell
