"""A system-wide run leaves out the profiler's own processes and only them (bcctool/own.py, bpf/common.h
SKIP_OWN): twin workloads with the same comm and command line, one marked as the profiler's own (the
app's pid, --app-pid: it and everything below it), the other not. Left out by default, the marked twin
has not one record while the other is counted in full against its own books; with --include-self both
are. The two runs trace the same twins at the same time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers import MetricProcess, end_workload, next_line, run_workload, sampling_started, settle_and_stop
from workloads import GETPPID_CHILD, GETPPID_N

pytestmark = pytest.mark.bpf

N = GETPPID_N
SPIN = "while True:\n    pass\n"
RUNS = {"left out": (), "included": ("--include-self",)}


def test_sysnest_leaves_out_the_marked_twin_and_counts_the_other_exactly():
    own, other = run_workload(GETPPID_CHILD), run_workload(GETPPID_CHILD)
    tools = {}
    try:
        tools = {run: MetricProcess("sysnest", "0.5", "--app-pid", str(own.pid), "--sort", "count", "--top", "1000",
                                    "--details-top", "1000", *extra) for run, extra in RUNS.items()}
        metas = {run: tool.wait_meta() for run, tool in tools.items()}
        assert metas["left out"]["filters"] == {"own_processes": "left out"} and metas["included"]["filters"] == {}
        assert [next_line(child).strip() for child in (own, other)] == ["done", "done"]
        for tool in tools.values():
            settle_and_stop(tool)
    finally:
        for tool in tools.values():
            tool.kill()
        for child in (own, other):
            end_workload(child)
    for run, tool in tools.items():
        rows = [r for r in tool.of_kind("row") if r["level"] == "detail"]
        counts = {pid: sum(r["count"] for r in rows if r["pid"] == pid and r["syscall"] == "getppid")
                  for pid in (own.pid, other.pid)}
        assert N <= counts[other.pid] <= N + 10, (run, counts)      # its own loop's calls, all of them
        if run == "left out":
            assert not [r for r in tool.records if r.get("pid") == own.pid], "the profiler's own twin was counted"
            assert not [r for r in rows if r["pid"] == metas[run]["pid"]], "the metric counted itself"
        else:
            assert N <= counts[own.pid] <= N + 10, (run, counts)
            comms = {r["comm"] for r in rows if r["pid"] in (own.pid, other.pid)}
            assert len(comms) == 1 and comms.pop().endswith("(-c)"), "the twins are not named alike"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def test_cpuprofile_leaves_out_the_marked_twin_and_samples_the_other_as_much_as_it_ran(tmp_path):
    script = tmp_path / "twin.py"
    script.write_text(SPIN)
    own, other = (subprocess.Popen([sys.executable, str(script)]) for _ in range(2))
    tools = {}
    try:
        tools = {run: MetricProcess("cpuprofile", "1", "-F", "99", "--user-stacks", "fp", "--processes", "1000",
                                    "--app-pid", str(own.pid), *extra) for run, extra in RUNS.items()}
        metas = {run: tool.wait_meta() for run, tool in tools.items()}
        for tool in tools.values():
            sampling_started(tool.proc.pid)
        began, cpu0 = time.monotonic(), {p.pid: cpu_seconds(p.pid) for p in (own, other)}
        # both read as they write: a system-wide run's stacks fill a pipe left unread in seconds, and a
        # metric stopped while blocked on a full pipe was seen to lose the rest of the record it was writing
        deadline = time.monotonic() + 30
        while min(tool.drain(0.05) for tool in tools.values()) < 3:
            assert time.monotonic() < deadline, "no third interval within 30 s"
        ran = {p.pid: (cpu_seconds(p.pid) - cpu0[p.pid]) / (time.monotonic() - began) for p in (own, other)}
        for tool in tools.values():
            tool.drain(0.05)
            assert tool.stop()[0] == 0, tool.stderr
    finally:
        for tool in tools.values():
            tool.kill()
        for child in (own, other):
            child.kill()
            child.wait()
    for run, tool in tools.items():
        summaries = tool.of_kind("summary")
        busy_cpu = sum(s["interval_s"] for s in summaries) * 99          # the samples a CPU busy throughout gives
        stacks = tool.of_kind("stack")
        share = {pid: sum(r["count"] for r in stacks if r["pid"] == pid) / busy_cpu for pid in (own.pid, other.pid)}
        print(f"{run}: sampled at {share[own.pid]:.3f} / {share[other.pid]:.3f} of a CPU (own / other), "
              f"/proc says {ran[own.pid]:.3f} / {ran[other.pid]:.3f}")
        # the share of a CPU it was sampled at against the share /proc says it ran (both about 1 when idle)
        assert share[other.pid] == pytest.approx(ran[other.pid], rel=0.2), (run, share, ran)
        if run == "left out":
            assert share[own.pid] == 0, "the profiler's own twin was sampled"
            assert not [r for r in stacks if r["pid"] == metas[run]["pid"]], "the metric sampled itself"
        else:
            assert share[own.pid] == pytest.approx(ran[own.pid], rel=0.2), (run, share, ran)
            comms = {r["comm"] for r in stacks if r["pid"] in (own.pid, other.pid)}
            assert len(comms) == 1 and comms.pop().endswith(" (twin.py)"), "the twins are not named alike"
