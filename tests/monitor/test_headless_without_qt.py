"""`main_app.py --headless` never loads Qt: the controller, its workers and the headless loop are plain
Python (the window alone brings PySide6 in). Checked in a fresh interpreter, by importing the headless
path and by real runs of the synthetic `flood` metric (no BPF, no root) to the end and to a SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from helpers import PYTHON, ROOT, SUPPORT

# main_app.main() as `main_app.py` runs it, with the synthetic metric added to the registry first
RUN_HEADLESS = """
import sys
import config
from fakes import FLOOD
config.METRICS.append(FLOOD)
import main_app
status = main_app.main(sys.argv[1:])
print("PySide6 loaded:", "PySide6" in sys.modules, flush=True)
sys.exit(status)
"""
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, SUPPORT])}


def headless_flood(state_dir: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-c", RUN_HEADLESS, "--headless", "--metric", "flood", "--elevate", "",
                             "--state-dir", state_dir, *args], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def children_left(state_dir: str) -> list[str]:
    folder = os.path.join(state_dir, "children")
    return os.listdir(folder) if os.path.isdir(folder) else []


def test_the_headless_path_imports_no_qt():
    """main_app and every module of monitor/ (the command box's thread, monitor/command_run.py, too)."""
    code = ("import importlib, pkgutil, sys, main_app, monitor\n"
            "names = [m.name for m in pkgutil.iter_modules(monitor.__path__, 'monitor.')]\n"
            "[importlib.import_module(name) for name in names]\n"
            "print('monitor.command_run' in names, sorted(m for m in sys.modules if m.startswith('PySide6')))")
    result = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True []\n"


@pytest.mark.slow
def test_a_headless_run_to_its_end_without_qt(tmp_path):
    summary_file = tmp_path / "summary.json"
    run = headless_flood(str(tmp_path), "--arg", "flood.lines=20000", "--summary-json", str(summary_file))
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert "headless: stopping (every metric ended)" in out and "Traceback" not in err
    summary = json.loads(summary_file.read_text())["metrics"]["flood"]
    assert (summary["records"], summary["status"], summary["error"]) == (20_001, 0, "")
    assert out.splitlines()[-1] == "PySide6 loaded: False"
    assert children_left(str(tmp_path)) == []       # the metric's pid file went with its process


@pytest.mark.slow
def test_a_sigterm_stops_a_headless_run_at_once_without_qt(tmp_path):
    run = headless_flood(str(tmp_path), "--arg", "flood.lines=10", "--arg", "flood.linger=60", "--progress", "0.2")
    try:
        for line in run.stdout:             # a progress line every 0.2 s: this loop cannot stall
            if "flood 11 rec" in line:      # the meta record and the ten events are in
                break
        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    assert "headless: stopping (SIGTERM)" in out
    # the app's stderr has no traceback; flood's own (its KeyboardInterrupt at SIGINT) is logged as [flood]
    assert not [line for line in err.splitlines() if "Traceback" in line and not line.startswith("[flood]")], err
    assert took < 3.0, took                 # the loop wakes on the signal; flood ends on SIGINT
    assert out.splitlines()[-1] == "PySide6 loaded: False"
    assert children_left(str(tmp_path)) == []
