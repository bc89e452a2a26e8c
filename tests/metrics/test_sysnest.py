"""sysnest against a workload with a known count: a child that makes exactly N getppid calls."""


import os

import pytest
from helpers import MetricProcess, end_workload, headings, human_output, next_line, run_workload, timed_bound

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
    assert headings(out, "PID") == ["PID", "Command", "Syscall", "Count", "Errors", "Total (TIME)", "Avg (TIME)",
                                    "Max (TIME)"]


def _free_slot_waiting(tool_pid: int) -> bool:
    """True when sysnest's free_slots queue holds a slot. Read in this process (libbpf, through the map's id in
    sysnest's fdinfo), not with bpftool: a child of this process is traced here, and would take the slot."""
    import ctypes
    import glob
    libbpf = ctypes.CDLL("libbpf.so.1", use_errno=True)
    for path in glob.glob(f"/proc/{tool_pid}/fdinfo/*"):
        try:
            with open(path) as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if info.get("map_type", "").strip() == "22":   # BPF_MAP_TYPE_QUEUE: sysnest's only one
            fd = libbpf.bpf_map_get_fd_by_id(int(info["map_id"]))
            assert fd >= 0, os.strerror(ctypes.get_errno())
            try:
                slot = ctypes.c_uint32()
                return libbpf.bpf_map_lookup_elem(fd, None, ctypes.byref(slot)) == 0   # a peek
            finally:
                os.close(fd)
    raise AssertionError("sysnest has no free_slots queue")


def test_slots_of_an_exited_process_are_reused_zeroed():
    """A second child, started once the first child's slots were given back, is counted from zero: its
    getppid calls are exactly N and its syscalls about as many as the first's (identical programs), not
    the first's counts added on."""
    tool = MetricProcess("sysnest", "--ppid", str(os.getpid()), "0.3", "--top", "50", "--details-top", "200")
    children = []
    try:
        tool.wait_meta()
        for run in range(2):
            child = run_workload(GETPPID_CHILD)
            children.append(child.pid)
            assert next_line(child).split()[0] == "done"
            end_workload(child)
            # a summary 4 intervals after one that began after the child ended: read, forgotten, given back
            seen = len(tool.records)
            first = tool.read_until(lambda r, old=tool.records[:seen]: r["kind"] == "summary" and r not in old)
            tool.read_until(lambda r, n=first["interval"] + 4: r["kind"] == "summary" and r["interval"] >= n)
            if run == 0:   # the first child's slots wait in the queue for the next new keys
                assert _free_slot_waiting(tool.proc.pid)
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
    details = [r for r in tool.records if r["kind"] == "row" and r["level"] == "detail"]
    first, second = ({r["syscall"]: 0 for r in details if r["pid"] == pid} for pid in children)
    for r in details:
        for pid, counts in zip(children, (first, second), strict=True):
            if r["pid"] == pid:
                counts[r["syscall"]] += r["count"]
    print("first", sum(first.values()), "second", sum(second.values()))
    assert first["getppid"] == second["getppid"] == N
    assert sum(second.values()) < sum(first.values()) + N / 2
