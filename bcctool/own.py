"""The profiler's own processes, left out of a system-wide run: the metric script itself, the app that
started it (--app-pid: the window, the headless runner or the launcher) and every process below either
(the other metrics, sudo and the privilege helper, a local collector the launcher started). Without
this a system-wide profile's biggest "python" was the window, the workers and the collector.

The kernel does the leaving out (bpf/common.h SKIP_OWN): OwnProcesses keeps the `own_tgids` map equal
to the processes found now, once at load and again each interval (a metric started later joins at the
next), and bumps `own_gen` when the set changed. Walking the trees reads /proc/PID/task/TID/children
of the own processes only, not the whole of /proc.
"""

from __future__ import annotations

import os
from typing import Any

from .taskinfo import descendants


class OwnProcesses:
    """The processes below `roots` (this process and the app's, when given), and the BPF maps kept equal
    to them once attach() has been called."""

    def __init__(self, app_pid: int | None = None) -> None:
        self.roots = tuple(dict.fromkeys((os.getpid(), *((app_pid,) if app_pid else ()))))
        self.tgids: set[int] = set()
        self._table: Any = None
        self._generation: Any = None
        self._gen = 0

    def find(self) -> set[int]:
        """The own processes alive now (a root that has gone, and its tree, is left out)."""
        found: set[int] = set()
        for root in self.roots:
            if root not in found:
                found.update(p for p in descendants(root) if os.path.exists(f"/proc/{p}"))
        return found

    def attach(self, table: Any, generation: Any) -> None:
        """Keep the loaded program's `own_tgids` hash and `own_gen` array from now on."""
        self._table, self._generation = table, generation
        self.tgids = set()
        self.refresh()

    def refresh(self) -> bool:
        """Bring the maps up to date; True when the set changed (own_gen is then bumped)."""
        now = self.find()
        if self._table is None or now == self.tgids:
            return False
        leaf = self._table.Leaf(1)
        for tgid in now - self.tgids:
            self._table[self._table.Key(tgid)] = leaf
        for tgid in self.tgids - now:
            try:
                del self._table[self._table.Key(tgid)]
            except KeyError:
                pass
        self.tgids = now
        self._gen += 1      # from 1: a thread's cached answer of generation 0 is looked up again
        self._generation[self._generation.Key(0)] = self._generation.Leaf(self._gen)
        return True
