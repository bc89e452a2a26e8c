"""compmem against workloads with a known shape: a child that opens and closes 2,000 pipes (its kernel
memory must rise and fall back), /proc/PID/status for RSS, and a map too small on purpose."""

import time

import pytest
from helpers import MetricProcess, end_workload, headings, human_output, next_line, run_workload
from workloads import pipes_child

PIPES = 2000
TOUCH_MB = 64

EXACT = ("--sample-bytes", "0")   # every allocation kept: the counts below are exact
PIPES_CHILD = pipes_child(PIPES, TOUCH_MB)   # waits; touches TOUCH_MB (a known RSS), opens PIPES pipes; closes them

pytestmark = pytest.mark.bpf


def step(child, expect: str) -> None:
    assert next_line(child).strip() == expect




def process_row(tool: MetricProcess, pid: int, after: int, timeout: float = 30.0) -> dict:
    """The first row for `pid` from an interval later than `after`."""
    return tool.read_until(lambda r: r["kind"] == "row" and r["level"] == "process" and r["pid"] == pid
                           and r["interval"] > after, timeout)


def current_interval(tool: MetricProcess) -> int:
    """The last interval whose summary has been read (waiting for the first if need be)."""
    if not tool.of_kind("summary"):
        tool.read_until(lambda r: r["kind"] == "summary")
    return tool.of_kind("summary")[-1]["interval"]


def vm_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("caches", [False, True], ids=["kmalloc", "with-caches"])
def test_pipes_raise_outstanding_bytes_and_closing_brings_them_back(caches):
    child = run_workload(PIPES_CHILD)
    tool = MetricProcess("compmem", *EXACT, "-p", str(child.pid), "0.3", "--stacks", "50", "--stack-depth", "20",
                         *(["--caches"] if caches else []))
    try:
        tool.wait_meta()
        # tracing starts with the child idle: nothing of it is outstanding yet
        start_interval = current_interval(tool)
        before = [r for r in tool.records if r["kind"] == "row" and r["pid"] == child.pid]
        start = before[-1]["outstanding_bytes"] if before else 0

        step(child, "open")
        opened = process_row(tool, child.pid, current_interval(tool))
        # the same interval's stack rows follow the process row
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] > opened["interval"])
        stacks = [r for r in tool.records if r["kind"] == "row" and r["level"] == "stack"
                  and r["interval"] == opened["interval"]]

        step(child, "closed")
        closed_at = current_interval(tool)
        rise = opened["outstanding_bytes"] - start
        # frees of dentries and inodes wait for an RCU grace period: give them a few intervals
        deadline = time.monotonic() + 10
        while True:
            after = process_row(tool, child.pid, current_interval(tool))
            if abs(after["outstanding_bytes"] - start) <= 0.10 * rise or time.monotonic() > deadline:
                break
        status, _ = tool.stop()
        assert status == 0, tool.stderr
    finally:
        tool.kill()
        end_workload(child)
    print(f"caches={caches} start={start} opened={opened['outstanding_bytes']} ({opened['active_allocs']} "
          f"allocations) after close={after['outstanding_bytes']} ({after['active_allocs']})")
    assert start_interval >= 1
    per_pipe = 2500 if caches else 1000   # pipe_inode_info + its buffer array (+ inode, dentry, 2 files)
    assert rise >= PIPES * per_pipe, opened
    assert opened["active_allocs"] >= PIPES * (8 if caches else 2), opened
    assert after["interval"] > closed_at
    assert abs(after["outstanding_bytes"] - start) <= 0.10 * rise, (start, opened, after)
    assert after["active_allocs"] <= 0.10 * opened["active_allocs"], (opened, after)
    pipe_stacks = [s for s in stacks if any("pipe" in f for f in s["kernel_frames"])]
    assert pipe_stacks, [s["kernel_frames"][:6] for s in stacks]
    assert sum(s["active_allocs"] for s in pipe_stacks) >= PIPES


def test_rss_and_vmsize_match_proc_status():
    child = run_workload(PIPES_CHILD)
    tool = MetricProcess("compmem", *EXACT, "-p", str(child.pid), "0.3", "--stacks", "0")
    try:
        tool.wait_meta()
        step(child, "open")
        row = process_row(tool, child.pid, current_interval(tool))
        rss_now = vm_rss_bytes(child.pid)   # read as the record arrives; the child is idle
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
        end_workload(child)
    print(f"rss reported={row['rss_bytes']} /proc VmRSS={rss_now} vmsize={row['vm_size_bytes']}")
    assert row["rss_bytes"] >= TOUCH_MB << 20
    assert abs(row["rss_bytes"] - rss_now) <= 0.05 * rss_now, (row, rss_now)
    assert row["vm_size_bytes"] >= row["rss_bytes"]


def test_min_bytes_keeps_only_large_allocations():
    """Each pipe's buffer array (16 x 40 bytes) comes from kmalloc-1k; everything else a pipe
    allocates with kmalloc is smaller than 512 bytes."""
    child = run_workload(PIPES_CHILD)
    tool = MetricProcess("compmem", *EXACT, "-p", str(child.pid), "0.3", "--min-bytes", "512", "--stacks", "0")
    try:
        meta = tool.wait_meta()
        step(child, "open")
        row = process_row(tool, child.pid, current_interval(tool))
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
        end_workload(child)
    print(f"--min-bytes 512: active={row['active_allocs']} outstanding={row['outstanding_bytes']}")
    assert meta["filters"]["min_bytes"] == 512
    assert PIPES <= row["active_allocs"] <= PIPES * 1.05, row
    assert row["outstanding_bytes"] >= PIPES * 1024, row


def test_a_full_map_is_reported_as_lost():
    child = run_workload(PIPES_CHILD)
    tool = MetricProcess("compmem", *EXACT, "-p", str(child.pid), "0.3", "--max-allocs", "256", "--stacks", "0")
    try:
        tool.wait_meta()
        step(child, "open")
        row = process_row(tool, child.pid, current_interval(tool))
        lost = tool.read_until(lambda r: r["kind"] == "lost" and r["source"] == "allocs_map_full")
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
        end_workload(child)
    lost_total = max(r["total"] for r in tool.of_kind("lost") if r["source"] == "allocs_map_full")
    print(f"tracked={row['allocs']} active={row['active_allocs']} lost={lost_total}")
    assert lost["count"] > 0
    assert row["active_allocs"] <= 256
    # every allocation of the pipes is either tracked or counted as lost
    assert row["allocs"] + lost_total >= PIPES * 2


def test_human_output_has_overview_processes_and_stacks():
    out = human_output("compmem", "0.3", "2")
    assert "] Memory " in out and "Available " in out
    assert headings(out, "PID") == ["PID", "Command", "Allocated", "Allocations", "Outstanding", "Active", "RSS",
                                    "VmSize"]
    assert "by kernel stack" in out
