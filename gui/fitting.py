"""Text that fits where it is shown, or says that it does not: a one-line label that ends in … with the
whole text in its tooltip, a table whose columns fit its width (numbers whole, one text column taking
what is left and eliding, the whole cell in its tooltip), headers of several words on two lines.
tests/gui/test_text_fits.py measures each against its widget's width."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QAbstractItemModel,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QSize,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QToolTip,
    QWidget,
)

TWO_LINES_FROM = 6       # a header of more than this many characters goes on two lines
NARROW_CHARS = 10        # a narrow text column's width, in average characters


class ElidedLabel(QLabel):
    """One line, ending in … where the text is wider than the label; text() and the tooltip are whole.
    It never widens its layout (its width is what the layout gives it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self._whole = ""

    def setText(self, text: str) -> None:  # noqa: N802 - QLabel's name
        self._whole = text
        self.setToolTip(text)
        self._fit()

    def text(self) -> str:
        return self._whole

    def clear(self) -> None:
        self.setText("")

    def shown_text(self) -> str:
        """What the label shows at its width now."""
        return self.fontMetrics().elidedText(self._whole, Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        QLabel.setText(self, self.shown_text())   # drawn by QLabel itself: style sheet, selection


class TwoLineHeaders(QSortFilterProxyModel):
    """A sorting proxy whose horizontal headers of several words break onto two lines, so a column of
    narrow numbers is not as wide as its header's words ("BPF CPU of one core (%)")."""

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        text = super().headerData(section, orientation, role)
        if role != Qt.ItemDataRole.DisplayRole or orientation != Qt.Orientation.Horizontal:
            return text
        return two_lines(text) if isinstance(text, str) else text


def two_lines(text: str) -> str:
    """The space nearest the middle made a line break, for a text of more than TWO_LINES_FROM characters."""
    if len(text) <= TWO_LINES_FROM or " " not in text:
        return text
    middle = len(text) / 2
    cut = min((i for i, c in enumerate(text) if c == " "), key=lambda i: abs(i - middle))
    return f"{text[:cut]}\n{text[cut + 1:]}"


class SortedHeader(QHeaderView):
    """A horizontal header that leaves room for the sort arrow in the sorted column only: Qt leaves it in
    every column (the text's height again, 20 px a column, 34 for two lines), a narrow table's worth."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.setSectionsClickable(True)
        self.setHighlightSections(True)
        self.sortIndicatorChanged.connect(lambda *_: self.resizeSections())

    def sectionSizeFromContents(self, logical: int) -> QSize:  # noqa: N802
        size = super().sectionSizeFromContents(logical)
        if self.isSortIndicatorShown() and logical != self.sortIndicatorSection():
            size.setWidth(size.width() - size.height() - self.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin))
        return size


class TipWhenElided(QStyledItemDelegate):
    """A cell's tooltip is its whole text when the view shows it elided (and the model gives none)."""

    def helpEvent(self, event: QHelpEvent, view: QAbstractItemView, option: QStyleOptionViewItem,  # noqa: N802
                  index: QModelIndex | QPersistentModelIndex) -> bool:
        if event.type() == QEvent.Type.ToolTip and index.isValid() and not index.data(Qt.ItemDataRole.ToolTipRole):
            text = elided_cell(view, option, index)
            if text is not None:
                QToolTip.showText(event.globalPos(), text, view)
                return True
        return super().helpEvent(event, view, option, index)


def elided_cell(view: QAbstractItemView, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> str | None:
    """The cell's whole text if the view cannot show it whole at the cell's width, else None."""
    text = index.data(Qt.ItemDataRole.DisplayRole)
    if not isinstance(text, str) or not text:
        return None
    margin = 2 * (view.style().pixelMetric(view.style().PixelMetric.PM_FocusFrameHMargin, None, view) + 1)
    return text if view.fontMetrics().horizontalAdvance(text) + margin > option.rect.width() else None


def fit_columns(view: QTableView, stretch: tuple[int, ...], narrow: tuple[int, ...] = (), rows: int = 50) -> None:
    """Every column of the view sized to its contents (its header and its first `rows` rows), but the
    `stretch` columns (text: a name), which share the width left, and the `narrow` ones (text that
    matters less: a module's path), NARROW_CHARS wide to begin with; both elide (whole in the tooltip)."""
    old, sorting = view.horizontalHeader(), view.isSortingEnabled()
    header = SortedHeader(view)
    header.setSortIndicator(old.sortIndicatorSection(), old.sortIndicatorOrder())   # -1: the model's own order
    view.setHorizontalHeader(header)
    view.setSortingEnabled(sorting)                  # the new header shows the arrow, and sorts on a click
    header.setStretchLastSection(False)
    header.setResizeContentsPrecision(rows)
    header.setMinimumSectionSize(40)
    model: QAbstractItemModel = view.model()
    for column in range(model.columnCount()):
        if column in narrow:
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(column, view.fontMetrics().averageCharWidth() * NARROW_CHARS)
        else:
            mode = QHeaderView.ResizeMode.Stretch if column in stretch else QHeaderView.ResizeMode.ResizeToContents
            header.setSectionResizeMode(column, mode)
    view.setTextElideMode(Qt.TextElideMode.ElideRight)
    view.setWordWrap(False)
    view.setItemDelegate(TipWhenElided(view))
