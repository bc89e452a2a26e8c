"""The window's "Run a command" box end to end, with the real controller and real BPF: sysnest started
on the command's own cgroup counts the getppid calls of the command and its three children (a known
number), nothing of a workload outside, and the box shows the command's exit status 3."""

from __future__ import annotations

import os

import pytest
from cgroup_fixtures import FORK_THREE, GETPPID, check_fork_three_counted, workload_in
from collector_stub import CollectorStub
from gui_fakes import make_window
from helpers import PYTHON, end_workload

from host import preflight

pytestmark = [pytest.mark.bpf, pytest.mark.slow]


def test_the_box_counts_the_command_and_its_children_only(qtbot, tmp_path):
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController

    script = tmp_path / "fork_three.py"
    script.write_text(FORK_THREE)
    stub = CollectorStub().start()
    outside = workload_in(None, GETPPID, "200000")     # getppid all through the run, outside the command
    outside.stdin.write("\n")
    outside.stdin.flush()
    try:
        controller = MonitorController(server_url=stub.url, state_dir=str(tmp_path / "state"), relay=GuiThreadRelay())
        window = make_window(qtbot, tmp_path, controller, verdicts=preflight.metric_verdicts(), server_url=stub.url)
        form = window.forms["sysnest"]
        form.editors["interval"].setText("0.5")
        for key in ("top", "details_top"):
            form.editors[key].setText("1000")
        window.set_checked(["sysnest"])
        window.ui.command_line.setText(f"{PYTHON} {script}")
        assert window.command.start()
        qtbot.waitUntil(lambda: window.command.run is None, timeout=150_000)
        status = window.ui.command_status.text()
        outcome = window.command.last_outcome
        assert status.startswith("exit status 3 · "), status
        assert outcome["exit"] == 3 and not os.path.exists(outcome["cgroup"])
        qtbot.waitUntil(lambda: "sysnest" not in window.running, timeout=30_000)
        window.close()                       # flushes the transport: every record at the stub
        records = stub.records("sysnest")
    finally:
        end_workload(outside, timeout=120)
        stub.stop()
    rows = [r for r in records if r["kind"] == "row" and r["level"] == "detail"]
    check_fork_three_counted(rows, outside.pid, outcome["cgroup"])
