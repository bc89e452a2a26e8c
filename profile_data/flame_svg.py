"""A flame graph as SVG text, drawn here (no script, no third-party code: a page works offline and
in any browser). Root at the bottom (icicle: at the top), each frame as wide as its share of the focused
node; a frame is a link (zoom: the page draws it again with that frame as the base), its tooltip the
frame, its weight and share; frames whose name holds the search text are drawn magenta and their share
(each counted once, not again under another match) is returned. The graph is of a profile's call tree,
or of another tree (profile_data.views: bottom-up, a sandwich's callers or callees) in the unit given.
With a baseline tree it is differential: each frame coloured by the change of its share (of its whole
graph) against the same path in the baseline, grew red, shrank blue, the strongest change drawn
saturated (as the window's; paths only in the baseline are not drawn, as in flamegraph.pl's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from profile_data.display import change_rgb, frame_rgb, weight_text
from profile_data.folded import frame_text
from profile_data.model import Profile
from profile_data.tree import Node, call_tree

WIDTH, ROW, FONT_PX, CHAR_PX, MIN_PX, PAD = 1200, 17, 12, 7.0, 1.0, 4
MAX_FRAMES = 4000  # drawn at most: a bound on the page's size whatever the profile holds
PATH_SEP = ";"


@dataclass
class FlameGraph:
    svg: str
    focus: list[str]  # the focused node's path (frame texts from the root), [] for the whole profile
    frames: int  # drawn
    hidden: int  # too narrow or past MAX_FRAMES
    matched: float  # weight of the frames matching the search, each stack once
    total: float  # the focused node's weight
    strongest: float = 0.0  # differential: the largest change of share drawn, in points


def focused_node(root: Node, focus: list[str]) -> tuple[Node, list[Node]]:
    """The node at the focus path (as far as it exists) and its ancestors."""
    node, ancestors = root, []
    for text in focus:
        child = next((c for c in node.ordered() if frame_text(c.frame) == text), None)
        if child is None:
            break
        ancestors.append(node)
        node = child
    return node, ancestors


def render(profile: Profile | Node, focus: list[str] | None = None, search: str = "",
           link: Callable[[list[str]], str] | None = None, title: str = "", unit: str = "samples",
           icicle: bool = False, period_ns: float = 0.0, baseline: Node | None = None) -> FlameGraph:
    """The flame graph of `profile` (or of a tree, its weights in `unit`), zoomed on the `focus` path;
    link(path) is the URL that zooms on a frame (None: frames are not links); period_ns: a sample's
    time, said in the tooltips beside the samples; baseline: the tree the differential compares with."""
    root = profile if isinstance(profile, Node) else call_tree(profile)
    unit = unit if isinstance(profile, Node) else profile.unit
    base, ancestors = focused_node(root, focus or [])
    path_of_base = [frame_text(n.frame) for n in (*ancestors[1:], base)] if ancestors else []
    rows, hidden = _layout(root, base, ancestors, path_of_base, search.lower(), baseline)
    strongest = max((abs(r[6]) for r in rows[len(ancestors[1:]):] if r[6] is not None), default=0.0)
    depth_max = max((r[0] for r in rows), default=0)
    height = (depth_max + 1) * ROW + 2 * PAD
    parts = [f'<svg class="flamegraph{" differential" if baseline is not None else ""}" '
             f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
             f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title or "flame graph")}" '
             f'font-family="monospace" font-size="{FONT_PX}">']
    for depth, x, width, node, path, is_match, change in rows:
        y = PAD + depth * ROW if icicle else height - PAD - (depth + 1) * ROW
        frame = node.frame
        share = node.total / (root.total or 1.0) * 100
        tip = f"{frame_text(frame)} — {weight_text(node.total, unit, period_ns)} ({share:.2f} %)"
        if change is not None:
            tip += f", {change:+.2f} points against the base"
        rgb = frame_rgb(frame) if change is None else change_rgb(change, strongest)
        fill = "rgb(230,0,230)" if is_match else "rgb({},{},{})".format(*rgb)
        label = ""
        chars = int((width - 6) // CHAR_PX)
        if chars >= 3:
            name = frame.name if len(frame.name) <= chars else frame.name[:chars - 2] + ".."
            label = f'<text x="{x + 3:.1f}" y="{y + ROW - 5}">{escape(name)}</text>'
        changed = f' data-change="{change:.3f}"' if change is not None else ""
        cell = (f'<g class="frame" data-name="{escape(frame.name)}" data-kind="{frame.kind}"{changed}>'
                f'<title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(width - 0.5, 0.1):.1f}" '
                f'height="{ROW - 1}" fill="{fill}" rx="1"/>{label}</g>')
        if link is not None:
            cell = f'<a href="{escape(link(path))}">{cell}</a>'
        parts.append(cell)
    parts.append("</svg>")
    return FlameGraph("".join(parts), path_of_base, len(rows), hidden, _matched(base, search.lower()), base.total,
                      strongest)


Row = tuple[int, float, float, Node, list[str], bool, float | None]  # depth, x, width, node, path, match, change


def _layout(root: Node, base: Node, ancestors: list[Node], path_of_base: list[str], needle: str,
            baseline: Node | None) -> tuple[list[Row], int]:
    """The frames drawn (the ancestors first, full width, as one column under the base: clicking one
    zooms out to it), each with its change of share against the same path in the baseline (None:
    no baseline), and how many were too narrow or past MAX_FRAMES."""
    total = base.total or 1.0
    share, before = 1.0 / (root.total or 1.0), 1.0 / (baseline.total or 1.0) if baseline is not None else 0.0

    def change(node: Node, then: Node | None) -> float | None:
        if baseline is None:
            return None
        return 100.0 * (node.total * share - (then.total * before if then is not None else 0.0))

    then = baseline
    rows: list[Row] = []
    for depth, node in enumerate(ancestors[1:]):
        then = then.child(node.frame) if then is not None else None
        rows.append((depth, 0.0, WIDTH, node, path_of_base[:depth + 1],
                     bool(needle) and needle in node.frame.name.lower(), change(node, then)))
    if ancestors:
        then = then.child(base.frame) if then is not None else None
    hidden = 0
    todo = [(base, len(ancestors[1:]), 0.0, path_of_base, then)]
    while todo:
        node, depth, x, path, then = todo.pop()
        width = node.total / total * WIDTH
        if node is not root:
            if width < MIN_PX or len(rows) >= MAX_FRAMES:
                hidden += 1
                continue
            rows.append((depth, x, width, node, path, bool(needle) and needle in node.frame.name.lower(),
                         change(node, then)))
        child_x = x
        for child in node.ordered():
            todo.append((child, depth + (node is not root), child_x, [*path, frame_text(child.frame)],
                         then.child(child.frame) if then is not None else None))
            child_x += child.total / total * WIDTH
    return rows, hidden


def _matched(base: Node, needle: str) -> float:
    """Weight under base of the frames whose name holds needle; a match inside a match counts once."""
    if not needle:
        return 0.0
    weight, todo = 0.0, [base]
    while todo:
        node = todo.pop()
        if needle in node.frame.name.lower() and node.frame.kind != "root":
            weight += node.total
        else:
            todo.extend(node.children.values())
    return weight
