"""compmem's sampled mode (--sample-bytes) against kernel memory known by construction: a child opens
PIPES pipes, each holding one array of 16 pipe buffers (640 bytes, from kmalloc-1k: 1,024 bytes_alloc);
`--min-bytes 1024` keeps only allocations of 1 KiB or more, so the pipes add exactly PIPES * 1,024 bytes
outstanding, and closing them takes that back. Keeping one allocation in about SAMPLE bytes, each
standing for SAMPLE bytes, compmem's estimate of it must be right within 4 standard
deviations, while the allocated figures, counted for every allocation, stay exact (and so check the
workload's own count)."""

import time

import pytest
from helpers import MetricProcess, end_workload, next_line, run_workload
from workloads import pipes_child

pytestmark = pytest.mark.bpf

PIPES = 9_000             # 18,000 descriptors: the hard limit is 20,000 here
BUFFERS = 1024            # bytes_alloc of a pipe's buffer array: kcalloc(16, sizeof(struct pipe_buffer))
SAMPLE = 16_384           # ~PIPES * BUFFERS / SAMPLE = 562 kept: a relative error of 1/sqrt(562), 4.2 %
TRUTH = PIPES * BUFFERS

PIPES_CHILD = pipes_child(PIPES)


def after(tool: MetricProcess, pid: int, since: float) -> tuple[dict, list[dict]]:
    """The child's process row and stack rows of the first interval cut wholly after `since` (time.time()):
    the one after the first summary emitted after it."""
    first = tool.read_until(lambda r: r["kind"] == "summary" and r["ts"] > since, timeout=30)["interval"]
    tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= first + 2, timeout=30)
    rows = [r for r in tool.records if r["kind"] == "row" and r["interval"] == first + 1 and r.get("pid") == pid]
    process = [r for r in rows if r["level"] == "process"]
    return (process[0] if process else {"outstanding_bytes": 0, "active_allocs": 0, "alloc_bytes": 0,
                                         "allocs": 0}), [r for r in rows if r["level"] == "stack"]


def test_outstanding_pipes_estimated_from_kept_allocations():
    child = run_workload(PIPES_CHILD)
    tool = MetricProcess("compmem", "-p", str(child.pid), "0.5", "--min-bytes", str(BUFFERS),
                         "--sample-bytes", str(SAMPLE), "--stacks", "5")
    try:
        meta = tool.wait_meta()
        start, _ = after(tool, child.pid, time.time())
        assert next_line(child).strip() == "open"
        opened, stacks = after(tool, child.pid, time.time())
        assert next_line(child).strip() == "closed"
        closed, _ = after(tool, child.pid, time.time())   # the arrays are freed at the close, no RCU wait
        status, _ = tool.stop()
        assert status == 0, tool.stderr
    finally:
        tool.kill()
        end_workload(child)
    rise = opened["outstanding_bytes"] - start["outstanding_bytes"]
    active = opened["active_allocs"] - start["active_allocs"]
    allocated = opened["alloc_bytes"] - start["alloc_bytes"]
    print(f"sample {SAMPLE}: rise {rise:,} bytes in {active:,} allocations (truth {TRUTH:,} in {PIPES:,}); "
          f"allocated {allocated:,} in {opened['allocs'] - start['allocs']:,}; after close "
          f"{closed['outstanding_bytes'] - start['outstanding_bytes']:,}; {len(stacks)} stacks")
    assert meta["sample_bytes"] == SAMPLE
    # every allocation counted, kept or not: the pipes' arrays (the workload is what it says: the truth),
    # and little else of 1 KiB or more
    assert TRUTH <= allocated <= 1.05 * TRUTH
    assert PIPES <= opened["allocs"] - start["allocs"] <= 1.05 * PIPES
    tolerance = 4 / (TRUTH / SAMPLE) ** 0.5   # 4 standard deviations of ~562 kept: 17 %
    assert rise == pytest.approx(TRUTH, rel=tolerance)
    assert active == pytest.approx(PIPES, rel=tolerance)
    # the stacks are the same kept allocations, each standing for as much: they add up to the row
    assert sum(s["outstanding_bytes"] for s in stacks) == opened["outstanding_bytes"]
    pipes = sum(s["outstanding_bytes"] for s in stacks if any("pipe" in f for f in s["kernel_frames"]))
    assert pipes >= 0.95 * rise, [s["kernel_frames"][:4] for s in stacks]
    assert abs(closed["outstanding_bytes"] - start["outstanding_bytes"]) <= 0.05 * TRUTH, closed
