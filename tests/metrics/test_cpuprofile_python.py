"""cpuprofile's Python frames (issue 14's stretch) against a program whose call chain is known: Debian's
/usr/bin/python3 running <module> -> outer -> middle -> inner_hot, a busy loop. The names and lines are
the program's own (its source says which line calls which); the native frames around them are those
the CFI unwinding finds (test_cpuprofile_dwarf.py checks them against the program's shape), in user space
(--user-stacks dwarf) or in BPF (kernel)."""

from __future__ import annotations

import os

import pytest
from helpers import cpuprofile_of

pytestmark = [
    pytest.mark.bpf,
    pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs Debian's /usr/bin/python3"),
]

PROGRAM = """\
def inner_hot():
    x = 0
    while True:
        x += 1


def middle():
    inner_hot()


def outer():
    middle()


outer()
"""


def profile(path: str, *options: str, seconds: float = 3.0) -> tuple[list[dict], list[dict], dict]:
    """cpuprofile -U -p of the program for `seconds`: its stack records, the summaries and the meta."""
    return cpuprofile_of(["/usr/bin/python3", path], *options, seconds=seconds)


@pytest.fixture
def program(tmp_path) -> str:
    path = tmp_path / "chain.py"
    path.write_text(PROGRAM)
    return str(path)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.splitlines(), 1) if line == text)


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])   # native stacks unwound in user space or in BPF
def test_python_chain_stands_in_order_above_its_eval_loop(program, mode):
    stacks, summaries, meta = profile(program, "--user-stacks", mode)
    assert meta["python_frames"] == "on" and meta["user_stacks"] == mode
    calls = [f"<module> (chain.py:{line_of('outer()')})", f"outer (chain.py:{line_of('    middle()')})",
             f"middle (chain.py:{line_of('    inner_hot()')})"]
    hot_lines = {f"inner_hot (chain.py:{n})" for n in (line_of("    while True:"), line_of("        x += 1"))}

    def whole(frames: list[dict]) -> bool:
        names = [f["name"] for f in frames]
        if "_PyEval_EvalFrameDefault" not in names:
            return False
        at = names.index("_PyEval_EvalFrameDefault")
        python = [f for f in frames if f["kind"] == "python"]
        # root first: main ... Py_RunMain ... _PyEval_EvalFrameDefault, then the Python chain, then
        # whatever C the loop was in (no other Python frame anywhere)
        return ("Py_RunMain" in names[:at] and names[at + 1 : at + 4] == calls and names[at + 4] in hot_lines
                and len(python) == 4 and all(f["module"] == program for f in python))

    total = sum(r["count"] for r in stacks)
    good = sum(r["count"] for r in stacks if whole(r["frames"]))
    outcomes = {k: sum(s.get("python", {}).get(k, 0) for s in summaries) for k in ("complete", "unmatched")}
    print(f"{mode}: python3: {good}/{total} samples carry Py_RunMain;...;_PyEval_EvalFrameDefault;<module>;outer;middle;"
          f"inner_hot; walks {outcomes}")
    assert total >= 100 and good >= 0.9 * total
    assert outcomes["complete"] >= 0.9 * total


def test_python_frames_off_leaves_the_interpreter_s_c_frames(program):
    stacks, summaries, meta = profile(program, "--python-frames", "off", seconds=1.0)
    assert meta["python_frames"] == "off"
    assert sum(r["count"] for r in stacks) >= 50
    assert not [f for r in stacks for f in r["frames"] if f["kind"] == "python"]
    assert all("python" not in s for s in summaries)
