"""cpuprofile against workloads whose CPU use is known: a C program (built here with frame pointers) that
spends its one thread in hot_a / hot_b / hot_c and reads its own thread CPU clock around every call, so
each function's share of its CPU time is measured by the workload itself; the same run under
`perf record -F 99 -g`; a read loop on /dev/zero (kernel time); code in an anonymous executable page
named by /tmp/perf-PID.map; the same program stripped, and deleted while it runs."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import time

import pytest
from helpers import MetricProcess, headings, human_output, sampling_started, settle_and_stop
from share_workload import HOTSPOTS_C as WORKLOAD_C
from share_workload import Waiting, build_c

pytestmark = pytest.mark.bpf

HOT = ("hot_a", "hot_b", "hot_c")
HZ = 997


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> str:
    """The workload built with frame pointers everywhere: leaf functions keep theirs, and no caller
    vanishes in a tail call."""
    d = tmp_path_factory.mktemp("cpuprofile")
    return build_c(WORKLOAD_C, d, "hotspots")


class Workload(Waiting):
    """The C program, waiting on stdin until tracing has started."""

    def __init__(self, exe: str, mode: str, seconds: float) -> None:
        super().__init__([exe, mode, str(seconds)])

    def run(self, tool: MetricProcess | None = None) -> dict:
        """Release it; its own report when done. The metric's records are read meanwhile: a metric
        blocked on a full pipe stops reading its ring buffer."""
        self.release()
        while tool and not select.select([self.proc.stdout], [], [], 0.2)[0]:
            tool.drain(0.05)
        return self.report()


def profile_of(exe: str, mode: str, seconds: float, *args: str, perf_out: str | None = None):
    """(the workload's report, cpuprofile's records) for one run of the workload under cpuprofile -p,
    and under `perf record -F 99 -g` too when perf_out is given."""
    child = Workload(exe, mode, seconds)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "-F", str(HZ), *args, "0.5")
    perf = None
    try:
        tool.wait_meta()
        if perf_out:
            perf = subprocess.Popen(["perf", "record", "-F", "99", "-g", "-p", str(child.pid), "-o", perf_out],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)   # perf opens its events before the work starts
        report = child.run(tool)
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        if perf and perf.poll() is None:
            perf.kill()
        child.end()
    return child.pid, report, tool


def stacks_of(tool: MetricProcess, pid: int) -> list[dict]:
    return [r for r in tool.of_kind("stack") if r["pid"] == pid]


def self_shares(stacks: list[dict]) -> dict[str, float]:
    """Percent of the samples whose innermost frame is each function."""
    total = sum(s["count"] for s in stacks)
    out: dict[str, float] = {}
    for s in stacks:
        leaf = s["frames"][-1]["name"]
        out[leaf] = out.get(leaf, 0.0) + 100.0 * s["count"] / total
    return out


def perf_self_shares(path: str) -> dict[str, float]:
    """perf report's self ("no children") percent per symbol."""
    out = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", "sym", "--stdio", "-q",
                          "--percent-limit", "0"], capture_output=True, text=True, check=True).stdout
    shares = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if m:
            shares[m.group(2)] = shares.get(m.group(2), 0.0) + float(m.group(1))
    return shares


@pytest.fixture(scope="module", params=["dwarf", "kernel"])
def hot_run(workload, tmp_path_factory, request):
    """One 8-second run of the hot functions, at ~1 kHz, beside perf at 99 Hz where perf is installed; user
    stacks unwound with CFI in user space (dwarf) or in BPF (kernel)."""
    perf_out = None
    if shutil.which("perf"):
        perf_out = str(tmp_path_factory.mktemp("perf") / "perf.data")
    pid, report, tool = profile_of(workload, "hot", 8.0, "--user-stacks", request.param, perf_out=perf_out)
    assert tool.wait_meta()["user_stacks"] == request.param
    return pid, report, tool, perf_out


