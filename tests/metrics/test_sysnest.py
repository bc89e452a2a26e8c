"""sysnest against a workload with a known count: a child that makes exactly N getppid calls."""


import pytest
from helpers import MetricProcess, end_workload, human_output, next_line, run_workload, timed_bound

N = 20_000
GETPPID_CHILD = f"""
import os, sys, time
sys.stdin.readline()
start = time.perf_counter_ns()
for _ in range({N}):
    os.getppid()
print("done", (time.perf_counter_ns() - start) / {N}, flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


def traced_getppid(group_by: str, *extra: str) -> tuple[list[dict], int, float]:
    """sysnest's records, the child's pid, and the child's own wall time per getppid call (ns)."""
    child = run_workload(GETPPID_CHILD)
    tool = MetricProcess("sysnest", "-p", str(child.pid), "0.5", "--group-by", group_by,
                         "--details-top", "50", "--top", "50", *extra)
    try:
        meta = tool.wait_meta()
        assert meta["filters"] == {"filter_pid": child.pid}
        done, ns_per_call = next_line(child).split()
        assert done == "done"
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 3)
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
        end_workload(child)
    return tool.records, child.pid, float(ns_per_call)


def test_counts_getppid_by_process():
    records, pid, _ = traced_getppid("process")
    details = [r for r in records if r["kind"] == "row" and r["level"] == "detail" and r["syscall"] == "getppid"]
    assert {r["pid"] for r in details} == {pid}
    count = sum(r["count"] for r in details)
    assert abs(count - N) <= N * 0.001, count
    assert all(r["avg_us"] > 0 and r["max_us"] >= r["avg_us"] for r in details)
    groups = [r for r in records if r["kind"] == "row" and r["level"] == "group"]
    assert sum(g["count"] for g in groups) >= count


def test_counts_getppid_by_syscall():
    records, pid, _ = traced_getppid("syscall")
    groups = [r for r in records if r["kind"] == "row" and r["level"] == "group" and r["syscall"] == "getppid"]
    count = sum(g["count"] for g in groups)
    assert abs(count - N) <= N * 0.001, count
    details = [r for r in records if r["kind"] == "row" and r["level"] == "detail" and r["syscall"] == "getppid"]
    assert {r["pid"] for r in details} == {pid}
    assert sum(r["count"] for r in details) == count
    assert all(g["avg_us"] > 0 for g in groups)


def test_sampled_timing_counts_every_call_and_times_one_in_n():
    """--sample 8: the count stays exact; one call in 8 of the thread is timed on average; the estimated total is
    the sampled average times the count, and that average is below the child's own time per call
    (its loop included)."""
    records, pid, ns_per_call = traced_getppid("process", "--sample", "8")
    meta = next(r for r in records if r["kind"] == "meta")
    assert meta["sample_every"] == 8
    details = [r for r in records if r["kind"] == "row" and r["level"] == "detail" and r["syscall"] == "getppid"]
    count, timed = sum(r["count"] for r in details), sum(r["timed"] for r in details)
    total_us = sum(r["total_us"] for r in details)
    print(f"{count} calls, {timed} timed, {total_us:.1f} us estimated; the child: {ns_per_call:.0f} ns a call")
    assert abs(count - N) <= N * 0.001, count
    # the gaps run over all of the thread's syscalls, and the loop makes nothing but getppid
    assert abs(timed - N / 8) <= timed_bound(N, 8), timed
    avg_us = total_us / count
    assert 0 < avg_us * 1000 < ns_per_call
    for r in details:
        assert r["avg_us"] == pytest.approx(r["total_us"] / r["count"], rel=0.01, abs=0.002)
        assert r["max_us"] >= r["avg_us"]


def test_human_output_has_columns():
    out = human_output("sysnest", "0.3", "2")
    assert "COUNT" in out and "AVG(us)" in out and "MAX(us)" in out
