"""The kernel's view during a benchmark: other people's tracing programs (they slow every event on the
machine while loaded), and each BPF program's own run time from kernel.bpf_stats_enabled."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable

from harness import prog_ids_of

_SYSCALL_PROG = re.compile(r"sys_(enter|exit)|raw_syscalls")


_TRACING_TYPES = {"tracepoint", "raw_tracepoint", "perf_event", "kprobe", "tracing", "raw_tracepoint_writable"}


def foreign_progs(own_pids: Iterable[int] = (), syscalls_only: bool = False) -> set[int]:
    """Tracing BPF programs other people have loaded right now (another engineer's test slows every
    traced event on the machine while it runs)."""
    own: set[int] = set()
    for pid in own_pids:
        own |= prog_ids_of(pid)
    try:
        out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {p["id"] for p in json.loads(out or "[]")
            if p["id"] not in own and p.get("type") in _TRACING_TYPES
            and (not syscalls_only or _SYSCALL_PROG.search(p.get("name", "")))}


class Quiet:
    """Runs a measurement again (up to `retries` times) when someone else's tracing program came or
    went while it ran, and counts how many measurements still overlapped one."""

    def __init__(self, syscalls_only: bool, retries: int = 2) -> None:
        self.syscalls_only = syscalls_only
        self.retries = retries
        self.retried = 0
        self.overlapped = 0

    def run(self, measure: Callable[[], float], own_pids: Iterable[int] = ()) -> float:
        own_pids = list(own_pids)
        for attempt in range(self.retries + 1):
            before = foreign_progs(own_pids, self.syscalls_only)
            value = measure()
            after = foreign_progs(own_pids, self.syscalls_only)
            if before == after or attempt == self.retries:
                break
            self.retried += 1
            time.sleep(1)
        if before or after:
            self.overlapped += 1
        return value

    def note(self) -> dict:
        return {"retried_runs": self.retried, "runs_with_foreign_tracers": self.overlapped}


def quiet_note(result: dict) -> str:
    """The sentence a table ends with when other people's tracers were running."""
    q = result.get("interference") or {}
    if not q.get("runs_with_foreign_tracers") and not q.get("retried_runs"):
        return ""
    return (f"\n\nOther people's tracing programs were loaded during {q['runs_with_foreign_tracers']} run(s) "
            f"(they slow every configuration they overlap); {q['retried_runs']} run(s) were repeated because one "
            f"was loaded or unloaded mid-run.")


class BpfStats:
    """The kernel's own per-program run time (kernel.bpf_stats_enabled) over a block of code, for the
    given program ids: {id: {"name", "runs", "ns_per_run"}}. Turning stats on adds two clock reads to
    every program run, so it is only ever used in a separate profiling pass, never in a timed one."""

    SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"

    def __init__(self, prog_ids: set[int]) -> None:
        self.ids = prog_ids
        self.result: dict[int, dict] = {}

    def _snapshot(self) -> dict[int, tuple[str, int, int]]:
        out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
        return {p["id"]: (p.get("name", ""), p.get("run_cnt", 0), p.get("run_time_ns", 0))
                for p in json.loads(out or "[]") if p["id"] in self.ids}

    def __enter__(self) -> BpfStats:
        with open(self.SYSCTL) as f:
            self._was = f.read().strip()
        with open(self.SYSCTL, "w") as f:
            f.write("1")
        self._before = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        after = self._snapshot()
        with open(self.SYSCTL, "w") as f:
            f.write(self._was)
        for pid, (name, cnt, ns) in after.items():
            _, cnt0, ns0 = self._before.get(pid, (name, 0, 0))
            runs = cnt - cnt0
            self.result[pid] = {"name": name, "runs": runs, "ns_per_run": round((ns - ns0) / runs, 1) if runs else None}
