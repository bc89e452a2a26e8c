"""`main_app.py --headless --command`: the command runs in a cgroup of its own that the metrics filter on
from its first instruction; its children's work is counted, nothing from outside is, and its exit status
is the run's."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from cgroup_fixtures import FORK_THREE, GETPPID, check_fork_three_counted, workload_in
from collector_stub import CollectorStub
from helpers import PYTHON, ROOT, end_workload

pytestmark = [pytest.mark.bpf, pytest.mark.slow]


def run_command(tmp_path, command: str, *metric_args: str) -> tuple[subprocess.CompletedProcess, dict, list]:
    stub = CollectorStub().start()
    summary_file = tmp_path / "summary.json"
    try:
        done = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                               "--arg", "sysnest.interval=0.5", "--arg", "sysnest.top=1000",
                               "--arg", "sysnest.details_top=1000", *metric_args, "--server", stub.url,
                               "--state-dir", str(tmp_path), "--summary-json", str(summary_file),
                               "--command", command], cwd=ROOT, capture_output=True, text=True, timeout=180)
        records = stub.records("sysnest")
    finally:
        stub.stop()
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return done, summary, records


def details(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "row" and r["level"] == "detail"]


def test_children_counted_nothing_from_outside_exit_status_3(tmp_path):
    script = tmp_path / "fork_three.py"
    script.write_text(FORK_THREE)
    outside = workload_in(None, GETPPID, "200000")     # getppid all through the run, outside the command
    outside.stdin.write("\n")
    outside.stdin.flush()
    try:
        done, summary, records = run_command(tmp_path, f"{PYTHON} {script}")
    finally:
        end_workload(outside, timeout=120)
    assert done.returncode == 3, done.stderr
    command = summary["command"]
    assert command["exit_status"] == 3 and command["signal"] is None and command["wall_s"] > 0
    assert "exit status 3" in done.stdout
    rows = details(records)
    check_fork_three_counted(rows, outside.pid, command["cgroup"])
    assert not os.path.exists(command["cgroup"])           # the group is gone with the run


def test_work_in_the_first_millisecond_is_counted(tmp_path):
    # dd's 400 one-byte reads and writes take well under a millisecond after it starts
    done, summary, records = run_command(tmp_path, "dd if=/dev/zero of=/dev/null bs=1 count=400 status=none")
    assert done.returncode == 0, done.stderr
    rows = [r for r in details(records) if r["comm"] == "dd"]
    by_call = {}
    for r in rows:
        by_call[r["syscall"]] = by_call.get(r["syscall"], 0) + r["count"]
    print(by_call)
    assert 400 <= by_call.get("read", 0) <= 410 and 400 <= by_call.get("write", 0) <= 410, by_call


def test_a_command_killed_by_a_signal_is_said(tmp_path):
    done, summary, _ = run_command(tmp_path, "sh -c 'kill -TERM $$'")
    assert summary["command"]["signal"] == "SIGTERM"
    assert done.returncode == 128 + 15
    assert "killed by SIGTERM" in done.stdout


def test_a_command_that_cannot_start_is_one_line_and_127(tmp_path):
    done = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                           "--state-dir", str(tmp_path), "--command", "no-such-command-here --x"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 127
    assert done.stderr.strip().count("\n") == 0 and "no-such-command-here" in done.stderr
    assert not list(tmp_path.glob("children/*.json"))      # no metric was started
