"""cpuprofile --user-stacks dwarf (and kernel, the same CFI unwound in BPF) against stacks whose shape is known (issue 14's ground truth):
main -> a -> b -> c -> hot built -O2 -fomit-frame-pointer (stack_samples.CHAIN_C), Debian's own
/usr/bin/python3 (no frame pointers) in a busy loop, and a recursion 2,000 frames deep. The chains
are the ones the workloads are written with, and perf --call-graph dwarf finds them too
(tests/metrics/test_unwind.py checks the unwinder against perf on the same programs)."""

from __future__ import annotations

import os
import shutil

import pytest
import stack_samples as ss
from helpers import contains, cpuprofile_of, user_names

pytestmark = [pytest.mark.bpf, pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> str:
    return ss.build(str(tmp_path_factory.mktemp("cpuprofile_dwarf")), "chain", ss.CHAIN_C, "-O2", "-fomit-frame-pointer")


def profile(argv: list[str], *options: str, seconds: float = 3.0) -> tuple[list[dict], list[dict]]:
    """cpuprofile -U of a running workload for `seconds`: its stack records (frames root first) and the
    summaries."""
    stacks, summaries, _ = cpuprofile_of(argv, *options, seconds=seconds)
    return stacks, summaries


def share(stacks: list[dict], has) -> tuple[int, int]:
    total = sum(r["count"] for r in stacks)
    return sum(r["count"] for r in stacks if has(user_names(r))), total


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])
def test_omit_frame_pointer_chain_whole_in_dwarf_mode_not_in_fp(chain, mode):
    stacks, summaries = profile([chain], "--user-stacks", mode)
    whole, total = share(stacks, lambda n: contains(n, ss.CHAIN))
    print(f"{mode}: {whole}/{total} samples carry main→a→b→c→hot; outcomes", [s.get("unwound") for s in summaries])
    assert total >= 100 and whole >= 0.95 * total
    assert sum(s["unwound"].get("complete", 0) for s in summaries) >= 0.95 * total
    if mode != "dwarf":
        return   # frame pointers once, beside dwarf
    fp_stacks, fp_summaries = profile([chain], "--user-stacks", "fp")
    fp_whole, fp_total = share(fp_stacks, lambda n: contains(n, ss.CHAIN))
    print(f"fp: {fp_whole}/{fp_total} samples carry the chain")  # the reason for the feature
    assert fp_total >= 100 and fp_whole <= 0.2 * fp_total
    assert "unwound" not in fp_summaries[-1]


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])
def test_debian_python3_reaches_main_through_the_eval_loop(mode):
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3")
    stacks, _ = profile(["/usr/bin/python3", "-c", ss.PYTHON_LOOP], "--user-stacks", mode)

    def through_main(names: list[str]) -> bool:
        # root first; Debian's main() tail-calls Py_BytesMain, so libc's __libc_start_call_main is its caller
        if "__libc_start_call_main" not in names or "Py_RunMain" not in names:
            return False
        return "_PyEval_EvalFrameDefault" in names[names.index("Py_RunMain") :]

    good, total = share(stacks, through_main)
    print(f"{mode}: python3: {good}/{total} samples reach main through Py_RunMain and _PyEval_EvalFrameDefault")
    assert total >= 100 and good >= 0.9 * total


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])   # the copy ends first; in BPF, the frame limit
def test_deep_recursion_is_reported_truncated(chain, mode):
    stacks, summaries = profile([chain, "2000"], "--user-stacks", mode)
    outcomes = {k: sum(s["unwound"].get(k, 0) for s in summaries) for k in ("complete", "truncated", "failed")}
    total = sum(r["count"] for r in stacks)
    print(f"{mode}: 2,000 frames deep:", outcomes, "of", total)
    assert outcomes["truncated"] >= 0.95 * total and outcomes["complete"] == 0
    for r in stacks:  # what was unwound is right: the recursion above a -> b -> c -> hot, no wrong frame
        names = user_names(r)
        if names[-4:] == ["a", "b", "c", "hot"]:
            assert set(names[:-4]) == {"rec"}
