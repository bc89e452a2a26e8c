"""offcpu's Python frames against a program whose call chain is known: Debian's /usr/bin/python3 running
<module> -> outer -> middle -> inner, which sleeps 20 ms at a time. Its long blocks' stacks must carry
that chain, with the lines the source calls from, right above the _PyEval_EvalFrameDefault that runs
it and below the libc call it blocks in."""

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


def middle():
    while True:
        inner()


def outer():
    middle()


outer()
"""


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.splitlines(), 1) if line == text)


def test_blocked_python_chain_stands_above_its_eval_loop(tmp_path):
    path = tmp_path / "sleeper.py"
    path.write_text(PROGRAM)
    child = subprocess.Popen(["/usr/bin/python3", str(path)])
    tool = MetricProcess("offcpu", "-p", str(child.pid), "1")
    try:
        meta = tool.wait_meta()
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 3, timeout=60)
        settle_and_stop(tool, intervals=0)
    finally:
        tool.kill()
        child.kill()
        child.wait()
    assert meta["python_frames"] == "on"
    chain = [f"inner (sleeper.py:{line_of('    time.sleep(0.02)')})", f"middle (sleeper.py:{line_of('        inner()')})",
             f"outer (sleeper.py:{line_of('    middle()')})", f"<module> (sleeper.py:{line_of('outer()')})"]

    def whole(user: list[str]) -> bool:   # innermost first
        if chain[0] not in user:
            return False
        at = user.index(chain[0])
        return (user[at : at + 4] == chain and user[at + 4].startswith("_PyEval_EvalFrameDefault ")
                and any(f.startswith("Py_RunMain ") for f in user[at + 4 :])
                and any("clock_nanosleep" in f for f in user[:at]))

    # from the second interval: blocks that ended before the process was registered have none
    rows = [r for r in tool.of_kind("row") if r.get("level") == "stack" and r["interval"] >= 2 and r["pid"] == child.pid]
    total = sum(r["total_ms"] for r in rows)
    good = sum(r["total_ms"] for r in rows if whole(r["user_frames"]))
    walks = [s["python"] for s in tool.of_kind("summary") if s["interval"] >= 2]
    print(f"python3 blocked {total:.0f} ms, {good:.0f} ms under <module> -> outer -> middle -> inner; walks {walks}")
    assert total >= 1500 and good >= 0.9 * total
    assert sum(w.get("complete", 0) for w in walks) >= 0.9 * sum(sum(w.values()) for w in walks) > 0
