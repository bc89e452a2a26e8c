"""What the running metrics cost, read once a second: the bpf_stats counters of every metric's programs
(host/bpf_stats.py reads and turns them into rates), then per metric a subtotal row — its programs'
kernel CPU beside its own process's CPU and PSS (host/proc_cost.py) — and a row for the app itself. An
app that is not root asks the privilege helper for its root metrics' counters (host/helper_stats.py).
No Qt: the window's overhead panel (host/bpf_sampler.py) and the headless budget (monitor/headless.py)
both read through it, each on a SamplingThread of its own, as reading may wait on bpftool or the helper.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from host.bpf_stats import OverheadTracker, ProgStat, prog_stats_bpftool, prog_stats_of_pid
from host.elevation import command_for_this_user
from host.helper_stats import HelperStats
from host.proc_cost import ProcessCost

Targets = dict[str, tuple[int | None, set[int]]]     # metric -> (its script's pid or None, its prog ids)


def _sum(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class OverheadReader:
    """set_targets() from the owner's thread, sample() from one reading thread."""

    def __init__(self, elevate: list[str] | None = None) -> None:
        self.elevate = command_for_this_user() if elevate is None else elevate   # as the controller starts metrics
        self.helper = HelperStats(self.elevate) if self.elevate else None
        self._targets: Targets = {}
        self._lock = threading.Lock()
        self._names: dict[int, tuple[str, str]] = {}
        self._tracker = OverheadTracker()
        self._cost = ProcessCost()

    def set_targets(self, targets: Targets) -> None:
        with self._lock:
            self._targets = {m: (pid, set(ids)) for m, (pid, ids) in targets.items()}

    @property
    def stats_state(self) -> str:
        """How bpf_stats is on, when the privilege helper holds it (an app that is not root); else ""."""
        return self.helper.state if self.helper else ""

    def close(self) -> None:
        if self.helper:
            self.helper.close()

    def sample(self) -> tuple[list[dict], str]:
        """One sample of every target: the rows (each program's, then its metric's subtotal; the app's
        last) and a one-line summary."""
        with self._lock:
            targets = dict(self._targets)
        now = time.monotonic()
        stats: dict[str, dict[int, ProgStat]] = {}
        missing: set[int] = set()
        if self.helper:
            pids = {pid for pid, _ in targets.values() if pid}
            if not pids:
                self.helper.close()          # no metric runs: bpf_stats off again
            by_pid = self.helper.stats_of(pids) if pids else {}
            stats = {metric: by_pid.get(pid, {}) for metric, (pid, _) in targets.items()}
        for metric, (pid, ids) in () if self.helper else targets.items():
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
        totals = self.subtotals(now, targets, rows)
        user = sum(r["proc_cpu_pct"] or 0.0 for r in totals)
        pss = sum(r["pss_bytes"] or 0 for r in totals)
        costs = f"processes {user:.1f}% of one CPU, PSS {pss / 2**20:,.1f} MiB (the metrics and this window)"
        ordered = [r for t in totals for r in (*(p for p in rows if p["metric"] == t["metric"]), t)]
        return ordered, f"{summary}; {costs}" if summary else costs

    def subtotals(self, now: float, targets: Targets, rows: list[dict]) -> list[dict]:
        """A row per metric (its programs' kernel CPU, its process's CPU and PSS, and their sum) and one
        for this app; their `type` is "subtotal" and "app", their `id` None."""
        found, pids = [], {os.getpid()}
        for metric, (pid, _) in sorted(targets.items()):
            progs = [r for r in rows if r["metric"] == metric]
            measured = [r["cpu_pct"] for r in progs if r["cpu_pct"] is not None]
            cost = self._cost.sample(pid, now) if pid else {"proc_cpu_pct": None, "pss_bytes": None}
            pids.add(pid or 0)
            bpf = sum(measured) if measured else None
            found.append({"metric": metric, "id": None, "name": f"{len(progs)} programs and the process",
                          "type": "subtotal", "run_cnt": None, "avg_ns": None,
                          "runs_per_s": sum(r["runs_per_s"] or 0.0 for r in progs) if measured else None,
                          "cpu_pct": bpf, **cost, "total_cpu_pct": _sum(bpf, cost["proc_cpu_pct"])})
        app = self._cost.sample(os.getpid(), now)
        found.append({"metric": "(this app)", "id": None, "name": "the window's process", "type": "app",
                      "run_cnt": None, "avg_ns": None, "runs_per_s": None, "cpu_pct": None, **app,
                      "total_cpu_pct": app["proc_cpu_pct"]})
        self._cost.forget_others(pids)
        return found

    def _fill_from_bpftool(self, stats: dict[str, dict[int, ProgStat]], targets: Targets, wanted: set[int]) -> None:
        listed = prog_stats_bpftool(self.elevate)
        for prog_id, s in listed.items():
            self._names[prog_id] = (s.name, s.type)
        for metric, (_, ids) in targets.items():
            for prog_id in ids & wanted:
                if prog_id not in stats[metric] and prog_id in listed:
                    stats[metric][prog_id] = listed[prog_id]
        for prog_id in wanted - listed.keys():
            self._names.setdefault(prog_id, ("", ""))   # gone or unreadable: do not ask again each second


class SamplingThread:
    """Calls reader.sample() every `period` seconds on a thread of its own and hands each result to
    `deliver(rows, summary)` on that thread (the owner relays it to its own)."""

    def __init__(self, reader: OverheadReader, deliver: Callable[[list[dict], str], None], period: float = 1.0) -> None:
        self.reader, self.deliver, self.period = reader, deliver, period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="bpf-overhead", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            rows, summary = self.reader.sample()
            if not self._stop.is_set():
                self.deliver(rows, summary)
