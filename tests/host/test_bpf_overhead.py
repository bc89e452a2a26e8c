"""The overhead panel's numbers: bpf_stats is turned on while monitoring and put back after, and the run
counts read from a metric's fdinfo agree with bpftool's and cover a workload's known syscalls."""

import subprocess
import sys

import pytest
from helpers import MetricProcess, progs_released

from host import bpf_stats as bpf_overhead
from host.bpf_sampler import OverheadSampler
from host.bpf_stats import (
    BpfStatsSwitch,
    OverheadTracker,
    ProgStat,
    prog_stats_bpftool,
    prog_stats_of_pid,
)

GETPPID_CALLS = 50_000
WORKLOAD = f"import os\nfor _ in range({GETPPID_CALLS}): os.getppid()\n"


def test_sysctl_fallback_turns_stats_on_and_puts_the_old_value_back(tmp_path, monkeypatch):
    monkeypatch.setattr(bpf_overhead, "enable_stats_fd", lambda: None)
    sysctl = tmp_path / "bpf_stats_enabled"
    sysctl.write_text("0\n")
    switch = BpfStatsSwitch(str(sysctl))
    assert switch.enable().startswith("on (sysctl")
    assert sysctl.read_text() == "1"
    switch.restore()
    assert sysctl.read_text() == "0" and switch.state == "off"
    switch.restore()                                     # idempotent
    assert sysctl.read_text() == "0"

    sysctl.write_text("1\n")                             # already on: left as it was
    assert switch.enable() == "on (already on before the app)"
    switch.restore()
    assert sysctl.read_text() == "1\n"

    missing = BpfStatsSwitch(str(tmp_path / "no" / "such"))
    assert missing.enable().startswith("unavailable:")
    missing.restore()


def test_rates_come_from_counter_deltas():
    tracker = OverheadTracker()
    first = tracker.rows(100.0, {"m": {7: ProgStat(7, run_time_ns=1_000, run_cnt=10)}})
    assert first[0]["runs_per_s"] is None and first[0]["avg_ns"] == 100.0
    later = tracker.rows(102.0, {"m": {7: ProgStat(7, run_time_ns=1_000 + 4_000_000, run_cnt=10 + 20_000)}})
    row = later[0]
    assert row["runs_per_s"] == 10_000.0
    assert row["avg_ns"] == 200.0
    assert row["cpu_pct"] == pytest.approx(0.2)             # 4 ms of BPF in 2 s


@pytest.mark.bpf
def test_run_counts_of_a_running_metric_match_bpftool_and_cover_a_known_workload():
    before = open(bpf_overhead.SYSCTL).read().strip()
    switch = BpfStatsSwitch()
    assert switch.enable().startswith("on"), switch.state
    metric = MetricProcess("sysnest", "1")
    try:
        meta = metric.wait_meta()
        pid = meta["pid"]
        sampler = OverheadSampler(elevate=[])
        sampler.set_targets({"sysnest": (pid, metric.prog_ids)})
        rows, _ = sampler.sample()
        subtotal = [r for r in rows if r["type"] == "subtotal"]
        assert [r["metric"] for r in subtotal] == ["sysnest"] and rows[-1]["type"] == "app"
        rows = [r for r in rows if r["id"] is not None]
        assert {r["id"] for r in rows} == metric.prog_ids and len(rows) >= 2
        assert {r["name"] for r in rows} >= {"sys_enter", "sys_exit"}, rows   # names filled in by bpftool
        start = {r["id"]: r["run_cnt"] for r in rows}
        # the programs every syscall runs; sysnest's third, on cgroup moves, has no run to count here
        per_syscall = {r["id"] for r in rows if r["name"] in ("sys_enter", "sys_exit")}

        subprocess.run([sys.executable, "-c", WORKLOAD], check=True)       # 50,000 getppid calls

        mine = prog_stats_of_pid(pid)
        listed = prog_stats_bpftool()
        again = prog_stats_of_pid(pid)
        for prog_id in metric.prog_ids:
            # fdinfo and bpftool read the same kernel counters: bpftool's lies between two fdinfo reads
            assert mine[prog_id].run_cnt <= listed[prog_id].run_cnt <= again[prog_id].run_cnt
            assert mine[prog_id].run_time_ns <= listed[prog_id].run_time_ns <= again[prog_id].run_time_ns
            ran = mine[prog_id].run_cnt - start[prog_id]
            if prog_id in per_syscall:
                assert ran >= GETPPID_CALLS, f"prog {prog_id} ran {ran} times for {GETPPID_CALLS} syscalls"
        rows, summary = sampler.sample()
        subtotal = next(r for r in rows if r["type"] == "subtotal")
        rows = [r for r in rows if r["id"] is not None]
        assert subtotal["cpu_pct"] == pytest.approx(sum(r["cpu_pct"] for r in rows))
        assert subtotal["pss_bytes"] > 1 << 20 and subtotal["proc_cpu_pct"] is not None
        for row in (r for r in rows if r["id"] in per_syscall):
            assert row["runs_per_s"] > 0 and 0 < row["cpu_pct"] < 100
            assert 1 < row["avg_ns"] < 100_000, row           # a raw tracepoint program: ns to µs, not ms
        assert summary.startswith(f"{len(rows)} programs")
    finally:
        metric.stop()
        switch.restore()
    assert progs_released(metric.prog_ids)
    assert open(bpf_overhead.SYSCTL).read().strip() == before
    assert switch.state == "off"

