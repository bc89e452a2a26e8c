"""The overhead panel's sampler: once a second, on its own thread, the bpf_stats counters of every
running metric's programs (host/bpf_stats.py reads and turns them into rates), handed to the GUI
through a signal."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Signal

from host.bpf_stats import OverheadTracker, ProgStat, prog_stats_bpftool, prog_stats_of_pid
from host.elevation import command_for_this_user


class OverheadSampler(QObject):
    """Samples once a second on its own thread; `sampled` carries the rows and a one-line summary.

    The GUI calls set_targets({metric: (pid or None, prog ids)}) from its own timer: pids come from each
    metric's meta record, ids from the controller."""

    sampled = Signal(object, str)             # rows (list of dicts, handed over as is), summary line

    def __init__(self, period: float = 1.0, elevate: list[str] | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.period = period
        self.elevate = command_for_this_user() if elevate is None else elevate   # as the controller starts metrics
        self._targets: dict[str, tuple[int | None, set[int]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._names: dict[int, tuple[str, str]] = {}
        self._tracker = OverheadTracker()

    def set_targets(self, targets: dict[str, tuple[int | None, set[int]]]) -> None:
        with self._lock:
            self._targets = {m: (pid, set(ids)) for m, (pid, ids) in targets.items()}

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="bpf-overhead", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            rows, summary = self.sample()
            if not self._stop.is_set():
                self.sampled.emit(rows, summary)

    def sample(self) -> tuple[list[dict], str]:
        """One sample of every target (also callable directly, e.g. from tests)."""
        with self._lock:
            targets = dict(self._targets)
        now = time.monotonic()
        stats: dict[str, dict[int, ProgStat]] = {}
        missing: set[int] = set()
        for metric, (pid, ids) in targets.items():
            progs = prog_stats_of_pid(pid) if pid else None
            progs = {i: s for i, s in (progs or {}).items() if not ids or i in ids}
            stats[metric] = progs
            missing |= {i for i in ids if i not in progs}
            missing |= {i for i in progs if i not in self._names}
        if missing:
            self._fill_from_bpftool(stats, targets, missing)
        for progs in stats.values():
            for prog_id, s in progs.items():
                name, kind = self._names.get(prog_id, ("", ""))
                s.name = s.name or name
                s.type = kind or s.type
        rows = self._tracker.rows(now, stats)
        cpu = sum(r["cpu_pct"] or 0.0 for r in rows)
        runs = sum(r["runs_per_s"] or 0.0 for r in rows)
        summary = f"{len(rows)} programs, {runs:,.0f} runs/s, {cpu:.2f}% of one CPU" if rows else ""
        return rows, summary

    def _fill_from_bpftool(self, stats: dict[str, dict[int, ProgStat]],
                           targets: dict[str, tuple[int | None, set[int]]], wanted: set[int]) -> None:
        listed = prog_stats_bpftool(self.elevate)
        for prog_id, s in listed.items():
            self._names[prog_id] = (s.name, s.type)
        for metric, (_, ids) in targets.items():
            for prog_id in ids & wanted:
                if prog_id not in stats[metric] and prog_id in listed:
                    stats[metric][prog_id] = listed[prog_id]
        for prog_id in wanted - listed.keys():
            self._names.setdefault(prog_id, ("", ""))   # gone or unreadable: do not ask again each second
