"""The views of a profile besides its flame graph, shared by the window and the collector: the stacks as
people read them (a Python program's own frames, a block's site), the bottom-up tree, the sandwich of
one function (its callers and its callees) with the butterfly table of that function's direct callers
and callees, and the top functions of the part of a call tree that is zoomed on or searched for.

    simplify(stack, interpreter=False, scheduler=True) -> Stack
        interpreter False: a stack that runs Python code keeps its Python frames, the native frames
        outside the interpreter between and after them (C extensions, libc) and its native leaf; the
        interpreter's own frames (python3.x, libpython3.x) and every native frame before the first
        Python one (_start ... _PyEval_EvalFrameDefault) go. scheduler False: the scheduler's frames
        at the end of a stack (__schedule, schedule, schedule_timeout, ...) go, so the stack ends at the
        frame that blocked (off-CPU profiles). A stack with neither is returned as it is.
    simplified(profile, interpreter, scheduler) -> Profile
    tree_stacks(root) -> [(Stack, weight)]   the stacks a call tree holds (its nodes' self weights)
    bottom_up(profile) -> Node            roots: the functions stacks end in (total: their self weight);
                                          a node's children: its callers
    sandwich(profile, frame) -> Sandwich  (either of a Profile or of a call tree) callers: root -> frame -> its callers -> theirs ...; callees:
                                          root -> frame -> its callees; each stack through frame once
                                          (at its outermost occurrence, so recursion counts once)
    Sandwich.callers_of() / .callees_of() -> [(Frame, weight)]   the butterfly: direct callers and callees
    functions_in(root, path=(), search="") -> Functions   self and total per frame of the stacks under
                                          the node at `path` that hold a frame whose name has `search`
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from profile_data.model import Frame, Profile, Stack
from profile_data.tree import Functions, Node

# the interpreter's objects as frames name them (the file's base name): python3.11, libpython3.11.so.1.0
INTERPRETER = re.compile(r"^(lib)?python\d+(\.\d+)*[a-z]*(\.so[.\d]*)?$")
# the scheduler's path from a blocking call to the switch (a ".isra.0" / ".constprop.0" part cut first)
SCHEDULER = re.compile(r"^_*((io|preempt)_)?schedule(_\w+)?$|^_*cond_resched$")
NOT_FUNCTIONS = ("process", "root")


def is_interpreter(frame: Frame) -> bool:
    return frame.kind == "user" and bool(INTERPRETER.match(frame.module))


def is_scheduler(frame: Frame) -> bool:
    return frame.kind == "kernel" and bool(SCHEDULER.match(frame.name.split(".", 1)[0]))


def simplify(stack: Stack, interpreter: bool = False, scheduler: bool = True) -> Stack:
    if not scheduler:
        end = len(stack)
        while end > 2 and is_scheduler(stack[end - 1]):
            end -= 1
        stack = stack[:end]
    if interpreter:
        return stack
    first = next((i for i, f in enumerate(stack) if f.kind == "python"), None)
    if first is None:
        return stack
    leaf = max((i for i, f in enumerate(stack) if f.kind in ("user", "python")), default=first)
    kept = [f for i, f in enumerate(stack[first:], first)
            if f.kind != "user" or i == leaf or not is_interpreter(f)]
    return (*stack[:1], *kept) if stack[0].kind == "process" else tuple(kept)


def simplified(profile: Profile, interpreter: bool = False, scheduler: bool = True) -> Profile:
    if interpreter and scheduler:
        return profile
    out = Profile(profile.unit)
    for stack, weight in profile.stacks.items():
        out.add(simplify(stack, interpreter, scheduler), weight)
    return out


def tree_stacks(root: Node) -> Iterator[tuple[Stack, float]]:
    todo: list[tuple[Node, Stack]] = [(c, (c.frame,)) for c in root.children.values()]
    while todo:
        node, stack = todo.pop()
        if node.self_weight > 0:
            yield stack, node.self_weight
        todo.extend((c, (*stack, c.frame)) for c in node.children.values())


def _stacks(source: Profile | Node) -> Iterable[tuple[Stack, float]]:
    return tree_stacks(source) if isinstance(source, Node) else source.stacks.items()


def bottom_up(source: Profile | Node) -> Node:
    root = Node()
    for stack, weight in _stacks(source):
        root.add(stack[::-1], weight)
    return root


class Sandwich(NamedTuple):
    frame: Frame
    callers: Node        # ROOT -> frame -> callers (outward)
    callees: Node        # ROOT -> frame -> callees (inward)

    @property
    def total(self) -> float:
        return self.callees.total

    @property
    def self_weight(self) -> float:
        node = self.callees.child(self.frame)
        return node.self_weight if node is not None else 0.0

    def callers_of(self) -> list[tuple[Frame, float]]:
        """The frame's direct callers with the weight of the stacks through each, heaviest first."""
        return _heaviest(self.callers.child(self.frame))

    def callees_of(self) -> list[tuple[Frame, float]]:
        return _heaviest(self.callees.child(self.frame))


def _heaviest(node: Node | None) -> list[tuple[Frame, float]]:
    children = node.children.values() if node is not None else ()
    return sorted(((c.frame, c.total) for c in children), key=lambda fw: (-fw[1], fw[0]))


def sandwich(source: Profile | Node, frame: Frame) -> Sandwich:
    callers, callees = Node(), Node()
    for stack, weight in _stacks(source):
        try:
            at = stack.index(frame)
        except ValueError:
            continue
        callers.add(stack[at::-1], weight)
        callees.add(stack[at:], weight)
    return Sandwich(frame, callers, callees)


def functions_in(root: Node, path: Sequence[Frame] = (), search: str = "") -> Functions:
    """The top functions of the zoomed node's stacks (those through `path`, as far as the tree has it),
    of only those that hold a match when `search` is given: a match's callers and callees all count."""
    node, above = root, []
    for frame in path:
        child = node.child(frame)
        if child is None:
            break
        above.append(node.frame)
        node = child
    needle = search.strip().lower()
    if not needle or any(needle in f.name.lower() for f in (*above, node.frame) if f.kind not in NOT_FUNCTIONS):
        selected = [(node, above)]
    else:
        selected, todo = [], [(c, [*above, node.frame]) for c in node.children.values()]
        while todo:
            n, frames = todo.pop()
            if needle in n.frame.name.lower():
                selected.append((n, frames))
            else:
                todo.extend((c, [*frames, n.frame]) for c in n.children.values())
    out = Functions()
    for top, frames in selected:
        _add_subtree(out, top, frames)
    return out


def _add_subtree(out: Functions, top: Node, above: list[Frame]) -> None:
    """Every stack through `top` into `out`: the frames above it once each, the nodes below by their own
    weights; a frame already on the path (recursion) adds no total again."""
    weights = out.weights
    out.total += top.total
    on_path: dict[Frame, int] = {}
    for frame in set(above):
        on_path[frame] = 1
        if frame.kind not in NOT_FUNCTIONS:
            weights.setdefault(frame, [0.0, 0.0])[1] += top.total
    todo: list[tuple[Node, bool]] = [(top, True)]
    while todo:
        n, entering = todo.pop()
        frame = n.frame
        if not entering:
            on_path[frame] -= 1
            continue
        if frame.kind not in NOT_FUNCTIONS:
            entry = weights.setdefault(frame, [0.0, 0.0])
            entry[0] += n.self_weight
            if not on_path.get(frame):
                entry[1] += n.total
        on_path[frame] = on_path.get(frame, 0) + 1
        todo.append((n, False))
        todo.extend((c, True) for c in n.children.values())

