"""The kernel's unwinder (bpf/kunwind.h, tables from bcctool/kunwind.py) against the user-space one
(bcctool/unwind.py) on the same samples: bpf/cpuprofile.c built with -DUSER_KERNEL -DUNWIND_CHECK sends,
per sample, the pcs it unwound in the kernel beside a copy of the registers and the top of the stack
(bpf/ustack.h, what --user-stacks dwarf unwinds), and the two are compared frame by frame. Workloads:
the chain main -> a -> b -> c -> hot and the hotspots program built -O2 -fomit-frame-pointer, Debian's
python3 (no frame pointers) and bash in busy loops."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import threading
import time
from collections import Counter

import pytest
import stack_samples as ss
from helpers import ROOT
from share_workload import HOTSPOTS_C

from bcctool.kunwind import KernelTables
from bcctool.procmaps import ProcessMaps
from bcctool.ringreader import RingReader
from bcctool.unwind import USTACK_HEADER, Unwinder

pytestmark = [pytest.mark.bpf, pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

CHECK_HEAD = struct.Struct("<IIIi")  # struct check_t: tgid, owner, then struct ku_stack: depth, outcome
PCS = CHECK_HEAD.size                # then pcs[128]
COPY = PCS + 128 * 8                 # then struct ustack_t


def kernel_and_copies(argv: list[str], want: int, hz: int = 199) -> tuple[list[tuple], ProcessMaps]:
    """`want` samples of a workload (or what 30 s give): [(kernel pcs, kernel outcome, owner, the ustack_t
    copy)], and the workload's maps (read once its tables are loaded, before the first sample)."""
    from bcc import BPF, PerfSWConfig, PerfType  # noqa: PLC0415 - bcc only where BPF runs

    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    child.stdin.write(b"\n")   # hotspots starts on a line of input; the others do not read
    child.stdin.flush()
    try:
        time.sleep(0.3)   # its libraries mapped
        b = BPF(src_file=os.path.join(ROOT, "bpf", "cpuprofile.c"),
                cflags=[f"-I{os.path.join(ROOT, 'bpf')}", "-Wno-macro-redefined", "-Wno-unused-function",
                        "-DUSER_KERNEL", "-DUNWIND_CHECK", "-DUSER_ONLY", f"-DFILTER_PID={child.pid}"])
        tables = KernelTables(b)
        assert tables.meet(child.pid, rows=True)
        maps = ProcessMaps.snapshot(child.pid)
        records: list[tuple] = []
        lock = threading.Lock()

        def on_check(raw: bytes) -> None:
            _tgid, owner, depth, outcome = CHECK_HEAD.unpack_from(raw)
            pcs = struct.unpack_from(f"<{depth}Q", raw, PCS)
            with lock:
                records.append((pcs, outcome, owner, bytes(raw[COPY:])))

        reader = RingReader(b["checks"], on_check, poll_ms=20)
        reader.start()
        b.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK, fn_name="on_sample",
                            sample_freq=hz)
        deadline = time.monotonic() + 30
        while len(records) < want and time.monotonic() < deadline:   # a loaded machine gives fewer a second
            time.sleep(0.1)
        b.detach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK)
        reader.stop()
        b.cleanup()
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
    return records, maps


def compare(records: list[tuple], maps: ProcessMaps) -> tuple[int, Counter, list[str]]:
    """(samples whose pcs are equal, the differences explained by which rule, the unexplained ones)."""
    unwinder = Unwinder()
    equal, explained, unexplained = 0, Counter(), []
    for pcs, outcome, owner, copy in records:
        ours = unwinder.unwind_ustack(maps, copy)
        size = USTACK_HEADER.unpack_from(copy)[4]
        if list(pcs) == ours.pcs:
            equal += 1
        elif not owner:
            explained["frame-pointer walk: the process's tables were not loaded"] += 1
        elif ours.reason in ("stack copy ended", "CFA expression") and list(pcs[: len(ours.pcs)]) == ours.pcs:
            # the kernel reads the whole stack, the copy holds `size` bytes; an expression row is walked
            # by frame pointers in the kernel, where unwind.py stops
            explained[f"user space stopped first: {ours.reason} (copy of {size} bytes)"] += 1
        else:
            first = next((i for i, (k, u) in enumerate(zip(pcs, ours.pcs, strict=False)) if k != u),
                         min(len(pcs), len(ours.pcs)))
            where = maps.find(ours.pcs[first - 1] if first else 0)
            unexplained.append(f"frame {first}: kernel {[hex(p) for p in pcs[first:first + 2]]} outcome {outcome}, "
                               f"unwind.py {[hex(p) for p in ours.pcs[first:first + 2]]} ({ours.reason}); "
                               f"the frame before in {where.path if where else 'no mapping'}")
    return equal, explained, unexplained


@pytest.fixture(scope="module")
def workloads(tmp_path_factory) -> dict[str, list[str]]:
    d = str(tmp_path_factory.mktemp("kunwind"))
    chain = ss.build(d, "chain", ss.CHAIN_C, "-O2", "-fomit-frame-pointer")
    hotspots = ss.build(d, "hotspots", HOTSPOTS_C, "-O2", "-fomit-frame-pointer")
    return {
        "chain -O2 -fomit-frame-pointer": [chain],
        "chain under 60 recursive calls": [chain, "60"],   # 66 frames: the walk's fifth program (tail calls)
        "hotspots -O2 -fomit-frame-pointer": [hotspots, "hot", "30"],
        "python3": ["/usr/bin/python3", "-c", ss.PYTHON_LOOP],
        "bash": ["/bin/bash", "-c", "i=0; while :; do i=$((i + 1)); done"],
    }


@pytest.mark.parametrize("name", ["chain -O2 -fomit-frame-pointer", "chain under 60 recursive calls", "hotspots -O2 -fomit-frame-pointer", "python3", "bash"])
def test_kernel_and_user_space_unwinders_agree_frame_by_frame(workloads, name):
    argv = workloads[name]
    if not os.path.exists(argv[0]):
        pytest.skip(f"no {argv[0]}")
    records, maps = kernel_and_copies(argv, 300)
    equal, explained, unexplained = compare(records, maps)
    total = len(records)
    depth = sum(len(r[0]) for r in records) / max(1, total)
    print(f"{name}: {equal} of {total} samples equal frame by frame ({depth:.1f} frames on average); "
          f"explained {dict(explained)}; unexplained {len(unexplained)}: {unexplained[:5]}")
    assert total >= 300
    assert depth >= 5   # whole stacks compared (the shallowest, bash's, are 7 to 12 frames deep)
    assert equal + sum(explained.values()) >= 0.99 * total, unexplained[:10]
    assert not unexplained, unexplained[:10]
