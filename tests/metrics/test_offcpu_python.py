"""offcpu's Python frames against a program whose call chains are known: Debian's /usr/bin/python3 running
<module> -> outer -> middle, which calls inner and other in turn, each sleeping 20 ms. Its blocks' stacks
must carry those chains, half the time each, with the lines the source calls from, right above the
_PyEval_EvalFrameDefault that runs them and below the libc call they block in (one native stack for
both: since 3.11 a Python call makes no C frame): in dwarf mode (the chain taken with each long block's stack
copy) and in kernel mode (taken at every switch out, stored by its hash beside the walked stack)."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import MetricProcess, settle_and_stop

pytestmark = [
    pytest.mark.bpf,
    pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs Debian's /usr/bin/python3"),
]

PROGRAM = """\
import time


def inner():
    time.sleep(0.02)


def other():
    time.sleep(0.02)


def middle():
    while True:
        inner()
        other()


def outer():
    middle()


outer()
"""


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.splitlines(), 1) if line == text)


@pytest.mark.parametrize("mode", ["dwarf", "kernel"])
def test_blocked_python_chain_stands_above_its_eval_loop(tmp_path, mode):
    path = tmp_path / "sleeper.py"
    path.write_text(PROGRAM)
    child = subprocess.Popen(["/usr/bin/python3", str(path)])
    tool = MetricProcess("offcpu", "-p", str(child.pid), "--user-stacks", mode, "1")
    try:
        meta = tool.wait_meta()
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 3, timeout=60)
        settle_and_stop(tool, intervals=0)
    finally:
        tool.kill()
        child.kill()
        child.wait()
    assert meta["python_frames"] == "on" and meta["user_stacks"] == mode
    sleep = line_of("    time.sleep(0.02)")   # the first of the two: inner's
    outer = [f"outer (sleeper.py:{line_of('    middle()')})", f"<module> (sleeper.py:{line_of('outer()')})"]
    chains = {"inner": [f"inner (sleeper.py:{sleep})", f"middle (sleeper.py:{line_of('        inner()')})", *outer],
              "other": [f"other (sleeper.py:{line_of('def other():') + 1})",
                        f"middle (sleeper.py:{line_of('        other()')})", *outer]}

    def whole(user: list[str], chain: list[str]) -> bool:   # innermost first
        if chain[0] not in user:
            return False
        at = user.index(chain[0])
        return (user[at : at + 4] == chain and user[at + 4].startswith("_PyEval_EvalFrameDefault ")
                and any(f.startswith("Py_RunMain ") for f in user[at + 4 :])
                and any("clock_nanosleep" in f for f in user[:at]))

    # from the second interval: blocks that ended before the process was registered have none
    rows = [r for r in tool.of_kind("row") if r.get("level") == "stack" and r["interval"] >= 2 and r["pid"] == child.pid]
    total = sum(r["total_ms"] for r in rows)
    good = {name: sum(r["total_ms"] for r in rows if whole(r["user_frames"], chain)) for name, chain in chains.items()}
    walks = [s["python"] for s in tool.of_kind("summary") if s["interval"] >= 2]
    print(f"python3 blocked {total:.0f} ms; under <module> -> outer -> middle -> inner / other: {good}; walks {walks}")
    assert total >= 1500 and sum(good.values()) >= 0.9 * total
    # each 20-ms sleep in turn: half the time each, give or take a block at each end of the intervals
    assert all(0.4 * total <= ms <= 0.6 * total for ms in good.values()), good
    assert sum(w.get("complete", 0) for w in walks) >= 0.9 * sum(sum(w.values()) for w in walks) > 0
