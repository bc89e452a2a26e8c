"""An interactive flame graph of a call tree (profile_data.Node), painted with QPainter.

Root at the top, callees below; a frame's width is its share of the zoomed frame; siblings in name order
(as flamegraph.pl draws them, so two graphs compare). Click a frame to zoom into it, click a frame above
the zoomed one (or Backspace) to go back, Escape (or reset_zoom) for the whole graph; set_search highlights the frames whose name holds the text and
reports their share; hover shows the frame, its module, its weight in the profile's unit and its share.
With a baseline tree, each frame is coloured by the change of its share against the same path in the
baseline: grew red, shrank blue, the strongest change fully saturated (as flamegraph.pl's differential).

The layout (one box per frame at least a pixel wide) is computed once per tree, zoom and width and kept;
a paint draws the kept boxes, so hovering and repainting cost no walk of the tree.

inverted draws the root at the bottom (a sandwich's callers: the function below, its callers above), and
root_label names the root (a sandwich's graphs are rooted at their function);
period_ns, a sample's time, adds the time to the hover's samples.
"""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import QPoint, QRectF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from profile_data import Frame, Node
from profile_data.display import change_rgb, format_weight, frame_rgb, weight_text  # noqa: F401 - format_weight: re-exported

ROW = 18                      # px per frame row
MIN_WIDTH = 1.0               # frames narrower than this many px are not drawn (nor their callees)
MATCH = QColor(230, 0, 230)
ANCESTOR_ALPHA = 150


class Box(NamedTuple):
    x: float
    width: float
    depth: int
    node: Node
    parent: int               # index of the caller's box, -1 for the top row
    change: float | None      # differential: the change of share, in points (None without a baseline)


_COLORS: dict[Frame, QColor] = {}


def frame_color(frame: Frame) -> QColor:
    """Red to dark orange for user code, orange to yellow for the kernel (as flamegraph.pl's perf
    palette), grey-blue for processes; steady per name, in a few shades (so a paint batches them)."""
    color = _COLORS.get(frame)
    if color is None:
        if len(_COLORS) > 50_000:
            _COLORS.clear()
        color = _COLORS[frame] = QColor(*frame_rgb(frame))
    return color


def change_color(change: float, strongest: float) -> QColor:
    """Red for a share that grew, blue for one that shrank, white for none; saturated at `strongest`."""
    return QColor(*change_rgb(change, strongest))