def test_self_shares_and_sample_count_match_the_workloads_own_clock(hot_run):
    pid, report, tool, _ = hot_run
    stacks = stacks_of(tool, pid)
    samples = sum(s["count"] for s in stacks)
    truth = {f: 100.0 * report[f] / report["cpu_s"] for f in HOT}
    shares = self_shares(stacks)
    print(f"samples {samples} for {report['cpu_s']:.3f} CPU s at {HZ} Hz; own shares {truth}; cpuprofile {shares}")
    assert samples == pytest.approx(HZ * report["cpu_s"], rel=0.05)
    for f in HOT:
        assert abs(shares.get(f, 0.0) - truth[f]) <= 3.0, (f, shares.get(f), truth[f])
    # the summaries and rows agree with the stack records they came with
    assert sum(s["samples"] for s in tool.of_kind("summary")) == samples
    rows = [r for r in tool.of_kind("row") if r["pid"] == pid and r["function"] == "hot_a"]
    assert rows and sum(r["self_samples"] for r in rows) == sum(
        s["count"] for s in stacks if s["frames"][-1]["name"] == "hot_a")
    assert all(r["self_samples"] <= r["total_samples"] <= r["process_samples"] for r in tool.of_kind("row"))


def test_every_stack_of_a_hot_function_runs_from_main_through_work(hot_run):
    pid, _, tool, _ = hot_run
    stacks = stacks_of(tool, pid)
    hot = [s for s in stacks if s["frames"][-1]["name"] in HOT]
    total = sum(s["count"] for s in stacks)
    assert sum(s["count"] for s in hot) >= 0.9 * total
    # Every one runs main -> work -> hot_x, all in the workload's own binary: a frame-pointer walk (the
    # kernel mode's, until the process's rows are loaded) from hot_x's first instructions, before its
    # frame is pushed, gets its caller back (bpf/fpleaf.h; it missed a few samples in ten thousand).
    whole = [s for s in hot if [f["name"] for f in s["frames"][-3:-1]] == ["main", "work"]]
    assert whole == hot, [s["frames"] for s in hot if s not in whole][:3]
    for s in whole:
        assert all(f["kind"] == "user" and f["module"] == "hotspots" for f in s["frames"][-3:])
    assert all("main" in [f["name"] for f in s["frames"]] for s in hot)


def source_line(text: str, after: str = "") -> int:
    """The line of hotspots.c (WORKLOAD_C as written) that holds `text`, the first after `after`."""
    lines = WORKLOAD_C.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines) if i >= start and text in line) + 1


def test_source_lines_name_the_hot_loop_and_each_call(workload):
    """--source-lines on the -g build: hot_a's samples land on the two lines of its loop (a loop of one
    multiply-add: nothing else in it takes time), and every stack names the call it came through, the
    line of work() that calls hot_a and of main() that calls work."""
    pid, _, tool = profile_of(workload, "hot", 3.0, "--source-lines")
    stacks = stacks_of(tool, pid)
    body = source_line("x = x * 6364136223846793005UL + 1442695040888963407UL;")
    loop = source_line("for (long i = 0; i < n; i++)", after="void hot_a(")
    assert loop == body - 1
    in_a = [s for s in stacks if s["frames"][-1]["name"].startswith("hot_a (")]
    samples = sum(s["count"] for s in in_a)
    on_loop = sum(s["count"] for s in in_a if s["frames"][-1]["name"] in
                  (f"hot_a (hotspots.c:{loop})", f"hot_a (hotspots.c:{body})"))
    print(f"hot_a: {samples} samples, {on_loop} on lines {loop}-{body}: "
          f"{sorted({s['frames'][-1]['name'] for s in in_a})}")
    assert samples > 300 and on_loop >= 0.95 * samples
    calls = (f"main (hotspots.c:{source_line('work(seconds, own);')})",
             f"work (hotspots.c:{source_line('hot_a(a);')})")
    chained = sum(s["count"] for s in in_a if tuple(f["name"] for f in s["frames"][-3:-1]) == calls)
    assert chained >= 0.99 * samples


def test_shares_agree_with_perf_record(hot_run):
    pid, _, tool, perf_out = hot_run
    if not perf_out:
        pytest.fail("perf is not installed (scripts/apt-packages.txt: linux-perf)")
    ours, theirs = self_shares(stacks_of(tool, pid)), perf_self_shares(perf_out)
    print(f"cpuprofile {ours}; perf {theirs}")
    for f in HOT:
        assert abs(ours.get(f, 0.0) - theirs.get(f, 0.0)) <= 5.0, (f, ours.get(f), theirs.get(f))


