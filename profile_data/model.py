"""A profile: distinct stacks, each a tuple of frames root first, with a summed weight in one unit."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

UNITS = ("samples", "ns", "bytes")
KINDS = ("user", "kernel", "process", "python")
OTHER = "[other stacks]"


class Frame(NamedTuple):
    """One frame: a function (or address) name, the object it lives in ("" when unknown), and whether it
    runs in the kernel, in user space (native code, or "python": a CPython function, its file as the
    module), or is the process (comm) a stack is rooted at."""

    name: str
    module: str = ""
    kind: str = "user"


Stack = tuple[Frame, ...]


class Profile:
    """Weighted stacks in `unit`; adding a stack seen before adds to its weight."""

    def __init__(self, unit: str = "samples", stacks: Iterable[tuple[Stack, float]] = ()) -> None:
        if unit not in UNITS:
            raise ValueError(f"unit {unit!r}: one of {', '.join(UNITS)}")
        self.unit = unit
        self.stacks: dict[Stack, float] = {}
        self.total = 0.0
        for stack, weight in stacks:
            self.add(stack, weight)

    def add(self, stack: Stack, weight: float) -> None:
        if not stack or weight <= 0:
            return
        self.stacks[stack] = self.stacks.get(stack, 0) + weight
        self.total += weight

    def merge(self, other: Profile) -> Profile:
        """Add every stack of `other` (same unit) to this one; returns self."""
        if other.unit != self.unit:
            raise ValueError(f"cannot merge a profile in {other.unit} into one in {self.unit}")
        for stack, weight in other.stacks.items():
            self.add(stack, weight)
        return self

    def remove(self, stack: Stack, weight: float) -> None:
        """Take `weight` of a stack out (at most what it has); a stack left with nothing is dropped."""
        held = self.stacks.get(stack, 0)
        self.total -= min(weight, held)
        if held - weight > 0:
            self.stacks[stack] = held - weight
        else:
            self.stacks.pop(stack, None)

    def subtract(self, other: Profile) -> Profile:
        """Take every stack of `other` out of this one (a sliding window's expired interval); returns self."""
        for stack, weight in other.stacks.items():
            self.remove(stack, weight)
        return self

    def copy(self) -> Profile:
        return Profile(self.unit).merge(self)

    def trimmed(self, max_stacks: int) -> Profile:
        """At most max_stacks stacks: the heaviest kept whole, each root's rest summed under
        (root, "[other stacks]"), so the total and every process's share stay right."""
        if len(self.stacks) <= max_stacks:
            return self
        ranked = sorted(self.stacks.items(), key=lambda kv: kv[1], reverse=True)
        roots_from: list[int] = [0] * (len(ranked) + 1)     # distinct roots in ranked[i:]
        seen: set[Frame] = set()
        for i in range(len(ranked) - 1, -1, -1):
            seen.add(ranked[i][0][0])
            roots_from[i] = len(seen)
        keep = max((k for k in range(max_stacks + 1) if k + roots_from[k] <= max_stacks), default=0)
        out = Profile(self.unit, ranked[:keep])
        for stack, weight in ranked[keep:]:
            out.add((stack[0], Frame(OTHER, "", stack[0].kind)), weight)
        return out

    def __len__(self) -> int:
        return len(self.stacks)

    def __iter__(self) -> Iterator[tuple[Stack, float]]:
        return iter(self.stacks.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Profile) and other.unit == self.unit and other.stacks == self.stacks

    def __repr__(self) -> str:
        return f"Profile({self.unit!r}, {len(self.stacks)} stacks, total {self.total:g})"
