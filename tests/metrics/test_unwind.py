"""bcctool.unwind against stacks whose shape is known: samples of running programs taken with ptrace
(tests/support/stack_samples.py: ip, sp, bp and 16 KiB of stack, what the BPF side hands over), unwound with
the objects' CFI and named by bcctool.symbols. No BPF needed."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections import Counter

import pytest
import stack_samples as ss

from bcctool.cfi import LazyCfiTable, search_table
from bcctool.procmaps import ProcessMaps
from bcctool.symbols import Symbolizer
from bcctool.unwind import COMPLETE, FAILED, TRUNCATED, USTACK_HEADER, Unwinder, prune_cache

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("gcc") is None or not os.path.exists("/usr/bin/python3"), reason="needs gcc and Debian's python3"
    ),
]
SAMPLES = 60


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("unwind"))
    built = ss.build_tools(d)
    built["dir"] = d
    built["cache"] = os.path.join(d, "cfi-cache")
    # the chain again with frame pointers and no CFI at all: only the frame-pointer fallback can walk it
    built["fp_only"] = ss.build(
        d,
        "chain_fp",
        ss.CHAIN_C,
        "-O2",
        "-fno-omit-frame-pointer",
        "-mno-omit-leaf-frame-pointer",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
    )
    built["no_cfi"] = ss.build(
        d,
        "chain_nocfi",
        ss.CHAIN_C,
        "-O2",
        "-fomit-frame-pointer",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
    )
    built["stripped"] = os.path.join(d, "chain_stripped")
    subprocess.run(["objcopy", "--strip-all", built["chain"], built["stripped"]], check=True)
    return built


class Sampled:
    """A workload running, its maps snapshot, and SAMPLES ptrace samples of its main thread."""

    def __init__(self, tools: dict[str, str], argv: list[str], name: str, ready: bytes | None = None) -> None:
        self.child = subprocess.Popen(argv, stdout=subprocess.PIPE if ready else None)
        if ready:   # sampled once the workload says its stack is as deep as it gets
            assert self.child.stdout.readline() == ready
        else:
            time.sleep(0.3)  # past the dynamic loader, into the loop
        self.pid = self.child.pid
        self.maps = ProcessMaps.snapshot(self.pid)
        self.tools, self.name = tools, name
        self.samples = []
        self.more()

    def more(self) -> list[ss.Sample]:
        """SAMPLES more samples, added to self.samples; the new ones."""
        new = ss.capture(self.tools["snap"], self.pid, SAMPLES, os.path.join(self.tools["dir"], f"{self.name}.bin"))
        assert len(new) == SAMPLES
        self.samples += new
        return new

    def stop(self) -> None:
        self.child.kill()
        self.child.wait()


@pytest.fixture
def sampled(tools):
    runs = []

    def start(argv: list[str], name: str, ready: bytes | None = None) -> Sampled:
        runs.append(Sampled(tools, argv, name, ready))
        return runs[-1]

    yield start
    for run in runs:
        run.stop()


def names_of(sym: Symbolizer, pid: int, pcs: list[int]) -> list[str]:
    """Root first, as a flame graph reads; a return address named by its call instruction."""
    return [f.name for f in sym.user_stack(pid, pcs)][::-1]


def has_chain(names: list[str], chain: list[str]) -> bool:
    k = len(chain)
    return any(names[i : i + k] == chain for i in range(len(names) - k + 1))


def test_omit_frame_pointer_chain_unwinds_whole(tools, sampled):
    run = sampled([tools["chain"]], "chain")
    sym, dwarf, fp = Symbolizer(), Unwinder(cache_dir=tools["cache"]), Unwinder(use_cfi=False)
    whole = fp_whole = 0
    for s in run.samples:
        result = dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack)
        names = names_of(sym, run.pid, result.pcs)
        if result.outcome == COMPLETE and names[-5:] == ss.CHAIN and "__libc_start_call_main" in names:
            whole += 1
        fp_names = names_of(sym, run.pid, fp.unwind(run.maps, s.ip, s.sp, s.bp, s.stack).pcs)
        fp_whole += fp_names[-5:] == ss.CHAIN
    assert whole >= 0.95 * SAMPLES, dwarf.reasons
    assert dwarf.outcomes[COMPLETE] == whole
    # the reason for the feature: a frame-pointer walk of the same samples rarely gets past hot
    assert fp_whole <= 0.2 * SAMPLES, (fp_whole, fp.reasons)


def test_debian_python3_reaches_main(tools, sampled):
    run = sampled(["/usr/bin/python3", "-c", ss.PYTHON_LOOP], "python")
    sym, dwarf = Symbolizer(), Unwinder(cache_dir=tools["cache"])
    good = 0
    for s in run.samples:
        result = dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack)
        names = names_of(sym, run.pid, result.pcs)
        # Debian's main() is a tail call to Py_BytesMain; libc's __libc_start_call_main is its caller
        if (
            result.outcome == COMPLETE
            and names[:3] == ["_start", "__libc_start_main", "__libc_start_call_main"]
            and "Py_RunMain" in names
            and "_PyEval_EvalFrameDefault" in names[names.index("Py_RunMain") :]
        ):
            good += 1
    assert good >= 0.9 * SAMPLES, dwarf.reasons


def test_deep_recursion_is_truncated_not_wrong(tools, sampled):
    run = sampled([tools["chain"], "2000"], "deep", ready=b"deep\n")
    sym, dwarf = Symbolizer(), Unwinder(cache_dir=tools["cache"], max_frames=5000)
    for s in run.samples:
        result = dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack)
        assert (result.outcome, result.reason) == (TRUNCATED, "stack copy ended")
        names = names_of(sym, run.pid, result.pcs)
        assert names[-4:] == ["a", "b", "c", "hot"]
        assert set(names[:-4]) == {"rec"} and len(names) > 100  # every frame above is the recursion
    assert Unwinder(max_frames=50).unwind(run.maps, s.ip, s.sp, s.bp, s.stack).outcome == TRUNCATED


def test_frame_pointers_where_no_cfi_covers(tools, sampled):
    run = sampled([tools["fp_only"]], "fp_only")
    sym, dwarf = Symbolizer(), Unwinder(cache_dir=tools["cache"])
    whole = 0
    for s in run.samples:
        result = dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack)
        names = names_of(sym, run.pid, result.pcs)
        # gcc 12 keeps no frame in the leaf hot (-mno-omit-leaf-frame-pointer notwithstanding), so the
        # walk from hot goes to its caller's caller, as every frame-pointer walk does
        whole += result.outcome == COMPLETE and names[-4:] == ["main", "a", "b", "hot"]
        assert "__libc_start_call_main" in names  # and on through libc's CFI to _start
    assert whole >= 0.95 * SAMPLES, dwarf.reasons


def test_no_cfi_and_no_frame_pointer_fails_counted(tools, sampled):
    run = sampled([tools["no_cfi"]], "no_cfi")
    sym, dwarf = Symbolizer(), Unwinder(cache_dir=tools["cache"])
    for s in run.samples:
        result = dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack)
        names = names_of(sym, run.pid, result.pcs)
        assert not (result.outcome == COMPLETE and names[-5:] == ss.CHAIN)
    assert dwarf.outcomes[FAILED] + dwarf.outcomes[TRUNCATED] >= 0.9 * SAMPLES
    assert sum(dwarf.outcomes.values()) == SAMPLES


def test_stripped_deleted_exited_binary_still_unwinds(tools, sampled):
    gone = os.path.join(tools["dir"], "gone")
    shutil.copy(tools["stripped"], gone)
    run = sampled([gone], "gone")
    os.unlink(gone)
    sym = Symbolizer()
    sym.snapshot(run.pid)
    maps = ProcessMaps.snapshot(run.pid)  # taken while it runs: holds the deleted file open
    run.stop()
    dwarf = Unwinder()  # no disk cache: the CFI must come from the deleted file itself
    complete = 0
    for s in run.samples:
        result = dwarf.unwind(maps, s.ip, s.sp, s.bp, s.stack)
        names = names_of(sym, run.pid, result.pcs)
        complete += result.outcome == COMPLETE and len(names) >= 8 and names[-5].startswith("gone+0x")
    assert complete >= 0.95 * SAMPLES, dwarf.reasons


def test_disk_cache_serves_a_second_unwinder(tools, sampled):
    run = sampled([tools["chain"]], "cached")
    # whole tables (what an object without an .eh_frame_hdr gets) are the ones saved
    first = Unwinder(cache_dir=tools["cache"], lazy=False)
    expected = [first.unwind(run.maps, s.ip, s.sp, s.bp, s.stack).pcs for s in run.samples]
    assert any(f.endswith(".cfi") for f in os.listdir(tools["cache"]))
    second = Unwinder(cache_dir=tools["cache"], lazy=False)
    assert [second.unwind(run.maps, s.ip, s.sp, s.bp, s.stack).pcs for s in run.samples] == expected
    assert second.parse_seconds == 0.0  # every table came from the disk
    tables = sorted(os.listdir(tools["cache"]))
    sizes = {name: os.path.getsize(os.path.join(tools["cache"], name)) for name in tables}
    prune_cache(tools["cache"], sum(sizes.values()) - 1)  # one byte too many: the oldest table goes
    assert len(os.listdir(tools["cache"])) == len(tables) - 1


@pytest.mark.parametrize("workload", ["chain", "python"])
def test_lazy_tables_unwind_as_whole_ones_parsing_a_few_fdes(tools, sampled, workload):
    """One FDE parsed per address looked up (through .eh_frame_hdr) gives the stacks the whole-.eh_frame
    parse gives, and parses a small part of python3's FDEs."""
    argv = [tools["chain"]] if workload == "chain" else ["/usr/bin/python3", "-c", ss.PYTHON_LOOP]
    run = sampled(argv, f"lazy-{workload}")
    lazy, whole = Unwinder(cache_dir=None), Unwinder(cache_dir=None, lazy=False)
    maps = ProcessMaps.snapshot(run.pid)  # a snapshot of its own: a snapshot memoizes each pc's row
    for s in run.samples:
        assert lazy.unwind(run.maps, s.ip, s.sp, s.bp, s.stack).pcs == whole.unwind(maps, s.ip, s.sp, s.bp, s.stack).pcs
    assert lazy.outcomes == whole.outcomes and lazy.outcomes[COMPLETE] >= 0.9 * SAMPLES
    assert lazy.parse_seconds == 0.0 and whole.parse_seconds > 0  # no object was parsed whole
    tables = [lazy.object_for(m).table for m in run.maps.mappings if m.is_file and lazy.object_for(m)]
    assert tables and all(isinstance(t, LazyCfiTable) for t in tables)
    assert sum(t.parsed_fdes for t in tables) < 0.2 * sum(len(t) for t in tables)


