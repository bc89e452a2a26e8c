"""The drill-down's filter: a proxy that keeps only the rows of one process (its `pid` column, as a
number, so 185 does not also keep 1850), on top of the filter box's text over every column."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QSortFilterProxyModel

from gui.models import SORT_ROLE


class PidFilterProxy(QSortFilterProxyModel):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pid: int | None = None
        self.pid_column: int | None = None

    def set_pid(self, pid: int | None, column: int | None) -> None:
        self.beginFilterChange()
        self.pid, self.pid_column = pid, column
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, row: int, parent: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        if self.pid is not None:
            if self.pid_column is None:
                return False            # a metric whose rows name no process has none of its rows
            value = self.sourceModel().index(row, self.pid_column, parent).data(SORT_ROLE)
            if value != self.pid:
                return False
        return super().filterAcceptsRow(row, parent)
