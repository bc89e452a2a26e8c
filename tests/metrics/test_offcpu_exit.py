"""offcpu keeps the names of a process that exits before its stacks are read: a child that sleeps and
exits within the interval still shows its libc frame (clock_nanosleep) — whether it ran before offcpu
started (its maps are read at start; with -p the metric then ends after that interval) or was born
after (its maps are read when it first blocks)."""

import pytest
from helpers import MetricProcess, end_workload, run_workload

pytestmark = pytest.mark.bpf

SLEEP_THEN_EXIT = """
import sys, time
sys.stdin.readline()
for _ in range(10):
    time.sleep(0.02)
"""


def sleeps_keep_libc(records: list[dict], pid: int) -> None:
    stacks = [r for r in records if r["kind"] == "row" and r["level"] == "stack" and r["pid"] == pid]
    sleeps = [r for r in stacks if any("nanosleep" in f for f in r["kernel_frames"])]
    assert sleeps and sum(r["count"] for r in sleeps) >= 10, stacks
    assert all(any("nanosleep" in f and "libc" in f for f in r["user_frames"]) for r in sleeps), \
        [r["user_frames"] for r in sleeps]


def test_a_process_running_before_offcpu_keeps_its_user_frames():
    child = run_workload(SLEEP_THEN_EXIT)
    tool = MetricProcess("offcpu", "-p", str(child.pid), "2")
    try:
        tool.wait_meta()
        end_workload(child)
        tool.read_until(lambda r: r["kind"] == "end", timeout=60)
        assert tool.proc.wait(timeout=30) == 0
    finally:
        tool.kill()
    sleeps_keep_libc(tool.records, child.pid)


def test_a_process_born_after_offcpu_started_keeps_its_user_frames():
    tool = MetricProcess("offcpu", "3", "1")
    try:
        tool.wait_meta()
        child = run_workload(SLEEP_THEN_EXIT)
        end_workload(child)
        tool.read_until(lambda r: r["kind"] == "summary", timeout=60)
        status, _ = tool.stop()
        assert status == 0, tool.stderr
    finally:
        tool.kill()
    sleeps_keep_libc(tool.records, child.pid)