def test_search_table_refuses_what_it_cannot_read():
    assert search_table(b"", 0) is None
    assert search_table(bytes([2, 0x1B, 0x03, 0x3B]) + bytes(12), 0) is None  # version 2
    assert search_table(bytes([1, 0x1B, 0x03, 0x1B]) + bytes(12), 0) is None  # table not datarel sdata4
    assert search_table(bytes([1, 0x1B, 0x03, 0x3B]) + bytes(4) + (1000).to_bytes(4, "little"), 0) is None  # short
    unsorted = (2).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") for v in (64, 8, 32, 16))
    assert search_table(bytes([1, 0x1B, 0x03, 0x3B]) + bytes(4) + unsorted, 0) is None
    ok = (2).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") for v in (32, 8, 64, 16))
    starts, fdes = search_table(bytes([1, 0x1B, 0x03, 0x3B]) + bytes(4) + ok, 0x1000)
    assert list(starts) == [0x20, 0x40] and list(fdes) == [0x8, 0x10]  # from the header's vaddr


def test_garbage_never_raises_and_is_counted(tools, sampled):
    run = sampled([tools["chain"]], "garbage")
    rng = random.Random(7)
    dwarf = Unwinder(cache_dir=tools["cache"])
    text = [m for m in run.maps.mappings if m.is_file]
    trials = 400
    for i in range(trials):
        s = run.samples[i % SAMPLES]
        kind = i % 4
        if kind == 0:  # a real ip, a stack of random bytes
            args = (s.ip, s.sp, s.bp, rng.randbytes(rng.choice([0, 7, 64, 4096, 16384])))
        elif kind == 1:  # return addresses that point into code, at random
            words = [rng.choice(text).start + rng.randrange(4096) for _ in range(512)]
            args = (s.ip, s.sp, rng.getrandbits(64), b"".join(w.to_bytes(8, "little") for w in words))
        elif kind == 2:  # registers at random
            args = (rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64), s.stack)
        else:  # the stack copy cut short
            args = (s.ip, s.sp, s.bp, s.stack[: rng.randrange(len(s.stack) + 1)])
        result = dwarf.unwind(run.maps, *args)
        assert result.outcome in (COMPLETE, TRUNCATED, FAILED) and len(result.pcs) <= dwarf.max_frames + 1
    assert sum(dwarf.outcomes.values()) == trials
    assert Unwinder().unwind(None, 1, 2, 3, b"").outcome == FAILED  # a process never seen


