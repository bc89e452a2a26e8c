"""What a process costs in user space, for the overhead panel beside its BPF programs' kernel time: CPU
(utime + stime from /proc/PID/stat, as a share of one CPU over the last period) and memory as PSS (its
private pages plus its share of the shared ones, from /proc/PID/smaps_rollup). Local file reads only;
the sampler calls this on its own thread. No Qt here.
"""

from __future__ import annotations

import os

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, with_children: bool = False) -> float | None:
    """User plus system CPU time the process has used, None when it is gone; with_children adds that of
    its children it has waited for (cutime, cstime)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # utime, stime, cutime, cstime: fields 14 to 17 of stat(5)
    return sum(int(v) for v in fields[11:15 if with_children else 13]) / TICKS


def pss_bytes(pid: int) -> int | None:
    """The process's proportional set size; None when it is gone or not ours to read (a root metric
    seen by an unprivileged window)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class ProcessCost:
    """CPU share per pid over the time since its previous sample, and its PSS now."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, float]] = {}

    def sample(self, pid: int, now: float) -> dict:
        """{"proc_cpu_pct": share of one CPU since the last call (None the first time), "pss_bytes": ...}"""
        cpu = cpu_seconds(pid)
        last = self._last.get(pid)
        pct = None
        if cpu is not None:
            if last and now > last[0] and cpu >= last[1]:
                pct = 100.0 * (cpu - last[1]) / (now - last[0])
            self._last[pid] = (now, cpu)
        return {"proc_cpu_pct": pct, "pss_bytes": pss_bytes(pid)}

    def forget_others(self, pids: set[int]) -> None:
        self._last = {pid: v for pid, v in self._last.items() if pid in pids}
