"""What a -p/--tid/--ppid or a device argument must name: checked before anything loads, and for a
traced process or thread, again each interval (Tool ends the run after the interval it exited in)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .proctext import read_text  # stat and status hold the comm


def task_alive(tid: int) -> bool:
    """A process or thread that exists and has not exited (a zombie has: its state is Z or X)."""
    text = read_text(f"/proc/{tid}/stat")
    return text is not None and text[text.rindex(")") + 2] not in "ZX"


def process_alive(pid: int) -> bool:
    """task_alive, and `pid` is a process (a thread group leader), not one of its other threads."""
    try:
        tgid = next(int(line.split()[1]) for line in (read_text(f"/proc/{pid}/status") or "").splitlines()
                    if line.startswith("Tgid:"))
    except (StopIteration, ValueError):
        return False
    return tgid == pid and task_alive(pid)


TARGET_CHECKS: dict[str, Callable[[Any], bool]] = {
    "process": process_alive,
    "thread": task_alive,
    "network device": lambda name: _sys_entry("/sys/class/net", name) or _in_any_netns(name),
    "block device": lambda name: _sys_entry("/sys/class/block", name),
}

# the checks that read a file or two, cheap enough for the app's form to run as a value is typed (a
# network device's may walk every process's namespace)
QUICK_TARGETS = frozenset({"process", "thread", "block device"})


def _sys_entry(directory: str, name: str) -> bool:
    return "/" not in name and name not in (".", "..") and os.path.exists(os.path.join(directory, name))


def _in_any_netns(name: str) -> bool:
    """A device of another network namespace: the tracepoints see every namespace's devices, so a
    name is a real target if any namespace that has a process has it (/proc/PID/net/dev, one process
    per namespace)."""
    seen: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/net").st_ino
            if ns in seen:
                continue
            seen.add(ns)
            with open(f"/proc/{entry.name}/net/dev") as f:
                if any(line.split(":", 1)[0].strip() == name for line in f if ":" in line):
                    return True
        except OSError:
            continue
    return False
