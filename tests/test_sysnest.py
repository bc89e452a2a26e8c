"""sysnest against a workload with a known count: a child that makes exactly N getppid calls."""


import pytest
from helpers import MetricProcess, run_workload

N = 20_000
GETPPID_CHILD = f"""
import os, sys
sys.stdin.readline()
for _ in range({N}):
    os.getppid()
print("done", flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


def traced_getppid(group_by: str) -> tuple[list[dict], int]:
    child = run_workload(GETPPID_CHILD)
    tool = MetricProcess("sysnest", "-p", str(child.pid), "0.5", "--group-by", group_by,
                         "--details-top", "50", "--top", "50")
    try:
        meta = tool.wait_meta()
        assert meta["filters"] == {"filter_pid": child.pid}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 3)
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
        child.stdin.write("\n")
        child.stdin.close()
        child.wait()
    return tool.records, child.pid


def test_counts_getppid_by_process():
    records, pid = traced_getppid("process")
    details = [r for r in records if r["kind"] == "row" and r["level"] == "detail" and r["syscall"] == "getppid"]
    assert {r["pid"] for r in details} == {pid}
    count = sum(r["count"] for r in details)
    assert abs(count - N) <= N * 0.001, count
    assert all(r["avg_us"] > 0 and r["max_us"] >= r["avg_us"] for r in details)
    groups = [r for r in records if r["kind"] == "row" and r["level"] == "group"]
    assert sum(g["count"] for g in groups) >= count


def test_counts_getppid_by_syscall():
    records, pid = traced_getppid("syscall")
    groups = [r for r in records if r["kind"] == "row" and r["level"] == "group" and r["syscall"] == "getppid"]
    count = sum(g["count"] for g in groups)
    assert abs(count - N) <= N * 0.001, count
    details = [r for r in records if r["kind"] == "row" and r["level"] == "detail" and r["syscall"] == "getppid"]
    assert {r["pid"] for r in details} == {pid}
    assert sum(r["count"] for r in details) == count
    assert all(g["avg_us"] > 0 for g in groups)


def test_human_output_has_columns():
    tool = MetricProcess("sysnest", "0.3", "2", json_output=False)
    out, err = tool.proc.communicate(timeout=60)
    assert tool.proc.returncode == 0, err
    assert "COUNT" in out and "AVG(us)" in out and "MAX(us)" in out
