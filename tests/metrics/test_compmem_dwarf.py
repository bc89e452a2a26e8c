"""compmem's user stacks against a program whose allocating chain is known: main -> a -> b -> pipe(),
built -O2 -fomit-frame-pointer, holding PIPES pipes open. Each pipe() makes exactly one kmalloc of
512 bytes or more — its ring of 16 pipe_buffer slots (16 x 40 bytes, from kmalloc-1k: 1,024 bytes) —
so with --min-bytes 512 the leak suspects of the program are PIPES allocations, PIPES * 1,024 bytes.
In dwarf mode (the copy unwound in user space) and kernel mode (walked in BPF) their user stack runs
through libc's pipe up to main; the frame-pointer walk of the same program does not. Each pipe() makes
two kmallocs in all (alloc_pipe_info: the pipe_inode_info, then the slots), so without --min-bytes the
kernel mode's count of walks says whether one walk served both."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from helpers import MetricProcess, settle_and_stop

pytestmark = [pytest.mark.bpf, pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

PIPES = 200
BUFFER_ARRAY = 1024   # kcalloc(16, sizeof(struct pipe_buffer) = 40): the kmalloc-1k slab

PACE_US = 150_000   # between the first pipes of a run that paces them (argv[1]: how many)

# Waits for a line; opens PIPES pipes through main -> a -> b -> pipe() (the sums after each call keep
# gcc from turning them into tail calls, which would leave no frame), the first argv[1] of them PACE_US
# apart; says "open"; waits; exits.
PIPES_C = rf"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int fds[{PIPES}][2];
volatile int sink;
__attribute__((noinline)) int b(int i) {{ int r = pipe(fds[i]); sink += r; return r + 1; }}
__attribute__((noinline)) int a(int i) {{ return b(i) * 2 + i; }}
int main(int argc, char **argv)
{{
    char line[8];
    int paced = argc > 1 ? atoi(argv[1]) : 0;
    if (!fgets(line, sizeof line, stdin)) return 1;
    for (int i = 0; i < {PIPES}; i++) {{
        if (a(i) != 2 + i) return 2;
        if (i < paced) usleep({PACE_US});
    }}
    printf("open\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 0;
    return 0;
}}
"""


@pytest.fixture(scope="module")
def piper(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("compmem_dwarf")
    (d / "piper.c").write_text(PIPES_C)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(d / "piper"), str(d / "piper.c")], check=True)
    return str(d / "piper")


