"""bench/process_cpu.py refuses what it cannot run in one line, before it starts its workload."""

import os
import subprocess

import pytest
from helpers import PYTHON, ROOT

SCRIPT = os.path.join(ROOT, "bench", "process_cpu.py")


@pytest.mark.parametrize("argv, says", [
    (["--metrics", "nosuch"], "no metric named 'nosuch'"),
    (["--metrics", "cpuprofile", "--set", "freq=9"], "--set freq=9: cpuprofile has no argument 'freq'"),
    (["--metrics", "cpuprofile", "--set", "frequency=0"], "--set frequency=0: must be at least 1"),
    (["--metrics", "sysnest", "--base-tree", "/"], "--base-tree /: not a checkout of this project"),
])
def test_bad_arguments_get_one_line_and_status_2(argv, says):
    run = subprocess.run([PYTHON, SCRIPT, *argv], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"process_cpu.py: error: {says}") and "Traceback" not in run.stderr
