"""The graph side of a stacks chart in its three views: the flame graph (root at the top, callees below),
bottom-up (the functions stacks end in at the top, their callers below: where the time is spent, whoever
called it), and the sandwich of one function (its callers drawn upward above it, its callees below).
Each is a FlameGraph; only the view shown is computed (profile_data.views), when drawn."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from gui.flamegraph import FlameGraph
from profile_data import Frame, Node, Sandwich, bottom_up, sandwich
from profile_data.display import weight_text

VIEWS = {"flame": "Flame graph", "bottom_up": "Bottom-up", "sandwich": "Sandwich"}


class ProfileViews(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = "flame"
        self.graph = FlameGraph(self)            # the flame graph: its zoom and search drive the top functions
        self.bottom = FlameGraph(self)
        self.callers = FlameGraph(self)
        self.callers.inverted = True
        self.callees = FlameGraph(self)
        self.sandwich_label = QLabel(self)
        self.sandwich_label.setWordWrap(True)
        self.sandwiched: Sandwich | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        for widget in (self.graph, self.bottom, self.callers, self.sandwich_label, self.callees):
            layout.addWidget(widget)
        layout.addStretch(1)
        self.set_view("flame")
        layout.activate()          # the graphs have a width (and so a layout) before the panel is first shown

    def graphs(self) -> tuple[FlameGraph, ...]:
        return self.graph, self.bottom, self.callers, self.callees

    def set_view(self, view: str) -> None:
        if view not in VIEWS:
            raise ValueError(f"view {view!r}: one of {', '.join(VIEWS)}")
        self.view = view
        self.graph.setVisible(view == "flame")
        self.bottom.setVisible(view == "bottom_up")
        for widget in (self.callers, self.sandwich_label, self.callees):
            widget.setVisible(view == "sandwich")

    def set_search(self, text: str) -> None:
        for graph in self.graphs():
            graph.set_search(text)

    def draw(self, tree: Node, unit: str, period_ns: float, function: Frame | None) -> None:
        """The view shown, of `tree` (the flame graph is set by the panel, with its baseline)."""
        for graph in self.graphs():
            graph.period_ns = period_ns
        if self.view == "bottom_up":
            self.bottom.set_tree(bottom_up(tree), unit)
        elif self.view == "sandwich":
            self.draw_sandwich(tree, unit, period_ns, function)

    def draw_sandwich(self, tree: Node, unit: str, period_ns: float, function: Frame | None) -> None:
        if function is None:
            self.sandwiched = None
            self.sandwich_label.setText("Pick a function in Top functions: its callers are drawn above it, "
                                        "its callees below.")
            self.callers.set_tree(Node(), unit)
            self.callees.set_tree(Node(), unit)
            return
        self.sandwiched = sandwich(tree, function)
        share = 100.0 * self.sandwiched.total / tree.total if tree.total > 0 else 0.0
        self.sandwich_label.setText(
            f"▲ callers · <b>{_escape(function.name)}</b>: {weight_text(self.sandwiched.total, unit, period_ns)}, "
            f"{share:.2f} % of all, self {weight_text(self.sandwiched.self_weight, unit, period_ns)} · callees ▼")
        for graph, tree in ((self.callers, self.sandwiched.callers), (self.callees, self.sandwiched.callees)):
            graph.root_label = function.name
            graph.set_tree(tree.child(function) or Node(function), unit)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
