"""cpuprofile names a process that execs after its maps were read from its new image, not the old one: a
Python process, its maps read as cpuprofile -p starts, execs the C share workload (tests/support/
share_workload.py), as `main_app.py --headless --command`'s gated child does once it is released. Its
samples are named (not "[unknown]") and its hot functions' shares are the workload's own, by its thread
CPU clock."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import MetricProcess, settle_and_stop, user_names
from share_workload import build_shares, own_shares

pytestmark = pytest.mark.bpf

HZ = 499
SECONDS = 2.0
# waits for a line, then becomes the workload (same pid), which prints "ready PID" and waits again
EXEC_LATER = "import os, sys; sys.stdin.readline(); os.execv(sys.argv[1], sys.argv[1:])"


def test_a_process_that_execs_is_named_from_its_new_maps(tmp_path):
    exe = build_shares(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", EXEC_LATER, exe, "700", str(SECONDS)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "-F", str(HZ), "--user-stacks", "fp", "0.5")
    try:
        tool.wait_meta()   # the Python image's maps are read by now
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["ready", str(child.pid)]   # exec'd
        child.stdin.write("\n")
        child.stdin.flush()
        own = own_shares(json.loads(child.stdout.readline()))
        settle_and_stop(tool)
    finally:
        tool.kill()
        child.communicate("\n", timeout=30)
    stacks = [s for s in tool.of_kind("stack") if s["comm"] == "shares"]
    total = sum(s["count"] for s in stacks)
    named = sum(s["count"] for s in stacks if user_names(s) and "[unknown]" not in user_names(s))
    share = {f: 100.0 * sum(s["count"] for s in stacks if f in user_names(s)) / max(total, 1) for f in own}
    print(f"{named}/{total} samples named; shares {share} against the workload's own {own}")
    assert total > SECONDS * HZ * 0.5
    assert named >= 0.99 * total
    for f, pct in own.items():
        assert abs(share[f] - pct) <= 5, (f, share[f], pct)