def perf_chains(argv: list[str], data: str) -> list[list[str]]:
    """Root-first named frames of each sample `perf record --call-graph dwarf` takes of argv (a run of
    a fixed amount of CPU work: the sample count does not depend on the machine's load)."""
    subprocess.run(
        ["perf", "record", "-q", "-F", "199", "--call-graph", "dwarf", "-o", data, "--", *argv],
        check=False,
        capture_output=True,
        timeout=120,
    )
    out = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, timeout=300).stdout
    chains = []
    for block in out.split("\n\n"):
        lines = [ln.split(None, 1)[1] for ln in block.splitlines()[1:] if ln.startswith(("\t", " ")) and ln.strip()]
        chains.append([ln.rsplit(" (", 1)[0].rsplit("+0x", 1)[0] for ln in lines][::-1])
    return [c for c in chains if c]


def below(names: list[str], top: str, leaf: str) -> tuple[str, ...] | None:
    """The named frames from `top` down to the first `leaf` under it (unnamed ones left out)."""
    if top not in names or leaf not in names[names.index(top) :]:
        return None
    part = names[names.index(top) :]
    part = part[: part.index(leaf) + 1]
    return tuple(n for n in part if n != "[unknown]" and "+0x" not in n)


@pytest.mark.skipif(shutil.which("perf") is None and not os.environ.get("CI"), reason="perf is not installed")
@pytest.mark.parametrize("workload", ["chain", "python"])
def test_same_chains_as_perf_dwarf(tools, sampled, workload):
    if workload == "chain":  # 4 rounds of hot, 0.12-0.25 CPU s each: 2 rounds gave perf 49 samples at 199 Hz once
        bounded, forever = [tools["chain"], "0", "4"], [tools["chain"]]
    else:
        bounded = ["/usr/bin/python3", "-c", ss.python_for_cpu(0.75)]   # ~150 samples at 199 Hz
        forever = ["/usr/bin/python3", "-c", ss.PYTHON_LOOP]
    top, leaf = ("main", "hot") if workload == "chain" else ("Py_BytesMain", "_PyEval_EvalFrameDefault")
    theirs = [below(c, top, leaf) for c in perf_chains(bounded, os.path.join(tools["dir"], f"{workload}.perf"))]
    run = sampled(forever, f"{workload}-vs-perf")
    sym, dwarf = Symbolizer(), Unwinder(cache_dir=tools["cache"])
    ours = [
        below(names_of(sym, run.pid, dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack).pcs), top, leaf)
        for s in run.samples
    ]
    assert len(theirs) >= 50
    common_theirs, n_theirs = Counter(c for c in theirs if c).most_common(1)[0]
    common_ours, n_ours = Counter(c for c in ours if c).most_common(1)[0]
    assert common_ours == common_theirs
    assert n_theirs >= 0.9 * len(theirs) and n_ours >= 0.9 * len(ours)
    if workload == "chain":
        assert common_ours == tuple(ss.CHAIN)


