"""What the profiler itself costs: per BPF program its metrics hold, run count, average run time and CPU
share, from the kernel's own bpf_stats (the numbers bpftop shows). No Qt here: host/bpf_sampler.py
samples these once a second for the window's overhead panel.

bpf_stats is off by default because it costs a little per run. BpfStatsSwitch turns it on while the app
monitors — by holding a BPF_ENABLE_STATS fd, which the kernel releases even if the app is killed, or else
through the sysctl, restored afterwards — and back to how it was. Numbers come from /proc/PID/fdinfo of
the metric process (a bpf-prog fd lists run_time_ns and run_cnt): local file reads, no subprocess; bpftool
(off the GUI thread) fills in program names and what fdinfo cannot show.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import platform
import subprocess
from dataclasses import dataclass

from host.fdinfo import fd_infos

SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
BPF_ENABLE_STATS = 32                           # enum bpf_cmd
BPF_STATS_RUN_TIME = 0                          # enum bpf_stats_type
BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "armv7l": 386, "ppc64le": 361, "s390x": 351}
PROG_TYPES = {1: "socket_filter", 2: "kprobe", 5: "tracepoint", 6: "xdp", 7: "perf_event", 17: "raw_tracepoint",
              24: "raw_tracepoint_w", 26: "tracing"}


def enable_stats_fd() -> int | None:
    """An fd that keeps the kernel's run-time stats on while it is open (Linux 5.8+, CAP_SYS_ADMIN)."""
    number = BPF_SYSCALL.get(platform.machine())
    if number is None:
        return None
    attr = (ctypes.c_uint32 * 4)(BPF_STATS_RUN_TIME, 0, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(number, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    return fd if fd >= 0 else None


class BpfStatsSwitch:
    """bpf_stats on while monitoring, then as it was before. `state` says how, for the panel."""

    def __init__(self, sysctl: str = SYSCTL) -> None:
        self.sysctl = sysctl
        self.state = "off"
        self._fd: int | None = None
        self._previous: str | None = None       # the sysctl value to write back
        self._registered = False

    @property
    def active(self) -> bool:
        return self._fd is not None or self._previous is not None or self.state.startswith("on (already")

    def enable(self) -> str:
        if self.active:
            return self.state
        self._fd = enable_stats_fd()
        if self._fd is not None:
            self.state = "on (held by the app; off again when it stops)"
        else:
            self._enable_sysctl()
        if not self._registered:
            atexit.register(self.restore)        # also restored when the app exits through an error
            self._registered = True
        return self.state

    def _enable_sysctl(self) -> None:
        try:
            with open(self.sysctl) as f:
                previous = f.read().strip()
            if previous == "1":
                self.state = "on (already on before the app)"
                return
            with open(self.sysctl, "w") as f:
                f.write("1")
            self._previous = previous
            self.state = f"on (sysctl; back to {previous} when monitoring stops)"
        except OSError as exc:
            self.state = f"unavailable: {exc.strerror or exc} (needs root)"

    def restore(self) -> None:
        """Back to how it was before enable(); safe to call any number of times."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._previous is not None:
            try:
                with open(self.sysctl, "w") as f:
                    f.write(self._previous)
            except OSError:
                pass
            self._previous = None
        self.state = "off"


@dataclass
class ProgStat:
    id: int
    run_time_ns: int
    run_cnt: int
    type: str = ""
    name: str = ""


def prog_stats_of_pid(pid: int) -> dict[int, ProgStat] | None:
    """The BPF programs process `pid` holds, with their counters; None when its fdinfo is unreadable."""
    infos = fd_infos(pid)
    if infos is None:
        return None
    stats: dict[int, ProgStat] = {}
    for fields in infos:
        if "run_time_ns" not in fields:           # not a bpf-prog fd (links also name a prog_id)
            continue
        try:
            prog_id = int(fields["prog_id"])
            type_no = int(fields.get("prog_type", "0"))
            stats[prog_id] = ProgStat(prog_id, int(fields["run_time_ns"]), int(fields["run_cnt"]),
                                      PROG_TYPES.get(type_no, str(type_no)))
        except (KeyError, ValueError):
            continue
    return stats


def prog_stats_bpftool(elevate: list[str] | None = None, timeout: float = 5.0) -> dict[int, ProgStat]:
    """Every loaded program from `bpftool prog show -j` (a subprocess: never on the GUI thread)."""
    try:
        out = subprocess.run([*(elevate or []), "bpftool", "prog", "show", "-j"], capture_output=True,
                             text=True, timeout=timeout, stdin=subprocess.DEVNULL).stdout
        progs = json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {p["id"]: ProgStat(p["id"], p.get("run_time_ns", 0), p.get("run_cnt", 0), p.get("type", ""),
                              p.get("name", "")) for p in progs if isinstance(p, dict) and "id" in p}


class OverheadTracker:
    """Turns counter samples into rates: runs/s, average ns per run and CPU share over the last period."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, int, int]] = {}

    def rows(self, now: float, stats: dict[str, dict[int, ProgStat]]) -> list[dict]:
        rows, seen = [], {}
        for metric, progs in sorted(stats.items()):
            for prog_id, s in sorted(progs.items()):
                row = {"metric": metric, "id": prog_id, "name": s.name, "type": s.type, "run_cnt": s.run_cnt,
                       "run_time_ns": s.run_time_ns, "runs_per_s": None, "cpu_pct": None,
                       "avg_ns": s.run_time_ns / s.run_cnt if s.run_cnt else None}
                last = self._last.get(prog_id)
                if last and now > last[0] and s.run_cnt >= last[2]:
                    dt = now - last[0]
                    d_time, d_cnt = s.run_time_ns - last[1], s.run_cnt - last[2]
                    row["runs_per_s"] = d_cnt / dt
                    row["cpu_pct"] = 100.0 * d_time / (dt * 1e9)
                    if d_cnt:
                        row["avg_ns"] = d_time / d_cnt
                seen[prog_id] = (now, s.run_time_ns, s.run_cnt)
                rows.append(row)
        self._last = seen
        return rows
