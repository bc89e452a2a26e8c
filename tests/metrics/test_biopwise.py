"""biopwise against I/O with a known size: a child writes 32 MiB with O_DIRECT (so every byte goes to
the disk in its own context), compared with 32 MiB and with the child's own /proc/self/io write_bytes;
then an O_DIRECT read of the same file (never served from the page cache) must show 32 MiB read."""

import os
import subprocess
import tempfile

import pytest
from helpers import (
    PYTHON,
    MetricProcess,
    block_device_dir,
    headings,
    human_output,
    next_line,
    run_workload,
    script,
    settle_and_stop,
)
from share_workload import build_c

MIB = 1 << 20
SIZE = 32 * MIB
DIRECT_CHILD = f"""
import mmap, os, sys
path = sys.argv[1]
buf = mmap.mmap(-1, {MIB})          # page-aligned, as O_DIRECT needs
buf.write(b"b" * {MIB})
sys.stdin.readline()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
for _ in range({SIZE // MIB}):
    os.write(fd, buf)
os.fsync(fd)
os.close(fd)
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print("written", int(io["write_bytes"]), flush=True)
sys.stdin.readline()
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
total = 0
while (n := os.readv(fd, [buf])) > 0:
    total += n
os.close(fd)
print("read", total, flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


def go(child: subprocess.Popen) -> list[str]:
    return next_line(child).split()


def traced_direct_io(*tool_args: str) -> tuple[MetricProcess, int, int, int]:
    """(finished tool, child pid, write_bytes from the child's /proc/self/io, bytes read back)."""
    directory, _ = block_device_dir()
    with tempfile.TemporaryDirectory(dir=directory, prefix="biopwise-test-") as tmp:
        child = run_workload(DIRECT_CHILD, os.path.join(tmp, "direct.bin"))
        tool = MetricProcess("biopwise", "0.5", "--maxrows", "1000",
                             *[a.replace("CHILD", str(child.pid)) for a in tool_args])
        try:
            tool.wait_meta()
            word, proc_write_bytes = go(child)
            assert word == "written"
            word, read_back = go(child)
            assert word == "read" and int(read_back) == SIZE
            # completions of the last requests land in the interval after
            settle_and_stop(tool)
        finally:
            tool.kill()
            child.stdin.close()
            child.wait()
    return tool, child.pid, int(proc_write_bytes), int(read_back)


def rows_of(tool: MetricProcess, pid: int) -> list[dict]:
    return [r for r in tool.of_kind("row") if r["pid"] == pid]


def test_direct_io_attributed_to_the_child():
    tool, pid, proc_write_bytes, _ = traced_direct_io()
    rows = rows_of(tool, pid)
    written = sum(r["write_bytes"] for r in rows)
    read = sum(r["read_bytes"] for r in rows)
    print(f"write_bytes {written} vs {SIZE} and /proc/PID/io {proc_write_bytes}; read_bytes {read} vs {SIZE}")
    assert abs(written - SIZE) <= 0.02 * SIZE, written
    assert abs(written - proc_write_bytes) <= 0.02 * proc_write_bytes, (written, proc_write_bytes)
    assert read == SIZE, read    # O_DIRECT: each byte read once from the disk
    _, device = block_device_dir()
    assert all(device in r["devices"].split(",") for r in rows)
    assert sum(r["write_ios"] for r in rows) >= SIZE // (4 * MIB)    # no request is larger than 4 MiB here
    assert all(r["avg_lat_us"] > 0 and r["avg_size"] > 0 for r in rows)
    # the summaries add up the rows
    summaries = tool.of_kind("summary")
    assert sum(s["write_bytes"] for s in summaries) >= written
    assert all(s["bytes_per_s"] >= 0 for s in summaries)


# Map calls through bpf(), walked over and over: each runs with BPF programs on classic tracepoints
# disabled on its CPU, so an I/O completion interrupt landing in one runs no such program (the reader of
# every metric makes these calls each interval).
MAP_CALLS_C = r"""
#include <linux/bpf.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static long map_call(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof(*a)); }
int main(void) {
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.map_type = BPF_MAP_TYPE_HASH; a.key_size = 4; a.value_size = 8; a.max_entries = 4096;
    int fd = map_call(BPF_MAP_CREATE, &a);
    if (fd < 0) return 1;
    uint64_t value = 1;
    for (uint32_t k = 0; k < 4096; k++) {
        memset(&a, 0, sizeof(a)); a.map_fd = fd; a.key = (uint64_t)&k; a.value = (uint64_t)&value;
        map_call(BPF_MAP_UPDATE_ELEM, &a);
    }
    for (;;)
        for (uint32_t k = 0; k < 4096; k++) {
            memset(&a, 0, sizeof(a)); a.map_fd = fd; a.key = (uint64_t)&k; a.value = (uint64_t)&value;
            map_call(BPF_MAP_LOOKUP_ELEM, &a);
        }
}
"""


def test_kernels_without_block_io_start_count_at_issue(monkeypatch, tmp_path):
    """Built as on a kernel before 6.5 (no block_io_start): the issuing task is the owner, the request is
    counted at its first issue and matched at completion by its address. Beside a process making map
    calls on each CPU (completions whose classic tracepoint programs are skipped), the 32 MiB read back
    are all there, to the byte (before the match by address, up to 5 of its 1 MiB reads went uncounted), the
    32 MiB written too, each request with a latency."""
    monkeypatch.setenv("BCCTOOL_FAULTS", "-DFAULT_NO_IO_START=1")
    exe = build_c(MAP_CALLS_C, tmp_path, "map_calls")
    callers = [subprocess.Popen([exe]) for _ in range(os.cpu_count() or 1)]
    try:
        tool, pid, proc_write_bytes, _ = traced_direct_io()
    finally:
        for caller in callers:
            caller.kill()
            caller.wait()
    assert tool.records[0]["attribution"] == "issuer (block_rq_issue)"
    child = rows_of(tool, pid)
    written, read = sum(r["write_bytes"] for r in child), sum(r["read_bytes"] for r in child)
    print(f"without block_io_start: the child's rows: {child}; all: {[(r['comm'], r['read_bytes'], r['write_bytes']) for r in tool.of_kind('row')]}")
    assert read == SIZE and written >= SIZE, (written, read)
    assert abs(written - proc_write_bytes) <= 0.02 * proc_write_bytes, (written, proc_write_bytes)
    assert all(r["avg_lat_us"] > 0 for r in tool.of_kind("row"))


def test_pid_and_device_filters():
    _, device = block_device_dir()
    tool, pid, proc_write_bytes, _ = traced_direct_io("-p", "CHILD", "--device", device)
    assert tool.records[0]["filters"]["filter_pid"] == pid
    assert {r["pid"] for r in tool.of_kind("row")} == {pid}
    written = sum(r["write_bytes"] for r in rows_of(tool, pid))
    assert abs(written - SIZE) <= 0.02 * SIZE, written


def test_unknown_device_is_a_one_line_error():
    result = subprocess.run([PYTHON, script("biopwise"), "--device", "nosuchdisk"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "nosuchdisk" in result.stderr


def test_human_output_has_columns():
    out = human_output("biopwise", "0.3", "2")
    assert headings(out, "PID") == ["PID", "Command", "Devices", "Read", "Write", "R I/Os", "W I/Os", "Avg size", "Sync",
                                    "Async", "Avg latency (TIME)"]
    assert "Totals: Read " in out


TIMED_READS = 200
TIMED_CHILD = f"""
import mmap, os, sys, time
path = sys.argv[1]
with open(path, "wb") as f:            # the file is on disk before tracing starts
    f.write(os.urandom({TIMED_READS} * 4096))
    f.flush()
    os.fsync(f.fileno())
buf = mmap.mmap(-1, 4096)
print("ready", flush=True)
sys.stdin.readline()
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
spent = 0
for i in range({TIMED_READS}):
    start = time.perf_counter_ns()
    assert os.preadv(fd, [buf], i * 4096) == 4096
    spent += time.perf_counter_ns() - start
os.close(fd)
print("done", spent, flush=True)
sys.stdin.readline()
"""


def test_latency_histogram_counts_each_direct_read_within_the_time_the_reads_took():
    """200 O_DIRECT 4 KiB reads, each timed by the child: the rows of `-p CHILD` hold exactly 200 read
    I/Os and the `latency` hist records exactly as many requests, and the device time they give (each
    bucket's lower bound) fits in the time the child measured around its reads."""
    directory, _ = block_device_dir()
    with tempfile.TemporaryDirectory(dir=directory, prefix="biopwise-lat-") as tmp:
        child = run_workload(TIMED_CHILD, os.path.join(tmp, "timed.bin"))
        try:
            assert child.stdout.readline().split() == ["ready"]
            tool = MetricProcess("biopwise", "0.5", "-p", str(child.pid))
            try:
                tool.wait_meta()
                word, spent_ns = go(child)
                assert word == "done"
                settle_and_stop(tool)
            finally:
                tool.kill()
        finally:
            child.stdin.close()
            child.wait()
    hists = [r for r in tool.of_kind("hist") if r["name"] == "latency"]
    assert hists and all(r["unit"] == "us" for r in hists)
    assert all(r["total"] == sum(b["count"] for b in r["buckets"]) for r in hists)
    requests = sum(r["total"] for r in hists)
    rows = rows_of(tool, child.pid)
    read_ios = sum(r["read_ios"] for r in rows)
    lost = {r["source"]: r["total"] for r in tool.of_kind("lost")}
    print(f"{read_ios} read I/Os and {requests} latencies of {TIMED_READS} reads; lost: {lost}")
    assert sum(r["write_ios"] for r in rows) == 0
    # A request is counted at its issue, in the issuing task, and timed at its completion. It is missed
    # only when block_io_start's tracepoint program was skipped (io_start_unpaired), counted lost; those
    # counts are the whole machine's, so they bound what the child lost.
    missed = sum(n for source, n in lost.items() if source == "io_start_unpaired" or source.startswith("skipped:"))
    assert TIMED_READS - missed <= read_ios <= TIMED_READS, (read_ios, lost)
    # The kernel now and then runs no program at all for a completion that ftrace records (2 of ~24,000
    # in ~400 runs of test_cgroups_writes, both in a softirq on top of PID 1's thread): that request is
    # counted, untimed, and completion_unseen says so when its entry is met again. At that rate two in one
    # run of 200 come once in ~7,000 runs: one is let through before completion_unseen has said it.
    assert read_ios - 1 - lost.get("completion_unseen", 0) <= requests <= read_ios, (requests, read_ios, lost)
    floor_us = sum(b["lo"] * b["count"] for r in hists for b in r["buckets"])
    assert 0 < floor_us <= int(spent_ns) / 1000, (floor_us, int(spent_ns) / 1000)
