"""Issue 13's benchmark: what sampling on-CPU stacks costs bench/mixed.c, side by side in one run —
cpuprofile at 49 and 99 Hz (user stacks unwound with CFI, the default, and by frame pointers at 99 Hz),
BCC's `profile -F 99` (/usr/sbin/profile-bpfcc, kernel and frame-pointer user stacks, counted in the
kernel), `perf record -F 99 -g` and `perf record -F 99 --call-graph dwarf` (whole system, written to a
file; perf copies 8 KiB of user stack per sample and unwinds only later, in `perf report`) — as the
workload's slowdown against the same repetition's bare run, in rotated order. mixed.c is built -O2,
which on x86-64 omits frame pointers: the case DWARF unwinding is for (issue 14). For cpuprofile also: its CPU time per 1,000 samples (rusage of
the process, /proc/PID/stat, from its meta record to the end of the workload, over the samples its
summaries counted meanwhile: startup left out), its PSS after the workload (smaps_rollup) and exec to
its first data record.
"""

from __future__ import annotations

import os
import tempfile
import time

import bpfwatch
import harness
import stats
from harness import Tracer
from metric_footprint import smaps_rollup_mb
from stats import BenchError

import config

PROFILE = "/usr/sbin/profile-bpfcc"
OURS = {  # configuration -> cpuprofile's registry values
    "cpuprofile -F 49": {"frequency": 49},
    "cpuprofile -F 99": {"frequency": 99},
    "cpuprofile -F 99 fp": {"frequency": 99, "user_stacks": "fp"},
}
GOAL = "profile -F 99"   # the goal: no more slowdown than BCC's profile at the same frequency
PERF_DWARF = "perf record -F 99 --call-graph dwarf"   # issue 14: DWARF stacks at less slowdown than perf's


def peers(data_file: str) -> dict[str, tuple[list[str], str]]:
    """argv and ready line of each peer that is installed."""
    out = {}
    if os.path.exists(PROFILE):
        out[GOAL] = ([PROFILE, "-F", "99"], "Sampling")
    if os.path.exists("/usr/bin/perf"):
        # perf record prints nothing until it ends: a shell says when it hands over
        for name, stacks in (("perf record -F 99 -g", "-g"), (PERF_DWARF, "--call-graph dwarf")):
            out[name] = (["/bin/sh", "-c", f'echo ready; exec /usr/bin/perf record -F 99 {stacks} -a '
                          f'-o {data_file} >/dev/null 2>&1'], "ready")
    return out


def relative(slowdown: dict[str, list[float]], name: str, peer: str) -> dict | None:
    """name's slowdown over peer's, repetition by repetition (None when the peer did not slow it)."""
    if peer not in slowdown or not (stats.summary(slowdown[peer])["median"] or 0) > 0:
        return None
    return stats.summary([m / p for m, p in zip(slowdown[name], slowdown[peer], strict=False) if p > 0], 2)


