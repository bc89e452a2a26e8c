"""The stream page's views of a profile (profile_data.views, as the window shows them): the flame graph,
bottom-up, or the sandwich of one function (its callers drawn above it, its callees below, and the
butterfly table of its direct callers and callees); beside the graph, the top functions of what it
shows (the zoomed frame's stacks, those matching the search). Python stacks come without the
interpreter's frames and an off-CPU metric's without the scheduler's, unless the page asks for them.
Each function links to its sandwich; each frame of a sandwich to that frame's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from profile_data import Frame, Functions, Node, bottom_up, call_tree, functions_in, sandwich, simplified
from profile_data.display import format_weight
from profile_data.flame_svg import FlameGraph, focused_node, render
from profile_data.folded import frame_text

VIEWS = {"flame": "flame graph", "bottom_up": "bottom-up", "sandwich": "sandwich"}
TOP_ROWS = 50  # functions listed beside the graph


@dataclass
class Shown:
    view: str
    graphs: list[tuple[str, FlameGraph]]  # (caption, graph), drawn in order
    functions: list[dict]  # the top functions of what the graph shows
    functions_of: str  # what they are of: "", "in FRAME", "matching “TEXT”", "of the whole range"
    function: str = ""  # the sandwich's function (folded text)
    function_name: str = ""
    butterfly: list[dict] = field(default_factory=list)
    timed: bool = False  # samples with a known period: time columns


def show(profile: Any, unit: str, period_ns: float, view: str, focus: list[str], search: str, function: str,
         frames: dict[str, bool], zoom: Callable[[list[str]], str], sandwich_of: Callable[[str], str],
         title: str) -> Shown:
    """The view asked for (a bad view name is the flame graph); frames: interpreter, scheduler shown."""
    shaped = simplified(profile, frames["interpreter"], frames["scheduler"])
    tree = call_tree(shaped)
    rows = _Rows(unit, period_ns, sandwich_of)
    if view == "bottom_up":
        graph = render(bottom_up(tree), focus, search, zoom, title, unit, icicle=True, period_ns=period_ns)
        return Shown(view, [("", graph)], rows.functions(functions_in(tree, (), search)),
                     f"matching “{search}”" if search else "", timed=rows.timed)
    if view == "sandwich":
        return _sandwich(tree, shaped, unit, period_ns, search, function, sandwich_of, rows)
    graph = render(tree, focus, search, zoom, title, unit, period_ns=period_ns)
    node, ancestors = focused_node(tree, graph.focus)
    path = [n.frame for n in (*ancestors[1:], node)] if ancestors else []
    where = [f"in {path[-1].name}"] if path and path[-1].kind not in ("process", "root") else \
        [f"of {path[-1].name}"] if path else []
    where += [f"matching “{search}”"] if search else []
    return Shown("flame", [("", graph)], rows.functions(functions_in(tree, path, search)), " ".join(where),
                 timed=rows.timed)


def _sandwich(tree: Node, shaped: Any, unit: str, period_ns: float, search: str, function: str,
              sandwich_of: Callable[[str], str], rows: _Rows) -> Shown:
    whole = Functions(shaped)
    by_text = {frame_text(f): f for f in whole.weights}
    frame = by_text.get(function) or next((s.frame for s in whole.stats(1)), None)
    functions = rows.functions(functions_in(tree, (), search))
    if frame is None:
        return Shown("sandwich", [], functions, "", timed=rows.timed)
    cut = sandwich(tree, frame)

    def link(path: list[str]) -> str:  # a frame of either graph: its own sandwich
        return sandwich_of(path[-1])

    callers = render(cut.callers, [], search, link, f"callers of {frame.name}", unit, period_ns=period_ns)
    callees = render(cut.callees, [], search, link, f"callees of {frame.name}", unit, icicle=True,
                     period_ns=period_ns)
    butterfly = [rows.related(relation, f, w, cut.total) for relation, pairs in (
        ("caller", cut.callers_of()), ("self", [(frame, cut.self_weight)]), ("callee", cut.callees_of()))
        for f, w in pairs]
    return Shown("sandwich", [(f"callers of {frame.name} ▲", callers), (f"▼ callees of {frame.name}", callees)],
                 functions, f"matching “{search}”" if search else "", frame_text(frame), frame.name, butterfly,
                 rows.timed)


class _Rows:
    """Table rows: weights as people read them (samples also as time), each function a link."""

    def __init__(self, unit: str, period_ns: float, sandwich_of: Callable[[str], str]) -> None:
        self.unit, self.period_ns, self.sandwich_of = unit, period_ns, sandwich_of
        self.timed = unit == "samples" and period_ns > 0

    def weight(self, value: float) -> str:
        return format_weight(value, self.unit)

    def time(self, value: float) -> str:
        return format_weight(value * self.period_ns, "ns") if self.timed else ""

    def functions(self, functions: Functions) -> list[dict]:
        return [{"function": s.frame.name, "module": s.frame.module, "kind": s.frame.kind,
                 "link": self.sandwich_of(frame_text(s.frame)),
                 "self": self.weight(s.self_weight), "self_pct": s.self_pct, "self_time": self.time(s.self_weight),
                 "total": self.weight(s.total_weight), "total_pct": s.total_pct,
                 "total_time": self.time(s.total_weight)}
                for s in functions.stats(TOP_ROWS)]

    def related(self, relation: str, frame: Frame, weight: float, total: float) -> dict:
        return {"relation": relation, "function": frame.name, "module": frame.module,
                "link": self.sandwich_of(frame_text(frame)), "total": self.weight(weight),
                "time": self.time(weight), "pct": 100.0 * weight / total if total else 0.0}
