"""The call tree of a profile, its top functions, and the differential of two profiles."""

from __future__ import annotations

from typing import NamedTuple

from profile_data.model import Frame, Profile, Stack

ROOT = Frame("all", "", "root")


class Node:
    """A frame reached by one path from the root: total = weight of every stack through it, self = weight
    of the stacks that end at it. Stacks can be added one by one (the window adds each interval's)."""

    __slots__ = ("frame", "total", "self_weight", "children", "_ordered")

    def __init__(self, frame: Frame = ROOT) -> None:
        self.frame = frame
        self.total = 0.0
        self.self_weight = 0.0
        self.children: dict[Frame, Node] = {}
        self._ordered: list[Node] | None = []

    def add(self, stack: Stack, weight: float) -> None:
        node = self
        node.total += weight
        for frame in stack:
            child = node.children.get(frame)
            if child is None:
                child = node.children[frame] = Node(frame)
                node._ordered = None
            child.total += weight
            node = child
        node.self_weight += weight

    def ordered(self) -> list[Node]:
        """Children by frame name (then module, kind), as flamegraph.pl orders them; cached until a new
        child arrives."""
        if self._ordered is None:
            self._ordered = sorted(self.children.values(), key=lambda n: n.frame)
        return self._ordered

    def child(self, frame: Frame) -> Node | None:
        return self.children.get(frame)

    def depth(self) -> int:
        """Frames on the longest path below this node."""
        deepest, todo = 0, [(self, 0)]
        while todo:
            node, d = todo.pop()
            deepest = max(deepest, d)
            todo.extend((c, d + 1) for c in node.children.values())
        return deepest

    def __repr__(self) -> str:
        return f"Node({self.frame.name!r}, total={self.total:g}, self={self.self_weight:g})"


def call_tree(profile: Profile) -> Node:
    root = Node()
    for stack, weight in profile.stacks.items():
        root.add(stack, weight)
    return root


class FunctionStat(NamedTuple):
    frame: Frame
    self_weight: float
    total_weight: float
    self_pct: float            # of the profile's total
    total_pct: float


def _function_weights(profile: Profile) -> dict[Frame, list[float]]:
    """frame -> [self, total]; a frame twice in one stack (recursion) counts once in its total."""
    out: dict[Frame, list[float]] = {}
    for stack, weight in profile.stacks.items():
        for frame in set(stack):
            if frame.kind != "process":
                out.setdefault(frame, [0.0, 0.0])[1] += weight
        leaf = stack[-1]
        if leaf.kind != "process":
            out[leaf][0] += weight
    return out


def top_functions(profile: Profile, limit: int | None = None) -> list[FunctionStat]:
    """Every function (not the process roots) by self weight, then total, heaviest first."""
    total = profile.total or 1.0
    stats = [FunctionStat(f, s, t, 100.0 * s / total, 100.0 * t / total)
             for f, (s, t) in _function_weights(profile).items()]
    stats.sort(key=lambda s: (-s.self_weight, -s.total_weight, s.frame))
    return stats[:limit] if limit is not None else stats


class FunctionChange(NamedTuple):
    frame: Frame
    baseline_pct: float        # total share in the baseline, %
    current_pct: float
    change_pct: float          # current - baseline, in percentage points
    self_change_pct: float     # the same for the self share


def differential(baseline: Profile, current: Profile) -> list[FunctionChange]:
    """Every function of either profile with the change of its share (total, and self), largest change
    first. Shares, not weights: a baseline of 10 s and a current of 2 s still compare."""
    before, after = _function_weights(baseline), _function_weights(current)
    b_total, c_total = baseline.total or 1.0, current.total or 1.0
    out = []
    for frame in before.keys() | after.keys():
        b_self, b_tot = before.get(frame, (0.0, 0.0))
        c_self, c_tot = after.get(frame, (0.0, 0.0))
        b_pct, c_pct = 100.0 * b_tot / b_total, 100.0 * c_tot / c_total
        out.append(FunctionChange(frame, b_pct, c_pct, c_pct - b_pct, 100.0 * (c_self / c_total - b_self / b_total)))
    out.sort(key=lambda c: (-abs(c.change_pct), -abs(c.self_change_pct), c.frame))
    return out
