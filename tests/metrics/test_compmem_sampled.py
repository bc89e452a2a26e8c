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


SPREAD_S = 2.0     # the pipes opened 100 at a time over 2 s: ~4.6 MB/s of 1 KiB arrays
BASE = 2048        # --sample-bytes: one in two arrays kept at the base, ~2,200 a second
RATE = 300         # --stack-rate: the pace raises the bytes a kept one stands for to 8-16 KiB


def test_paced_sampling_keeps_the_estimate_unbiased():
    """--stack-rate (bpf/pace.h): the pipes opened at a steady ~4.6 MB/s would keep ~2,200 arrays a second
    at one in 2 KiB; at most ~300 a second a CPU, the pace makes each kept one stand for 8 or 16 KiB
    instead, and the estimate of the pipes' memory must still be right within 4 standard deviations of the
    kept count at the largest of those (read without the paced weights it would be 4 to 8 times short),
    the allocated figures exact."""
    child = run_workload(pipes_child(PIPES, spread_s=SPREAD_S))
    tool = MetricProcess("compmem", "-p", str(child.pid), "0.5", "--min-bytes", str(BUFFERS),
                         "--sample-bytes", str(BASE), "--stack-rate", str(RATE), "--stacks", "5")
    try:
        tool.wait_meta()
        start, _ = after(tool, child.pid, time.time())
        assert next_line(child).strip() == "open"
        opened, _ = after(tool, child.pid, time.time())
        status, _ = tool.stop()
        assert status == 0, tool.stderr
    finally:
        tool.kill()
        end_workload(child)
    paced = max(s["sample_bytes_paced"] for s in tool.of_kind("summary"))
    rise = opened["outstanding_bytes"] - start["outstanding_bytes"]
    allocated = opened["alloc_bytes"] - start["alloc_bytes"]
    print(f"paced to {paced:,} bytes a kept allocation; rise {rise:,} bytes (truth {TRUTH:,}); allocated {allocated:,}")
    assert paced >= 4 * BASE, "the pace did not raise the sampling bytes"
    assert TRUTH <= allocated <= 1.05 * TRUTH
    assert rise == pytest.approx(TRUTH, rel=4 / (TRUTH / paced) ** 0.5)
