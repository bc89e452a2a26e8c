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

    def remove(self, stack: Stack, weight: float) -> None:
        """Take out a stack added before; nodes left with nothing are dropped."""
        path = [self]
        for frame in stack:
            child = path[-1].children.get(frame)
            if child is None:
                return
            path.append(child)
        path[-1].self_weight -= weight
        for parent, node in zip(path, path[1:], strict=False):
            node.total -= weight
            if node.total <= 0:
                del parent.children[node.frame]
                parent._ordered = None
                break
        self.total -= weight

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


class Functions:
    """Self and total weight per frame, kept up to date as stacks are added (or removed): a frame twice in
    one stack (recursion) counts once in its total; process roots are not functions."""

    def __init__(self, profile: Profile | None = None) -> None:
        self.weights: dict[Frame, list[float]] = {}
        self.total = 0.0
        for stack, weight in (profile.stacks.items() if profile else ()):
            self.add(stack, weight)

    def add(self, stack: Stack, weight: float) -> None:
        self.total += weight
        weights = self.weights
        for frame in set(stack):
            if frame.kind != "process":
                entry = weights.get(frame)
                if entry is None:
                    entry = weights[frame] = [0.0, 0.0]
                entry[1] += weight
                if entry[1] <= 0:
                    del weights[frame]
        leaf = stack[-1]
        if leaf.kind != "process" and leaf in weights:
            weights[leaf][0] += weight

    def remove(self, stack: Stack, weight: float) -> None:
        self.add(stack, -weight)

    def stats(self, limit: int | None = None) -> list[FunctionStat]:
        """By self weight, then total, heaviest first."""
        total = self.total or 1.0
        stats = [FunctionStat(f, s, t, 100.0 * s / total, 100.0 * t / total) for f, (s, t) in self.weights.items()]
        stats.sort(key=lambda s: (-s.self_weight, -s.total_weight, s.frame))
        return stats[:limit] if limit is not None else stats


def top_functions(profile: Profile, limit: int | None = None) -> list[FunctionStat]:
    """Every function of the profile by self weight, then total, heaviest first."""
    return Functions(profile).stats(limit)


class FunctionChange(NamedTuple):
    frame: Frame
    baseline_pct: float        # total share in the baseline, %
    current_pct: float
    change_pct: float          # current - baseline, in percentage points
    self_change_pct: float     # the same for the self share
    baseline_self_pct: float = 0.0   # self share in the baseline, %
    current_self_pct: float = 0.0


def differential(baseline: Profile | Functions, current: Profile | Functions,
                 limit: int | None = None) -> list[FunctionChange]:
    """Every function of either profile with the change of its share (total, and self), largest change
    first. Shares, not weights: a baseline of 10 s and a current of 2 s still compare."""
    before = baseline if isinstance(baseline, Functions) else Functions(baseline)
    after = current if isinstance(current, Functions) else Functions(current)
    b_total, c_total = before.total or 1.0, after.total or 1.0
    out = []
    for frame in before.weights.keys() | after.weights.keys():
        b_self, b_tot = before.weights.get(frame, (0.0, 0.0))
        c_self, c_tot = after.weights.get(frame, (0.0, 0.0))
        b_pct, c_pct = 100.0 * b_tot / b_total, 100.0 * c_tot / c_total
        b_self_pct, c_self_pct = 100.0 * b_self / b_total, 100.0 * c_self / c_total
        out.append(FunctionChange(frame, b_pct, c_pct, c_pct - b_pct, c_self_pct - b_self_pct, b_self_pct, c_self_pct))
    out.sort(key=lambda c: (-abs(c.change_pct), -abs(c.self_change_pct), c.frame))
    return out[:limit] if limit is not None else out