def test_bpf_ustack_record_unwinds_like_the_registers(tools, sampled):
    """unwind_ustack reads bpf/ustack.h's struct ustack_t: its copy starts at sp's page, below sp."""
    run = sampled([tools["chain"]], "ustack")
    dwarf = Unwinder(cache_dir=tools["cache"])
    for s in run.samples[:10]:
        base = s.sp & ~4095
        raw = USTACK_HEADER.pack(s.ip, s.sp, s.bp, base, s.sp - base + len(s.stack), 0) + bytes(s.sp - base) + s.stack
        assert dwarf.unwind_ustack(run.maps, raw).pcs == dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack).pcs
    no_user = USTACK_HEADER.pack(0, 0, 0, 0, 0, 1)
    assert (dwarf.unwind_ustack(run.maps, no_user).outcome, dwarf.unwind_ustack(run.maps, b"x").outcome) == (
        FAILED,
        FAILED,
    )


def test_vdso_frames_unwound_and_named(tools, sampled):
    """A loop of clock_gettime spends its time in the vDSO, which no file holds: its CFI and names come
    from the image the kernel maps into every process (read from the test's own memory)."""
    code = "import time\nwhile True:\n    time.clock_gettime(time.CLOCK_MONOTONIC)\n"
    run = sampled(["/usr/bin/python3", "-c", code], "vdso")
    sym, dwarf = Symbolizer(), Unwinder(cache_dir=tools["cache"])
    in_vdso = complete = 0
    batch = run.samples
    # a sample lands in the vDSO about one time in five here (12-15 of 60; the interpreter's loop takes
    # the rest), but only 4 of 60 did in fresh run 21: sampled until ten have, not 60 hoped to give five
    while in_vdso < 10 and len(run.samples) <= 20 * SAMPLES:
        for s in batch:
            leaf = sym.user(run.pid, s.ip)
            if leaf.module == "[vdso]":
                in_vdso += 1
                result = dwarf.unwind(run.maps, s.ip, s.sp, s.bp, s.stack)
                complete += result.outcome == COMPLETE and "Py_RunMain" in names_of(sym, run.pid, result.pcs)
                assert "clock_gettime" in leaf.name or "vdso" in leaf.name, leaf
        batch = run.more() if in_vdso < 10 else []
    print(f"{in_vdso} of {len(run.samples)} samples in the vDSO, {complete} unwound whole to Py_RunMain")
    assert in_vdso >= 10 and complete >= 0.95 * in_vdso, dwarf.reasons
