"""pagefault against getrusage: children that fault a known way report their own ru_minflt/ru_majflt,
and the metric's counts for their pid must agree."""

import os
import subprocess
import tempfile

import pytest
from helpers import (
    MetricProcess,
    block_device_dir,
    end_workload,
    headings,
    human_output,
    report_of,
    run_workload,
    settle_and_stop,
)
from workloads import anon_pages_child

PAGES = 20_000
FILE_MB = 64

ANON_CHILD = anon_pages_child(PAGES)

# Writes a FILE_MB file, syncs it and drops its pages from the page cache, then (after a line) reads
# one byte per page through mmap: sequentially (readahead: few major faults) or with MADV_RANDOM
# (readahead off: one major fault per page).
FILE_CHILD = f"""
import json, mmap, os, resource, sys
path, how = sys.argv[1], sys.argv[2]
size = {FILE_MB} << 20
with open(path, "wb") as f:
    f.write(os.urandom(1 << 20) * {FILE_MB})
    f.flush()
    os.fsync(f.fileno())
    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
print("ready", flush=True)
sys.stdin.readline()
fd = os.open(path, os.O_RDONLY)
r0 = resource.getrusage(resource.RUSAGE_SELF)
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
if how == "random":
    m.madvise(mmap.MADV_RANDOM)
total = 0
for off in range(0, size, 4096):
    total += m[off]
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"minflt": r1.ru_minflt - r0.ru_minflt, "majflt": r1.ru_majflt - r0.ru_majflt}}), flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


def pid_totals(records: list[dict], pid: int) -> dict[str, int]:
    rows = [r for r in records if r["kind"] == "row" and r["pid"] == pid]
    return {k: sum(r[k] for r in rows) for k in ("minor", "major", "total")}


def traced_until_reported(tool: MetricProcess, child: subprocess.Popen) -> dict:
    """Release the child, read its rusage report, let the metric print two more intervals, stop it."""
    meta = tool.wait_meta()
    assert {p["name"] for p in meta["probes"]} >= {"minor-faults", "major-faults"}
    report = report_of(child)
    settle_and_stop(tool)
    return report


def test_minor_faults_of_a_pid_match_its_rusage_window():
    """-p: the metric counts from attach to stop; the child's own delta covers the touching only."""
    child = run_workload(ANON_CHILD)
    tool = MetricProcess("pagefault", "-p", str(child.pid), "0.5")
    try:
        report = traced_until_reported(tool, child)
    finally:
        tool.kill()
        end_workload(child)
    counted = pid_totals(tool.records, child.pid)
    print("counted", counted, "rusage", report)
    assert report["minflt"] >= PAGES
    assert abs(counted["minor"] - report["minflt"]) <= 0.02 * report["minflt"], (counted, report)
    assert counted["minor"] <= report["lifetime_minflt"] + 50, (counted, report)   # it only counted after attach
    assert {r["pid"] for r in tool.of_kind("row")} == {child.pid}


def test_minor_faults_over_a_child_lifetime_match_rusage():
    """No filter, metric first: every fault of the child from fork on is counted, as rusage counts them."""
    tool = MetricProcess("pagefault", "0.5", "--top", "1000")
    child = None
    try:
        tool.wait_meta()
        child = run_workload(ANON_CHILD)
        report = report_of(child)
        settle_and_stop(tool)
    finally:
        tool.kill()
        if child:
            end_workload(child)
    counted = pid_totals(tool.records, child.pid)
    print("counted", counted, "rusage", report)
    lifetime = report["lifetime_minflt"]
    assert abs(counted["minor"] - lifetime) <= 0.02 * lifetime, (counted, report)
    summaries = tool.of_kind("summary")
    assert sum(s["minor"] for s in summaries) >= counted["minor"]


@pytest.mark.parametrize("how", ["sequential", "random"])
def test_major_faults_after_dropping_the_cache_match_rusage(how):
    path = os.path.join(tempfile.mkdtemp(dir=block_device_dir()[0], prefix="pagefault-"), "file.bin")
    child = run_workload(FILE_CHILD, path, how)
    tool = None
    try:
        assert child.stdout.readline().strip() == "ready"
        tool = MetricProcess("pagefault", "-p", str(child.pid), "0.5")
        report = traced_until_reported(tool, child)
    finally:
        if tool:
            tool.kill()
        end_workload(child)
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    counted = pid_totals(tool.records, child.pid)
    print("counted", counted, "rusage", report)
    assert report["majflt"] > 0, f"the page cache was not dropped: {report}"
    assert counted["major"] > 0
    assert abs(counted["major"] - report["majflt"]) <= 0.10 * report["majflt"], (counted, report)
    if how == "random":
        # readahead is off, so every page is its own major fault
        assert report["majflt"] >= 0.9 * (FILE_MB << 20) // 4096


def test_human_output_has_figure_5_columns():
    out = human_output("pagefault", "0.3", "2")
    assert headings(out, "Time") == ["Time", "Command", "PID", "Minor/s", "Major/s", "Total/s"]