class FlameGraph(QWidget):
    zoom_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.root: Node = Node()
        self.baseline: Node | None = None
        self.unit = "samples"
        self.zoom_path: tuple[Frame, ...] = ()     # frames from the root to the zoomed frame
        self.search = ""
        self.matched_share = 0.0                   # of the whole tree, 0..1
        self.strongest_change = 0.0                # points, over the drawn boxes
        self.hover_text = ""
        self.inverted = False
        self.root_label = "all"                    # the top box's (a sandwich's graphs: the function's)
        self.period_ns = 0.0
        self._rows = 1                             # rows laid out (depth of the deepest box + 1)
        self._boxes: list[Box] | None = None
        self._laid_out_width = -1
        self._batches: tuple[list[tuple[QColor, list[QRectF]]], list[tuple[QRectF, str]]] | None = None
        self._matched: dict[Frame, bool] = {}
        self.setFont(QFont(self.font().family(), 8))

    # --- data ---------------------------------------------------------------------------------------
    def set_tree(self, root: Node, unit: str, baseline: Node | None = None) -> None:
        """Show `root` (and colour by change against `baseline`); the zoom follows the same frames."""
        self.root, self.unit, self.baseline = root, unit, baseline
        self._resolve_zoom()
        self._update_matches()
        self.invalidate()

    def set_search(self, text: str) -> float:
        """Highlight frames whose name holds `text` (any case); returns their share of the whole, 0..1."""
        self.search = text.strip().lower()
        self._matched = {}
        self._update_matches()
        self._batches = None
        self.update()
        return self.matched_share

    def zoom_to(self, path: tuple[Frame, ...]) -> None:
        self.zoom_path = tuple(path)
        self._resolve_zoom()
        self.invalidate()
        self.zoom_changed.emit()

    def reset_zoom(self) -> None:
        self.zoom_to(())

    def invalidate(self) -> None:
        self._boxes = self._batches = None
        if self.isVisible():
            self.boxes()       # now, for its height: a layout that gives it its minimum then shows it whole
        self.update()

    def _resolve_zoom(self) -> None:
        """Keep the longest prefix of the zoom path that the (new) tree still has."""
        node, kept = self.root, []
        for frame in self.zoom_path:
            node = node.child(frame)
            if node is None:
                break
            kept.append(frame)
        self.zoom_path = tuple(kept)

    def matches(self, frame: Frame) -> bool:
        if not self.search:
            return False
        found = self._matched.get(frame)
        if found is None:
            found = self._matched[frame] = self.search in frame.name.lower()
        return found

    def _update_matches(self) -> None:
        """The share of the frames matched, each counted once: a match's callees are inside it."""
        if not self.search or self.root.total <= 0:
            self.matched_share = 0.0
            return
        matched, todo = 0.0, list(self.root.children.values())
        while todo:
            node = todo.pop()
            if self.matches(node.frame):
                matched += node.total
            else:
                todo.extend(node.children.values())
        self.matched_share = matched / self.root.total

    # --- layout -------------------------------------------------------------------------------------
    def boxes(self) -> list[Box]:
        """Every drawn frame: the path to the zoomed frame full width, then its callees by share."""
        width = float(max(1, self.width()))
        if self._boxes is not None and self._laid_out_width == self.width():
            return self._boxes
        boxes: list[Box] = []
        total, base_total = self.root.total, self.baseline.total if self.baseline else 0.0

        def change(node: Node, base: Node | None) -> float | None:
            if self.baseline is None:
                return None
            before = base.total / base_total if base is not None and base_total > 0 else 0.0
            return 100.0 * ((node.total / total if total > 0 else 0.0) - before)

        node, base = self.root, self.baseline
        boxes.append(Box(0.0, width, 0, node, -1, change(node, base)))
        for frame in self.zoom_path:
            node = node.children[frame]
            base = base.child(frame) if base is not None else None
            boxes.append(Box(0.0, width, len(boxes), node, len(boxes) - 1, change(node, base)))
        zoomed = len(boxes) - 1
        scale = width / node.total if node.total > 0 else 0.0
        todo = [(node, base, 0.0, zoomed)]
        differential = self.baseline is not None
        while todo:
            parent, parent_base, x, parent_index = todo.pop()
            depth = boxes[parent_index].depth + 1
            for child in parent.ordered():
                w = child.total * scale
                if w >= MIN_WIDTH:
                    if differential:
                        child_base = parent_base.child(child.frame) if parent_base is not None else None
                        boxes.append(Box(x, w, depth, child, parent_index, change(child, child_base)))
                    else:
                        child_base = None
                        boxes.append(Box(x, w, depth, child, parent_index, None))
                    if child.children:
                        todo.append((child, child_base, x, len(boxes) - 1))
                x += w
        changes = [abs(b.change) for b in boxes[zoomed + 1:] if b.change is not None]
        self.strongest_change = max(changes, default=0.0)
        self._boxes, self._laid_out_width = boxes, self.width()
        self._rows = max(b.depth for b in boxes) + 1
        height = self._rows * ROW + 2
        if self.minimumHeight() != height:
            self.setMinimumHeight(height)
        return boxes

    def row_y(self, depth: int) -> int:
        """The top of a row: depth 0 at the top, or with inverted at the bottom of the laid-out rows."""
        return (self._rows - 1 - depth if self.inverted else depth) * ROW

    def box_at(self, pos: QPoint) -> int | None:
        boxes = self.boxes()
        depth = self._rows - 1 - pos.y() // ROW if self.inverted else pos.y() // ROW
        for i, b in enumerate(boxes):
            if b.depth == depth and b.x <= pos.x() < b.x + b.width:
                return i
        return None

    def path_of(self, index: int) -> tuple[Frame, ...]:
        boxes, frames = self.boxes(), []
        while index > 0:
            frames.append(boxes[index].node.frame)
            index = boxes[index].parent
        return tuple(reversed(frames))

    def color_of(self, box: Box) -> QColor:
        if self.matches(box.node.frame):
            return QColor(MATCH)
        if box.change is not None and box.depth > 0:
            return change_color(box.change, self.strongest_change)
        return frame_color(box.node.frame)

    def batches(self) -> tuple[list[tuple[QColor, list[QRectF]]], list[tuple[QRectF, str]]]:
        """The boxes as rectangles grouped by colour (one drawRects call per colour), and the labels of
        those wide enough to hold one; kept until the layout or the search changes."""
        if self._batches is None or self._boxes is None or self._laid_out_width != self.width():
            metrics = QFontMetrics(self.font())
            groups: dict[int, tuple[QColor, list[QRectF]]] = {}
            labels = []
            zoomed_depth = len(self.zoom_path)
            for box in self.boxes():
                color = self.color_of(box)
                if box.depth < zoomed_depth:
                    color = QColor(color)
                    color.setAlpha(ANCESTOR_ALPHA)
                rect = QRectF(box.x, self.row_y(box.depth), max(box.width - 1.0, 1.0), ROW - 1)
                groups.setdefault(color.rgba(), (color, []))[1].append(rect)
                if box.width > 24:
                    text = self.root_label if box.depth == 0 else box.node.frame.name
                    labels.append((rect.adjusted(3, 0, -2, 0),
                                   metrics.elidedText(text, Qt.TextElideMode.ElideRight, int(box.width - 6))))
            self._batches = (list(groups.values()), labels)
        return self._batches

    # --- Qt -----------------------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        groups, labels = self.batches()
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(255, 255, 255))
        painter.setPen(Qt.PenStyle.NoPen)
        for color, rects in groups:
            painter.setBrush(color)
            painter.drawRects(rects)
        painter.setPen(QColor(20, 20, 20))
        visible = event.rect()
        for rect, text in labels:
            if rect.bottom() >= visible.top() and rect.top() <= visible.bottom():
                painter.drawText(rect, Qt.AlignmentFlag.AlignVCenter, text)
        painter.end()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        self.boxes()
        super().showEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        self._boxes = self._batches = None
        super().resizeEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        """Escape: back to the whole graph; Backspace: out one frame."""
        if event.key() == Qt.Key.Key_Escape:
            self.reset_zoom()
        elif event.key() == Qt.Key.Key_Backspace and self.zoom_path:
            self.zoom_to(self.zoom_path[:-1])
        else:
            super().keyPressEvent(event)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        index = self.box_at(event.position().toPoint())
        if event.button() == Qt.MouseButton.LeftButton and index is not None:
            self.zoom_to(self.path_of(index))

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        index = self.box_at(event.position().toPoint())
        self.hover_text = self.describe(index) if index is not None else ""
        if self.hover_text:
            QToolTip.showText(event.globalPosition().toPoint(), self.hover_text, self)
        else:
            QToolTip.hideText()

    def describe(self, index: int) -> str:
        """The hover text of a box: frame, module and kind, weight, share of all and of the zoomed frame."""
        box = self.boxes()[index]
        node, frame = box.node, box.node.frame
        lines = [self.root_label if box.depth == 0 else frame.name]
        if box.depth > 0:
            where = {"kernel": "kernel", "process": "process", "python": "python"}.get(frame.kind, "user")
            lines.append(f"{frame.module} ({where})" if frame.module else where)
        share = 100.0 * node.total / self.root.total if self.root.total > 0 else 0.0
        lines.append(f"{weight_text(node.total, self.unit, self.period_ns)}, {share:.2f} % of {self.root_label}")
        zoomed = self.boxes()[len(self.zoom_path)].node
        if self.zoom_path and zoomed.total > 0:
            lines.append(f"{100.0 * node.total / zoomed.total:.2f} % of {zoomed.frame.name}")
        if node.self_weight > 0:
            lines.append(f"self {weight_text(node.self_weight, self.unit, self.period_ns)}")
        if box.change is not None:
            lines.append(f"{box.change:+.2f} points against the baseline")
        return "\n".join(lines)
