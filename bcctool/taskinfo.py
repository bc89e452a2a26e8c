"""What /proc says about a thread: its thread group, name, scheduling parameters and counters.

BPF here reads tracepoint fields only, which carry thread ids; these fill in what the fields lack (the
process a thread belongs to, the parameters a thread had before tracing started) and give the tests
their ground truth. Every function returns None (or empty) for a thread that has gone.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

from .proctext import read_text  # a thread's status, stat and comm hold its comm


@functools.lru_cache(maxsize=4096)
def comm_text(comm: bytes) -> str:
    """A task's comm as BPF's bpf_get_current_comm() fills it (16 bytes, NUL-padded), as text: a
    profiler's keys repeat a few comms hundreds of times an interval."""
    return comm.split(b"\0", 1)[0].decode(errors="replace")


def thread_ids(pid: int) -> list[int]:
    """Thread ids of process `pid` ([] when it has gone)."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """pid and every process below it (e.g. sudo's child), from /proc/PID/task/TID/children (the
    app's metric processes; the profiler's own, bcctool/own.py)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
    return found


def all_threads() -> Iterator[tuple[int, int]]:
    """(tgid, tid) of every thread alive now."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            for tid in thread_ids(int(entry)):
                yield int(entry), tid


def processes() -> set[int]:
    """The tgids of every process now: one read of /proc, where a stat per known process costs more once
    there are more than a few."""
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


def _thread_file(tid: int, name: str) -> str | None:
    # /proc/TID/task/TID is the thread's own view for any thread; /proc/TID sums some fields per process
    return read_text(f"/proc/{tid}/task/{tid}/{name}")


def status(tid: int) -> dict[str, str]:
    """/proc/.../status of thread `tid` as {key: value}."""
    text = _thread_file(tid, "status") or ""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def tgid_of(tid: int) -> int | None:
    text = _thread_file(tid, "status")   # only its Tgid: line, not a dict of all fifty
    at = text.find("\nTgid:") if text is not None else -1
    if at < 0:
        return None
    end = text.find("\n", at + 1)
    return int(text[at + 6:end if end >= 0 else None])


def comm_of(tid: int) -> str | None:
    text = _thread_file(tid, "comm")
    return text.strip() if text is not None else None


def stat(tid: int) -> dict[str, int] | None:
    """Scheduling fields of the thread's stat: ppid, prio (kernel priority), nice, cpu, rt_priority,
    policy (the SCHED_* number)."""
    text = _thread_file(tid, "stat")
    if not text:
        return None
    rest = text.rsplit(")", 1)[1].split()   # rest[0] is field 3 (state): field n is rest[n - 3]
    try:
        return {"ppid": int(rest[1]), "prio": int(rest[15]), "nice": int(rest[16]), "cpu": int(rest[36]),
                "rt_priority": int(rest[37]), "policy": int(rest[38])}
    except (IndexError, ValueError):
        return None


def runnable(tid: int) -> bool:
    """The thread exists and is running or waiting for a CPU (state R in its stat)."""
    text = _thread_file(tid, "stat")
    return bool(text) and text.rsplit(")", 1)[1].split()[:1] == ["R"]


def schedstat(tid: int) -> tuple[int, int, int] | None:
    """(on-CPU ns, run-queue wait ns, timeslices) from the thread's schedstat."""
    text = _thread_file(tid, "schedstat")
    if not text:
        return None
    run, wait, slices = (int(x) for x in text.split()[:3])
    return run, wait, slices


def pid_max() -> int:
    """The kernel's largest pid plus one (/proc/sys/kernel/pid_max); 0 when it cannot be read."""
    text = read_text("/proc/sys/kernel/pid_max")
    try:
        return int(text) if text else 0
    except ValueError:
        return 0
