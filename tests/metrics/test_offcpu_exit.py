"""offcpu keeps the names of a process that exits before its stacks are read: a child that sleeps and
exits within the interval still shows its libc frame (clock_nanosleep) — whether it ran before offcpu
started (its maps are read at start; with -p the metric then ends after that interval) or was born
after (its maps are read when it first blocks). And a thread's entry in the map of blocks in progress, kept
between its blocks, goes when it exits."""

import json
import subprocess

import pytest
from helpers import MetricProcess, end_workload, run_workload

from host.fdinfo import fd_infos

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


THREADS_THAT_BLOCK_AND_EXIT = """
import sys, threading, time
sys.stdin.readline()
def worker():
    for _ in range(3):
        time.sleep(0.002)
for _ in range(10):
    threads = [threading.Thread(target=worker) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print("done", flush=True)
sys.stdin.readline()
"""


def bpf_map_entries(pid: int, name: str) -> int:
    """Entries of the map `name` that process pid holds (bpftool, by the map ids in its fdinfo)."""
    ids = {int(info["map_id"]) for info in fd_infos(pid) or () if "map_id" in info}
    for map_id in ids:
        shown = json.loads(subprocess.run(["bpftool", "map", "show", "id", str(map_id), "-j"],
                                          capture_output=True, text=True, check=True).stdout)
        if shown.get("name") == name:
            return len(json.loads(subprocess.run(["bpftool", "map", "dump", "id", str(map_id), "-j"],
                                                 capture_output=True, text=True, check=True).stdout))
    raise AssertionError(f"process {pid} holds no map {name!r} (maps {sorted(ids)})")


def test_a_thread_entry_kept_between_blocks_goes_at_its_exit():
    """A thread keeps its entry in `start` between its blocks (bpf/offcpu.c, block_ended): 300 threads that
    block three times each and exit leave none behind, or the map would fill with the dead."""
    child = run_workload(THREADS_THAT_BLOCK_AND_EXIT)
    tool = MetricProcess("offcpu", "-p", str(child.pid), "0.5")
    try:
        tool.wait_meta()
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        tool.read_until(lambda r: r["kind"] == "summary")   # an interval closed after the last exit
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 2)
        left = bpf_map_entries(tool.proc.pid, "start")
        blocks = sum(s["total_events"] for s in tool.of_kind("summary"))   # the rows are the top threads only
    finally:
        end_workload(child)
        tool.stop()
    assert blocks >= 300 * 3 * 0.9, blocks   # the workers' sleeps were traced (a start may be missed)
    assert left <= 2, f"{left} entries in `start` after 300 threads blocked and exited (the main thread's: 1)"