def whole_chain_share(tool: MetricProcess, pid: int) -> float:
    """The share of the samples in a hot function whose stack runs main -> work -> hot_x."""
    hot = [s for s in stacks_of(tool, pid) if s["frames"][-1]["name"] in HOT]
    whole = [s for s in hot if [f["name"] for f in s["frames"][-3:-1]] == ["main", "work"]]
    return sum(s["count"] for s in whole) / max(1, sum(s["count"] for s in hot))


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])
def test_dwarf_unwinds_code_built_without_frame_pointers(workload, tmp_path, mode):
    exe = str(tmp_path / "hotspots_o2")
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", exe, f"{workload}.c"], check=True)
    pid, _, tool = profile_of(exe, "hot", 1.5, "--user-stacks", mode)
    cfi = whole_chain_share(tool, pid)
    unwound = [s["unwound"] for s in tool.of_kind("summary") if "unwound" in s]
    pid_fp, _, tool_fp = profile_of(exe, "hot", 1.5, "--user-stacks", "fp")
    fp = whole_chain_share(tool_fp, pid_fp)
    print(f"-O2 -fomit-frame-pointer: main -> work -> hot_x in {100 * cfi:.1f} % of samples unwound with "
          f"CFI ({mode}), {100 * fp:.1f} % by frame pointers; outcomes {unwound}")
    assert tool.wait_meta()["user_stacks"] == mode
    assert cfi >= 0.95
    assert fp < cfi


PYTHON_BUSY = """
import sys, time
sys.stdin.readline()
end = time.thread_time() + 2.0
while time.thread_time() < end:
    sum(i * i for i in range(1000))
print("done", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])
def test_dwarf_unwinds_debians_python_to_its_entry(mode):
    """Debian's python3 is built without frame pointers: unwound with CFI, its samples run from the
    interpreter's entry (main, which tail-calls Py_BytesMain) through Py_RunMain to the eval loop."""
    child = subprocess.Popen(["/usr/bin/python3", "-c", PYTHON_BUSY], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "-F", "199", "--user-stacks", mode, "0.5")
    try:
        tool.wait_meta()
        child.stdin.write("\n")
        child.stdin.flush()
        while not select.select([child.stdout], [], [], 0.2)[0]:
            tool.drain(0.05)
        assert child.stdout.readline().strip() == "done"
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        child.stdin.close()
        child.wait(timeout=30)
    stacks = stacks_of(tool, child.pid)
    total = sum(s["count"] for s in stacks)
    whole = 0
    for s in stacks:
        names = [f["name"] for f in s["frames"]]
        entry = "main" in names or "Py_BytesMain" in names
        if entry and "Py_RunMain" in names and "_PyEval_EvalFrameDefault" in names:
            whole += s["count"]
    print(f"{mode}: python3: {whole} of {total} samples run from its entry through Py_RunMain to the eval loop")
    assert total >= 100
    assert whole >= 0.9 * total


def test_kernel_frames_sit_above_the_syscall_entry(workload):
    pid, report, tool = profile_of(workload, "zero", 1.5)
    stacks = stacks_of(tool, pid)
    total = sum(s["count"] for s in stacks)
    in_kernel = [s for s in stacks if any(f["kind"] == "kernel" for f in s["frames"])]
    assert sum(s["count"] for s in in_kernel) >= 0.8 * total, "a read loop on /dev/zero runs in the kernel"
    syscalls = 0
    for s in in_kernel:
        kinds = [f["kind"] for f in s["frames"]]
        first_kernel = kinds.index("kernel")
        assert "user" not in kinds[first_kernel:], "user frames below, kernel frames above"
        if s["frames"][first_kernel]["name"].startswith("entry_SYSCALL_64"):
            assert "main" in [f["name"] for f in s["frames"][:first_kernel]]
            assert "do_syscall_64" in [f["name"] for f in s["frames"][first_kernel:]]
            syscalls += s["count"]
    assert syscalls >= 0.7 * total


def test_perf_map_names_code_in_an_anonymous_page(workload):
    pid, _, tool = profile_of(workload, "jit", 1.5)
    try:
        os.unlink(f"/tmp/perf-{pid}.map")
    except OSError:
        pass
    stacks = stacks_of(tool, pid)
    total = sum(s["count"] for s in stacks)
    jit = sum(s["count"] for s in stacks if s["frames"][-1]["name"] == "jit_spin_loop")
    assert jit >= 0.9 * total, self_shares(stacks)
    # the map's four lines that do not parse (text, a bad size, a blank line, a lone address) are counted
    assert max(s["perf_map_lines_skipped"] for s in tool.of_kind("summary")) == 4


