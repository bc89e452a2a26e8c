"""Brendan Gregg's folded format: one line per stack, frames root first joined by ';', then a space and
the weight. As BCC's `profile -a` and perf's stackcollapse write it, a kernel frame ends in "_[k]"; as
BCC's sym(show_module=True) writes it, "name [module]" is a frame in module."""

from __future__ import annotations

import re

from profile_data.model import Frame, Profile, Stack

KERNEL_SUFFIX = "_[k]"
_MODULE = re.compile(r"^(.*\S) \[([^\[\]]+)\]$")


def frame_text(frame: Frame) -> str:
    """The frame as folded text; a ';' in a name (C++ templates, JIT names) becomes ':', as it separates frames."""
    name = frame.name.replace(";", ":")
    text = f"{name} [{frame.module}]" if frame.module else name
    return text + KERNEL_SUFFIX if frame.kind == "kernel" else text


def parse_frame(text: str, root: bool = False) -> Frame:
    kind = "process" if root else "user"
    if text.endswith(KERNEL_SUFFIX):
        text, kind = text[: -len(KERNEL_SUFFIX)], "kernel"
    match = _MODULE.match(text)
    if match:
        return Frame(match.group(1), match.group(2), kind)
    return Frame(text, "", kind)


def parse_folded(text: str, unit: str = "samples", roots_are_processes: bool = True) -> Profile:
    """A Profile of folded lines; blank lines are skipped, a line without a weight is an error.
    The first frame of each line is the process (comm), as every profiler here writes it."""
    profile = Profile(unit)
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        frames, _, count = line.rpartition(" ")
        try:
            weight = float(count)
        except ValueError:
            raise ValueError(f"folded line {number}: no weight after the last space: {line[:80]!r}") from None
        parts = frames.split(";")
        profile.add(tuple(parse_frame(p, roots_are_processes and i == 0) for i, p in enumerate(parts)),
                    int(weight) if weight.is_integer() else weight)
    return profile


def folded_line(stack: Stack, weight: float) -> str:
    return f"{';'.join(frame_text(f) for f in stack)} {round(weight)}"


def to_folded(profile: Profile) -> str:
    """Every stack, heaviest first (then by its text, so the output is stable), weights rounded to
    integers in the profile's unit; '' for an empty profile."""
    lines = sorted(((-w, folded_line(s, w)) for s, w in profile.stacks.items()))
    return "".join(line + "\n" for _, line in lines)