class Sampled:
    """One cpuprofile or peer run: the tracer, its samples counted from its summaries, its PSS."""

    def __init__(self, argv: list[str], ready) -> None:
        self.samples = 0
        self.first_data: float | None = None
        self.tracer = Tracer(argv, ready)
        self.tracer.on_line = self._line
        self.pss_mb: float | None = None
        self.cpu_at_ready: float | None = None
        self.samples_at_ready = 0

    def cpu_now(self) -> float | None:
        """The tool's CPU seconds so far (utime + stime from /proc), to leave its startup out."""
        try:
            with open(f"/proc/{self.tracer.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _line(self, line: str) -> None:
        record = config.parse_ndjson(line)
        if record and record["kind"] != "meta" and self.first_data is None:
            self.first_data = time.monotonic()
        if record and record["kind"] == "summary":
            self.samples += int(record.get("samples") or 0)


def run(quick: bool = False, reps: int | None = None) -> dict:
    binary = harness.compile_c("mixed")
    reps = reps or (3 if quick else 5)
    rounds, runs = (400, 2) if quick else (1000, 2)
    spec = config.get("cpuprofile")
    data_file = os.path.join(tempfile.gettempdir(), "bench-cpuprofile-perf.data")
    others = peers(data_file)
    configs = ["bare", *OURS, *others]
    quiet = bpfwatch.Quiet(syscalls_only=False, retries=0)
    ours: dict[str, list[dict]] = {name: [] for name in OURS}

    def workload() -> float:
        return min(float(harness.run_workload([binary, str(rounds), harness.BUILD]).split()[-1])
                   for _ in range(runs))

    def one(name: str, rep: int) -> float:
        if name == "bare":
            return quiet.run(workload)
        if name in OURS:
            argv, ready = harness.metric_argv(spec, **OURS[name]), harness.is_meta
        else:
            argv, ready = others[name]
        run_ = Sampled(argv, ready)
        try:
            ready_s = run_.tracer.wait_ready()
            run_.cpu_at_ready, run_.samples_at_ready = run_.cpu_now(), run_.samples
            if name.startswith("perf"):
                time.sleep(0.5)   # perf opens its events after the shell's line
            seconds = quiet.run(workload, [run_.tracer.proc.pid])
            if run_.tracer.proc.poll() is not None:
                raise BenchError(f"{name} exited during the workload: {list(run_.tracer.tail)[-2:]}")
            if name in OURS:
                time.sleep(1.2)   # one more interval: the workload's last samples are counted
                run_.pss_mb = (smaps_rollup_mb(run_.tracer.proc.pid) or {}).get("pss")
                cpu_end, samples = run_.cpu_now(), run_.samples - run_.samples_at_ready
        finally:
            run_.tracer.stop()
        if name in OURS:
            first = run_.first_data - run_.tracer.started if run_.first_data else None
            cpu_ms = (1000 * (cpu_end - run_.cpu_at_ready)
                      if cpu_end is not None and run_.cpu_at_ready is not None else None)
            ours[name].append({"ready_s": ready_s, "first_data_s": first, "pss_mb": run_.pss_mb,
                               "samples": samples, "cpu_ms_per_1000": 1000 * cpu_ms / samples
                               if cpu_ms is not None and samples else None})
        return seconds

    harness.log(f"cpuprofile overhead: {reps} repetitions of {len(configs)} configurations, {rounds} rounds")
    times = stats.alternate(configs, one, reps, harness.log)
    try:
        os.unlink(data_file)
    except OSError:
        pass
    slowdown = {name: [r * 100 - 100 for r in ratios] for name, ratios in stats.paired(times, "bare", "ratio").items()}
    rows = []
    for name in configs:
        row = {"config": name, "seconds": stats.summary(times[name], 3), "slowdown_pct": stats.summary(slowdown[name]),
               "vs_profile": relative(slowdown, name, GOAL) if name in OURS else None,
               "vs_perf_dwarf": relative(slowdown, name, PERF_DWARF) if name in OURS else None}
        if name in OURS:
            row.update({k: stats.summary([s[k] for s in ours[name]], 2)
                        for k in ("cpu_ms_per_1000", "pss_mb", "first_data_s", "samples")})
        rows.append(row)
    goal = next((r for r in rows if r["config"] == "cpuprofile -F 99"), None)
    measured = goal and goal["vs_profile"] and goal["vs_profile"]["median"]
    targets = [{"name": "cpuprofile -F 99 slowdown vs BCC profile -F 99", "target": "<= 1.0x",
                "measured": f"{measured}x" if measured is not None else None,
                "met": None if measured is None else measured <= 1.0,
                "margin": f"{1.0 - measured:+.2f}" if measured is not None else "n/a"}]
    against_perf = goal and goal["vs_perf_dwarf"] and goal["vs_perf_dwarf"]["median"]
    targets.append({"name": "cpuprofile -F 99 (DWARF) slowdown vs perf record --call-graph dwarf -F 99",
                    "target": "<= 1.0x", "measured": f"{against_perf}x" if against_perf is not None else None,
                    "met": None if against_perf is None else against_perf <= 1.0,
                    "margin": f"{1.0 - against_perf:+.2f}" if against_perf is not None else "n/a"})
    return {"title": "cpuprofile against BCC profile and perf record", "reps": reps, "rounds": rounds,
            "runs": runs, "rows": rows, "interference": quiet.note(), "targets": targets}


def _median(cell: dict | None, unit: str = "") -> str:
    if not cell or cell.get("median") is None:
        return "n/a"
    return f"{cell['median']}{unit} ({cell['min']}–{cell['max']})"


def table(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        rows.append([r["config"], _median(r["seconds"], " s"), _median(r["slowdown_pct"], " %"),
                     _median(r.get("vs_profile"), "x"), _median(r.get("vs_perf_dwarf"), "x"),
                     _median(r.get("cpu_ms_per_1000"), " ms"),
                     _median(r.get("pss_mb"), " MB"), _median(r.get("first_data_s"), " s")])
    body = stats.md_table(["configuration", "workload", "slowdown", "vs profile -F 99",
                           "vs perf --call-graph dwarf", "CPU per 1,000 samples", "PSS", "exec to first record"], rows)
    note = result.get("interference")
    return body + (f"\n\n{note}" if note else "")