def test_stripped_binary_gives_module_and_offset(workload, tmp_path):
    stripped = str(tmp_path / "stripped")
    subprocess.run(["strip", "--strip-all", "-o", stripped, workload], check=True)
    symbols = {}
    for line in subprocess.run(["nm", workload], capture_output=True, text=True, check=True).stdout.splitlines():
        addr, _, name = line.split()[-3:] if len(line.split()) == 3 else ("0", "", "")
        if name in HOT:
            symbols[name] = int(addr, 16)
    pid, _, tool = profile_of(stripped, "hot", 1.0)
    # weighed by samples, not by distinct stacks: the workload's clock_gettime leaves a few
    # one-sample stacks in libc and the vDSO (2 of 17 distinct user leaves in one CI run)
    user = [s for s in stacks_of(tool, pid) if s["frames"][-1]["kind"] == "user"]
    named = [s for s in user if s["frames"][-1]["name"].startswith("stripped+0x")]
    assert sum(s["count"] for s in named) >= 0.9 * sum(s["count"] for s in user), \
        [(s["frames"][-1], s["count"]) for s in user if s not in named][:5]
    assert all(s["frames"][-1]["module"] == "stripped" for s in named)
    # each offset lies in a hot function of the unstripped twin (sizes from the next symbol up)
    starts = sorted(symbols.values())
    inside = 0
    for s in named:
        off = int(s["frames"][-1]["name"].split("+0x")[1], 16)
        if any(start <= off < start + 256 for start in starts):
            inside += s["count"]
    assert inside >= 0.9 * sum(s["count"] for s in named)


def folded_run(exe: str, seconds: float, *options: str, mode: str = "hot") -> tuple[dict, str, str]:
    """(the workload's report, stdout, stderr) of cpuprofile -p --folded over one run of the workload
    (hot functions, or another mode); the process exits, so cpuprofile names the run, prints it and
    ends with status 0."""
    child = Workload(exe, mode, seconds)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "-F", str(HZ), "--folded", *options,
                         json_output=False)
    try:
        sampling_started(tool.proc.pid)
        report = child.run()
        child.end()
        out, err = tool.proc.communicate(timeout=60)
    finally:
        tool.kill()
    assert tool.proc.returncode == 0, err
    return report, out, err


def test_folded_is_flamegraph_input(workload):
    report, out, _ = folded_run(workload, 0.5)
    lines = out.splitlines()
    assert lines
    counted = 0
    # flamegraph.pl reads "frame;frame;... count": frames without ';' or a line break, one space, an
    # integer count; the first frame is the process
    for line in lines:
        assert re.fullmatch(r"[^;\s][^;\n]*(;[^;\n]+)* [1-9]\d*", line), line
        stack, count = line.rsplit(" ", 1)
        assert stack.split(";")[0] == "hotspots"
        counted += int(count)
    assert counted == pytest.approx(HZ * report["cpu_s"], rel=0.05)


def test_folded_by_frame_pointers_is_counted_in_the_kernel(workload):
    """--folded --user-stacks fp is BCC profile's job and is done its way: samples counted in a kernel
    map by stack id, named at the end. The shares and the sample count still match the workload's own
    clock, and each hot function's stack still runs main -> work -> hot_x."""
    report, out, err = folded_run(workload, 3.0, "--user-stacks", "fp")
    assert "Counted in the kernel" in err
    folded = {}
    for line in out.splitlines():
        stack, count = line.rsplit(" ", 1)
        assert stack.split(";")[0] == "hotspots"
        folded[stack] = int(count)
    total = sum(folded.values())
    shares = {f: 100.0 * sum(n for s, n in folded.items() if s.split(";")[-1] == f) / total for f in HOT}
    truth = {f: 100.0 * report[f] / report["cpu_s"] for f in HOT}
    print(f"samples {total} for {report['cpu_s']:.3f} CPU s at {HZ} Hz; own shares {truth}; counted {shares}")
    assert total == pytest.approx(HZ * report["cpu_s"], rel=0.05)
    for f in HOT:
        assert abs(shares[f] - truth[f]) <= 3.0, (f, shares[f], truth[f])
    hot = {s: n for s, n in folded.items() if s.split(";")[-1] in HOT}
    whole = sum(n for s, n in hot.items() if s.split(";")[-3:-1] == ["main", "work"])
    assert whole >= 0.995 * sum(hot.values()), list(hot)[:3]


