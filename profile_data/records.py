"""Profiles from metric records: the stack records of offcpu and compmem (kind "row", level "stack",
kernel_frames and user_frames innermost first, as BCC walks them) and cpuprofile (kind "stack", frames
root first, each {"name", "module", "kind"}). Every stack is rooted at its process name (comm). Names
are read demangled (a session recorded before the symbolizer demangled reads as one after)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from bcctool.demangle import demangle
from profile_data.folded import parse_frame
from profile_data.model import Frame, Profile, Stack

# a CPython function as bcctool/pyframes.py names it, "qualname (file:line)", where a record's frames are
# text (offcpu's user_frames: a Python frame has no [module]; a native frame always has one)
PYTHON_NAME = re.compile(r"^\S.* \([^()\[\]]+:(\d+|\?)\)$")
# a weight field's unit, by its suffix, to the profile unit's ns
TIME_SCALE = {"_ns": 1, "_us": 1_000, "_ms": 1_000_000, "_s": 1_000_000_000}


@lru_cache(maxsize=1 << 16)
def _frame(text: str, kind: str) -> Frame:
    """One frame per distinct text (records repeat the same frames every interval)."""
    frame = parse_frame(text)
    if kind == "user" and not frame.module and PYTHON_NAME.match(frame.name):
        kind = "python"
    return frame._replace(name=demangle(frame.name), kind=kind)


def _dict_frame(value: Mapping) -> Frame:
    kind = value.get("kind") or ("kernel" if value.get("kernel") else "user")
    return Frame(demangle(str(value.get("name") or "[unknown]")), str(value.get("module") or ""),
                 kind if kind in ("kernel", "user", "python") else "user")


def is_stack_record(record: Mapping) -> bool:
    kind = record.get("kind")
    return kind == "stack" or (kind == "row" and record.get("level") == "stack")


def stack_of(record: Mapping) -> Stack | None:
    """The record's stack, root first: comm, then user frames outermost first, then kernel frames
    (a syscall's kernel stack sits on top of the user code that made it); None for a record without one."""
    if not is_stack_record(record):
        return None
    return frames_stack(record, record.get("comm"))


def frames_stack(fields: Mapping, comm: object) -> Stack | None:
    """The stack of a stack record's frame fields (frames, or user_frames and kernel_frames) rooted at
    its comm; None when they hold no frame."""
    frames: list[Frame] = []
    listed = fields.get("frames")
    if isinstance(listed, list) and all(isinstance(f, Mapping) for f in listed):
        frames = [_dict_frame(f) for f in listed]
    else:
        for field, kind in (("user_frames", "user"), ("kernel_frames", "kernel")):
            value = fields.get(field)
            if isinstance(value, list):
                frames.extend(_frame(str(f), kind) for f in reversed(value))
    if not frames:
        return None
    root = Frame(str(comm) if comm else "[unknown]", "", "process")
    return (root, *frames)


def profile_unit(chart_unit: str) -> str:
    """The profile unit for a chart's unit: times become ns, bytes stay bytes, the rest are samples."""
    if chart_unit in ("ns", "us", "ms", "s"):
        return "ns"
    return "bytes" if chart_unit == "bytes" else "samples"


def weight_scale(field: str, unit: str) -> int | None:
    """What a weight field's value is multiplied by (then rounded to an integer) in the profile's unit:
    a time field (…_ms, …_us, …_s) to ns; None: taken as it is."""
    if unit != "ns":
        return None
    return TIME_SCALE[next((s for s in TIME_SCALE if field.endswith(s)), "_ns")]


def weight_of(record: Mapping, field: str, unit: str) -> float | None:
    """record[field] in the profile's unit (weight_scale); None when it is no number."""
    value: Any = record.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    scale = weight_scale(field, unit)
    return value if scale is None else round(value * scale)


def from_records(records: Iterable[Mapping], weight: str, unit: str) -> Profile:
    """A Profile of every stack record in `records`, each weighted by record[weight]."""
    profile = Profile(unit)
    for record in records:
        stack = stack_of(record)
        value = weight_of(record, weight, unit) if stack else None
        if stack and value:
            profile.add(stack, value)
    return profile
