"""Names that tell processes apart: a command (comm) that several processes share, "python3", is shown
with what its command line runs, "python3 (server.py)". A system-wide view otherwise showed the window,
the collector and the user's own server as rows of a bare `python`.

A comm is shared when two processes on the machine have it as it is first met (one look at every
/proc/PID/comm for an interval that meets new comms), or once two processes with it have been seen
during the run; from then on every process with it carries its hint, so a process keeps one name across
intervals (a flame graph's root does not split). The hint is read from /proc/PID/cmdline once per
process and kept (bounded), never per event: a process is its pid and its start time (a pid is reused),
and a process gone before its command line was read is not kept as having none.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from .lrucache import BoundedCache
from .proctext import read_text

HINT_WIDTH = 40            # characters of a hint shown (a long path keeps its end)
VALUE_OPTIONS = {"-W", "-X", "-r", "--require"}   # interpreter options that take a value
RUN_OPTIONS = {"-m"}      # the next argument is what runs (python -m http.server)


def read_cmdline(pid: int) -> list[str]:
    """The process's arguments ([] for a kernel thread, or one that has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw else []


def start_time(pid: int) -> int | None:
    """When the process started (its stat's field 22, clock ticks since boot); None when it has gone."""
    text = read_text(f"/proc/{pid}/stat")
    try:
        return int(text.rsplit(")", 1)[1].split()[19]) if text else None     # [0] is field 3
    except (IndexError, ValueError):
        return None


class CommCensus:
    """How many processes have each comm now (their main thread's). A process's comm is read until two
    censuses in a row have read the same (a fork child execs just after it is born), then kept: a
    process so known (its /proc directory's inode, new for every process, tells a reused pid) is not
    read again, so a census reads the directory and the comms of the processes started lately (about
    1 ms a census became 0.2 on this machine's ~300 processes). Every FULL_S all are read again, for the
    few that exec'd or renamed themselves later in their lives."""

    FULL_S = 60.0

    def __init__(self) -> None:
        self.comms: dict[tuple[int, int], tuple[str, bool]] = {}   # (pid, /proc inode) -> (comm, read twice)
        self.full_at = 0.0

    def __call__(self) -> dict[str, int]:
        now = time.monotonic()
        known = {} if now - self.full_at >= self.FULL_S else self.comms
        if not known:
            self.full_at = now
        comms: dict[tuple[int, int], tuple[str, bool]] = {}
        found: dict[str, int] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                key = (int(entry.name), entry.inode())
                last = known.get(key)
                if last is not None and last[1]:
                    comm = last[0]
                else:
                    text = read_text(f"/proc/{entry.name}/comm")
                    if text is None:
                        continue
                    comm = text.rstrip("\n")
                comms[key] = (comm, last is not None and last[0] == comm)
                found[comm] = found.get(comm, 0) + 1
        self.comms = comms
        return found


comm_census = CommCensus()


def hint_of(argv: list[str], comm: str) -> str:
    """What a command line runs, to tell its process from others named `comm`: the script an
    interpreter runs ("server.py", the module after -m, "-c" for a command string), the title a
    program gave itself (setproctitle: "autovacuum launcher"), else the executable when its name is not
    the comm; '' when it says nothing more than the comm."""
    if not argv:
        return ""
    if " " in argv[0].strip():      # a title the program set itself ("postgres: autovacuum launcher")
        title = argv[0].strip()
        title = title[len(comm) + 1:].strip() if title.startswith(f"{comm}:") else title
        return title if len(title) <= HINT_WIDTH else title[:HINT_WIDTH - 1] + "…"
    exe = os.path.basename(argv[0])
    rest = iter(argv[1:])
    for arg in rest:
        if arg in RUN_OPTIONS:
            return _short(next(rest, ""), comm)
        if arg == "-c":
            return "-c"
        if arg in VALUE_OPTIONS:
            next(rest, None)
            continue
        if arg.startswith("-"):
            continue
        name = os.path.basename(arg.rstrip("/"))
        if "/" in arg or "." in name.lstrip("."):      # a file it runs, not a value ("forker 3")
            return _short(name, comm)
        break
    return _short(exe, comm)


def _short(text: str, comm: str) -> str:
    if text == comm:
        return ""
    return text if len(text) <= HINT_WIDTH else "…" + text[-(HINT_WIDTH - 1):]


class ProcessNames:
    """Each process's name as a view shows it: its comm, with its command line's hint once the comm is
    shared (see the module docstring). read, census, started: the cmdline reader, the machine's comm
    counts and a process's start time (tests give their own). Every table is bounded: a run meeting
    ever new comms and pids keeps the recently met."""

    def __init__(self, read: Callable[[int], list[str]] = read_cmdline,
                 census: Callable[[], dict[str, int]] = comm_census, max_processes: int = 8192,
                 started: Callable[[int], int | None] = start_time, max_comms: int = 4096) -> None:
        self._read = read
        self._census = census
        self._started = started
        self._first = BoundedCache(max_items=max_comms)      # comm -> the first process seen with it
        self._shared = BoundedCache(max_items=max_comms)     # comms two processes have had -> True
        self._hints = BoundedCache(max_items=max_processes)  # (pid, start time, comm) -> hint

    def names(self, processes: Iterable[tuple[int, str]], alive: set[int] | None = None) -> dict[tuple[int, str], str]:
        """{(pid, comm): the name shown} for the processes an interval saw; alive: the processes listed
        since (taskinfo.processes()), where the caller has them: the others are named by their comm
        without a read (a fork-heavy load leaves a hundred gone an interval)."""
        processes = set(processes)
        if any(comm not in self._first for _pid, comm in processes):
            for comm, n in self._census().items():
                if n > 1:
                    self._shared.put(comm, True, 1)
        for pid, comm in processes:
            first = self._first.get(comm)
            if first is None:
                self._first.put(comm, pid, 1)
            elif first != pid:
                self._shared.put(comm, True, 1)
        return {(pid, comm): self.name(pid, comm) if alive is None or pid in alive else comm
                for pid, comm in processes}

    def renamed(self, counts: dict[tuple, int], skip: Callable[[int], bool] = lambda pid: False,
                alive: set[int] | None = None) -> dict[tuple, int]:
        """Counts keyed (pid, comm, ...) with each comm as names() shows it, those of a pid `skip` names left out."""
        counts = {key: n for key, n in counts.items() if not skip(key[0])}
        found = self.names((key[:2] for key in counts), alive)
        return {(key[0], found[key[:2]], *key[2:]): n for key, n in counts.items()}

    def rename_rows(self, rows: list[dict]) -> None:
        """Each row's `comm` as names() shows it (rows of one process each: `pid` and `comm`)."""
        found = self.names((r["pid"], r["comm"]) for r in rows)
        for r in rows:
            r["comm"] = found[(r["pid"], r["comm"])]

    def name(self, pid: int, comm: str) -> str:
        if self._shared.get(comm) is None:
            return comm
        start = self._started(pid)
        if start is None:
            return comm   # gone: no command line to read (a fork-heavy load leaves hundreds an interval)
        key = (pid, start, comm)    # the comm in the key too: an exec renames the process, its start stays
        hint = self._hints.get(key)
        if hint is None:
            hint = hint_of(self._read(pid), comm)
            # gone meanwhile: its empty command line is not kept for the next with its pid
            if self._started(pid) == start:
                self._hints.put(key, hint, 1)
        return f"{comm} ({hint})" if hint else comm