def test_counted_in_the_kernel_thousands_of_distinct_stacks_lose_none(workload):
    """The counted mode keeps each distinct stack once under a 64-bit hash. BCC profile's stack map
    (16,384 ids) refuses a stack whose id another took: here, ~2,500 distinct stacks of 4,096 paths
    (left/right 12 levels deep), it lost 193 of 3,457 samples that way (their frames "[lost]")."""
    report, out, err = folded_run(workload, 3.0, "--user-stacks", "fp", mode="paths")
    folded = {}
    for line in out.splitlines():
        stack, count = line.rsplit(" ", 1)
        folded[stack] = int(count)
    total = sum(folded.values())
    lost = {s: n for s, n in folded.items() if "[lost]" in s}
    leaves = {s: n for s, n in folded.items() if s.endswith(";spin_leaf")}
    print(f"samples {total} for {report['cpu_s']:.3f} CPU s at {HZ} Hz; {len(leaves)} distinct leaf "
          f"stacks; lost {sum(lost.values())}: {list(lost)[:3]}; stderr {err[-400:]}")
    assert not lost
    assert total == pytest.approx(HZ * report["cpu_s"], rel=0.05)
    assert len(leaves) >= 1500   # of 4,096: ~one sample a path at 997 Hz
    for stack in leaves:   # each whole: main, paths, then 13 turns with a left or right between each two
        frames = stack.split(";")
        below = frames[frames.index("paths") + 1: -1]
        assert below[::2] == ["turn"] * 13 and set(below[1::2]) <= {"left", "right"}, stack
    assert "stack_id_collision" not in err


@pytest.mark.parametrize("mode", ["fp", "fp folded", "dwarf", "kernel"])
def test_a_function_sampled_before_its_frame_is_linked_keeps_its_caller(workload, mode):
    """`unlinked` spends four of its five instructions with its frame out of the frame-pointer chain
    (entry, push, mov; ret). A frame-pointer walk from there skips its caller unless the profiler puts it
    back (without, in a 1.5-s run: 1,475 of 1,475 such samples lost unlinked_loop); CFI knows where each is."""
    stacks = {}
    if mode == "fp folded":
        report, out, _ = folded_run(workload, 0.5, "--user-stacks", "fp", mode="unlinked")
        for line in out.splitlines():
            stack, count = line.rsplit(" ", 1)
            stacks[tuple(stack.split(";")[1:])] = int(count)
    else:
        pid, report, tool = profile_of(workload, "unlinked", 0.5, "--user-stacks", mode)
        assert tool.wait_meta()["user_stacks"] == mode
        for s in stacks_of(tool, pid):
            frames = tuple(f["name"] for f in s["frames"])
            stacks[frames] = stacks.get(frames, 0) + s["count"]
    total = sum(stacks.values())
    leaf = {s: n for s, n in stacks.items() if s[-1] == "unlinked"}
    broken = {s: n for s, n in leaf.items() if s[-3:-1] != ("main", "unlinked_loop")}
    print(f"{mode}: {total} samples for {report['cpu_s']:.3f} CPU s, {sum(leaf.values())} in unlinked, "
          f"{sum(broken.values())} without its caller: {list(broken)[:2]}")
    assert total == pytest.approx(HZ * report["cpu_s"], rel=0.05)
    assert sum(leaf.values()) >= 0.3 * total
    assert not broken


def test_human_output_has_columns():
    out = human_output("cpuprofile", "-F", "99", "0.5", "1")
    assert headings(out, "PID") == ["PID", "Command", "Self", "Self %", "Total", "Total %", "Function"]
    assert "samples" in out


@pytest.mark.parametrize("args", [["-F", "0"], ["-F", "100000"], ["-p", "999999999"], ["--tid", "999999999"],
                                  ["-U", "-K"]])
def test_bad_input_is_one_line_and_exit_2(args):
    tool = MetricProcess("cpuprofile", *args, json_output=False)
    _, err = tool.proc.communicate(timeout=60)
    assert tool.proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_process_that_exits_is_said_and_ends_the_run(workload):
    child = Workload(workload, "hot", 0.3)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "0.5")
    try:
        tool.wait_meta()
        child.run(tool)
        child.end()
        out, err = tool.proc.communicate(timeout=30)
    finally:
        tool.kill()
    assert tool.proc.returncode == 0, err
    records = tool.records + [json.loads(line) for line in (tool._buf + out).splitlines() if line.strip()]
    ends = [r for r in records if r["kind"] == "end"]
    assert len(ends) == 1 and ends[0]["target"] == {"pid": child.pid} and "exited" in ends[0]["reason"]
    assert records[-1] is ends[0] or all(r["kind"] == "lost" for r in records[records.index(ends[0]) + 1:])
