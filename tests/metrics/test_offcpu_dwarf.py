"""offcpu's DWARF user stacks against a program whose call chain is known: main -> a -> b -> read() on a
pipe, built -O2 -fomit-frame-pointer, blocking once per byte the test writes (30 ms after the reader
acknowledged the last one). Its stack must run through libc's read up to main; the frame-pointer walk
of the same program must not."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest
from helpers import MetricProcess, settle_and_stop

pytestmark = [pytest.mark.bpf, pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

READER_C = r"""
#include <unistd.h>
volatile long sink;
__attribute__((noinline)) long b(int fd)
{
    char c;
    long n = read(fd, &c, 1);
    if (n == 1 && write(1, &c, 1) != 1)   /* the ack: the feeder's next byte comes 30 ms after it */
        return 0;
    sink += n;
    return n * 3;
}
__attribute__((noinline)) long a(int fd) { return b(fd) * 5 + 1; }
int main(void) { while (a(0) > 1) ; return 0; }   /* a() is 1 at end of input */
"""
WRITES = 40


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("offcpu_dwarf")
    (d / "reader.c").write_text(READER_C)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(d / "reader"), str(d / "reader.c")], check=True)
    return str(d / "reader")


def traced_stacks(reader: str, *options: str) -> tuple[list[dict], list[dict], dict]:
    """offcpu on the reader while the test feeds it WRITES bytes: its stack rows, summaries, meta."""
    child = subprocess.Popen([reader], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    mode = () if "--user-stacks" in options else ("--user-stacks", "dwarf")   # kernel is the default
    # every block's stacks (--stack-every 1): which blocks get which kind of user stack is what is checked
    tool = MetricProcess("offcpu", "-p", str(child.pid), "0.5", "--stack-every", "1", *mode, *options)
    try:
        meta = tool.wait_meta()

        def feed() -> None:
            for _ in range(WRITES):
                time.sleep(0.03)
                child.stdin.write(b"x")
                child.stdin.flush()
                child.stdout.read(1)

        feeder = threading.Thread(target=feed)
        feeder.start()
        feeder.join()
        # the reader lives on (blocked in its next read) while the metric reads its last blocks: a
        # metric -p ends with its target, and blocks after its last read would go unread
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        if child.poll() is None:
            child.kill()
            child.wait()
    rows = [r for r in tool.of_kind("row") if r["level"] == "stack" and r["pid"] == child.pid]
    return rows, tool.of_kind("summary"), meta


def reaches_main(frames: list[str]) -> bool:
    """Innermost first: libc's read, then b, a, main of the reader."""
    names = [f.split(" [")[0] for f in frames]
    return len(names) >= 4 and "read" in names[0] and names[1:4] == ["b", "a", "main"]


def test_blocked_read_stack_runs_through_libc_to_main(reader):
    rows, summaries, meta = traced_stacks(reader)
    assert meta["user_stacks"] == "dwarf"
    blocks = sum(r["count"] for r in rows)
    whole = sum(r["count"] for r in rows if reaches_main(r["user_frames"]))
    print(f"{whole} of {blocks} blocks with the whole chain;", [r["user_frames"] for r in rows][:3])
    # one block per byte written, unless the loaded machine kept the reader away from read() for 30 ms
    assert blocks >= 0.8 * WRITES
    assert whole >= 0.95 * blocks
    outcomes = {k: sum(s["dwarf_stacks"][k] for s in summaries) for k in ("complete", "truncated", "failed", "kept_fp")}
    assert outcomes["complete"] >= whole and outcomes["failed"] == 0, outcomes
    heaviest = max(rows, key=lambda r: r["total_ms"])
    assert reaches_main(heaviest["user_frames"]) and heaviest["folded"].startswith("reader;")
    assert "read" in ";".join(heaviest["kernel_frames"])


def test_frame_pointer_walk_of_the_same_reader_stops_short(reader):
    rows, summaries, meta = traced_stacks(reader, "--user-stacks", "fp")
    assert meta["user_stacks"] == "fp" and "dwarf_stacks" not in summaries[-1]
    blocks = sum(r["count"] for r in rows)
    assert blocks >= 0.8 * WRITES
    assert sum(r["count"] for r in rows if reaches_main(r["user_frames"])) <= 0.2 * blocks


def test_short_blocks_keep_frame_pointer_stacks(reader):
    rows, summaries, _ = traced_stacks(reader, "--dwarf-min-us", "10000000")  # no block lasts 10 s
    assert sum(s["dwarf_stacks"]["complete"] for s in summaries) == 0
    assert sum(r["count"] for r in rows) >= 0.8 * WRITES


@pytest.mark.parametrize("size", ["100", "1000000"])
def test_stack_size_out_of_range_is_one_line_error(size):
    tool = MetricProcess("offcpu", "--stack-size", size, json_output=False)
    _, err = tool.proc.communicate(timeout=60)
    assert tool.proc.returncode == 2
    assert len(err.strip().splitlines()) == 1 and "--stack-size" in err


def test_dwarf_stack_cache_is_written(tmp_path):
    """An object without a search table (.eh_frame_hdr), whose FDEs cannot be looked up one by one, has
    its CFI parsed whole, and the table goes to the state directory's cfi/ under its build-id, so the
    next run skips the parse. (Objects with the search table parse only the FDEs they need, and keep
    nothing on disk.)"""
    from bcctool.unwind import default_cache_dir

    cache = default_cache_dir()
    assert cache and os.path.isdir(cache)
    (tmp_path / "reader.c").write_text(READER_C)
    exe = str(tmp_path / "reader_no_hdr")
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wl,--no-eh-frame-hdr", "-Wl,--build-id", "-o", exe,
                    str(tmp_path / "reader.c")], check=True)
    notes = subprocess.run(["readelf", "-n", exe], capture_output=True, text=True, check=True).stdout
    table = os.path.join(cache, notes.split("Build ID:")[1].split()[0] + ".cfi")
    if os.path.exists(table):
        os.unlink(table)   # an earlier run's
    rows, _, _ = traced_stacks(exe)
    assert os.path.exists(table)
    # and the table parsed whole unwinds the reader as the lazy one does
    assert any(reaches_main(r["user_frames"]) for r in rows)