def traced(piper: str, *options: str, paced: int = 0, whole_machine: bool = False) -> tuple[MetricProcess, int]:
    """compmem -p (or on the whole machine) on the piper while it opens its pipes, until the metric has
    stopped: its records, the piper's pid."""
    child = subprocess.Popen([piper, str(paced)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    target = [] if whole_machine else ["-p", str(child.pid)]
    tool = MetricProcess("compmem", *target, "0.3", "--sample-bytes", "0", "--stack-sort", "bytes", "--stack-depth", "30", *options)
    try:
        tool.wait_meta()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "open"
        settle_and_stop(tool, intervals=1)   # the piper holds its pipes while the metric reads them
    finally:
        tool.kill()
        if child.poll() is None:
            child.kill()
            child.wait()
    return tool, child.pid


def suspects(piper: str, *options: str, **how: object) -> tuple[list[dict], list[dict], dict]:
    """Allocations of 512 bytes or more: the last interval's stack rows of the piper, summaries, meta."""
    tool, pid = traced(piper, "--min-bytes", "512", *options, **how)
    last = max(r["interval"] for r in tool.of_kind("summary"))
    rows = [r for r in tool.of_kind("row") if r["level"] == "stack" and r["pid"] == pid and r["interval"] == last]
    return rows, tool.of_kind("summary"), tool.of_kind("meta")[0]


@pytest.fixture(scope="module")
def dwarf_run(piper) -> tuple[list[dict], list[dict], dict]:
    return suspects(piper, "--user-stacks", "dwarf")


@pytest.fixture(scope="module")
def kernel_run(piper) -> tuple[list[dict], list[dict], dict]:
    return suspects(piper, "--user-stacks", "kernel")


def whole(frames: list[str]) -> bool:
    """Innermost first: libc's pipe (or pipe2), then b, a, main of the piper."""
    names = [f.split(" [")[0] for f in frames]
    return len(names) >= 4 and "pipe" in names[0] and names[1:4] == ["b", "a", "main"]


def pipe_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if any("alloc_pipe_info" in f for f in r["kernel_frames"])]


def test_leak_suspects_carry_the_whole_user_chain_and_the_workloads_bytes(dwarf_run):
    rows, summaries, meta = dwarf_run
    assert meta["user_stacks"] == "dwarf"
    pipes = pipe_rows(rows)
    print([(r["active_allocs"], r["outstanding_bytes"], r["user_frames"][:5]) for r in rows])
    chained = [r for r in pipes if whole(r["user_frames"])]
    # one group: every pipe's buffer array, from the one chain, its bytes those of the workload
    assert len(chained) == 1, [(r["active_allocs"], r["user_frames"][:5]) for r in pipes]
    assert chained[0]["active_allocs"] == PIPES
    assert chained[0]["outstanding_bytes"] == PIPES * BUFFER_ARRAY
    assert sum(r["active_allocs"] for r in pipes) == PIPES
    used = {k: sum(s["user_stacks"][k] for s in summaries) for k in ("copies", "complete", "failed", "not_copied")}
    # one copy per pipe() (each allocating syscall once, whatever it allocates), all unwound whole
    assert used["copies"] >= PIPES and used["not_copied"] == 0, used
    assert used["complete"] >= PIPES and used["failed"] == 0, used


def test_frame_pointer_walk_of_the_same_program_is_not_whole(piper):
    rows, summaries, meta = suspects(piper, "--user-stacks", "fp")
    assert meta["user_stacks"] == "fp" and "user_stacks" not in summaries[-1]
    pipes = pipe_rows(rows)
    assert sum(r["active_allocs"] for r in pipes) == PIPES
    assert sum(r["outstanding_bytes"] for r in pipes) == PIPES * BUFFER_ARRAY
    assert not any(whole(r["user_frames"]) for r in pipes), [r["user_frames"] for r in pipes]


def test_no_stacks_walks_no_user_stack(piper):
    rows, _, meta = suspects(piper, "--stacks", "0")
    assert meta["user_stacks"] == "none" and rows == []


def test_kernel_walks_give_the_whole_chain_to_every_pipe(kernel_run):
    """-p: the piper's mappings and rows are loaded before tracing starts, so no walk of it goes by frame
    pointers (a process met for the first time would have its first few so, until they load: hence
    95 %, not all)."""
    rows, summaries, meta = kernel_run
    assert meta["user_stacks"] == "kernel"
    mine = sum(r["active_allocs"] for r in rows)
    chained = sum(r["active_allocs"] for r in rows if whole(r["user_frames"]))
    walks = {k: sum(s["user_stacks"][k] for s in summaries) for k in summaries[-1]["user_stacks"]}
    print(f"{chained}/{mine} allocations carry b -> a -> main; walks {walks}")
    print([(r["active_allocs"], r["user_frames"][:5]) for r in rows])
    assert chained >= 0.95 * mine and mine >= PIPES
    assert walks["complete"] >= PIPES and walks["failed"] == 0 and walks["not_stored"] == 0, walks
    # its tables loaded before tracing started: no walk, no frame by frame pointers
    assert walks["frame_pointers"] == 0 and sum(s["kernel_unwind"]["rows_pending_frames"] for s in summaries) == 0
    assert summaries[-1]["kernel_unwind"]["files"] >= 2   # the piper's and libc's rows


def test_a_process_met_for_the_first_time_is_walked_by_frame_pointers_until_its_tables_load(piper):
    """The whole machine: the piper is met at its first pipe(), walked by frame pointers until its
    mappings are loaded, then its files' rows one a walk (each a round trip through user space, ms).
    Its first pipes come PACE_US apart, so only those few lack the chain."""
    rows, summaries, _ = suspects(piper, "--user-stacks", "kernel", paced=8, whole_machine=True)
    mine = sum(r["active_allocs"] for r in rows)
    chained = sum(r["active_allocs"] for r in rows if whole(r["user_frames"]))
    walks = {k: sum(s["user_stacks"][k] for s in summaries) for k in summaries[-1]["user_stacks"]}
    pending = sum(s["kernel_unwind"]["rows_pending_frames"] for s in summaries)
    print(f"{chained}/{mine} allocations carry b -> a -> main; the machine's walks {walks}, "
          f"{pending} frames walked by frame pointers while their file's rows were pending")
    print([(r["active_allocs"], r["user_frames"][:5]) for r in rows])
    assert chained >= 0.95 * mine and mine >= PIPES
    assert walks["frame_pointers"] >= 1, "the piper's first walk: its mappings were not loaded yet"


def test_kernel_walks_count_what_dwarf_copies_count(kernel_run, dwarf_run):
    """The same workload's pipe allocations, as each mode groups them: (allocations, bytes) of the rows
    with the whole chain and of all the pipe rows."""
    def counts(rows: list[dict]) -> tuple:
        pipes = pipe_rows(rows)
        chained = [r for r in pipes if whole(r["user_frames"])]
        return (sum(r["active_allocs"] for r in chained), sum(r["outstanding_bytes"] for r in chained),
                sum(r["active_allocs"] for r in pipes), sum(r["outstanding_bytes"] for r in pipes))

    assert counts(kernel_run[0]) == counts(dwarf_run[0]) == (PIPES, PIPES * BUFFER_ARRAY, PIPES, PIPES * BUFFER_ARRAY)


def test_kernel_mode_walks_each_syscall_once(piper):
    """Every allocation traced (no --min-bytes): each pipe() makes two kmallocs, and one walk serves both.
    A few more walks are the piper's other allocating syscalls (its reads and writes of stdin/stdout)."""
    tool, pid = traced(piper, "--user-stacks", "kernel")
    walks = sum(s["user_stacks"]["walks"] for s in tool.of_kind("summary"))
    allocs = max(r["allocs"] for r in tool.of_kind("row") if r["level"] == "process" and r["pid"] == pid)
    print(f"{allocs} allocations, {walks} walks for {PIPES} pipe() calls")
    assert allocs >= 2 * PIPES
    assert PIPES <= walks <= PIPES + max(10, PIPES // 20)
