"""The window's differential against a baseline from a saved session, on real profiles: cpuprofile records
two runs of a workload whose hot functions split its CPU 70/30, then 30/70 (tests/support/share_workload.py,
each call timed on the workload's own thread-CPU clock), each saved by the app's recorder; the second is
opened in the window, the first is its baseline from file, and each function's change of share is the
workload's own change within 5 points."""

from __future__ import annotations

import select

import pytest
from gui_fakes import make_window
from helpers import MetricProcess, sampling_started, settle_and_stop
from share_workload import build_shares, own_shares, shares

from monitor.session import SessionWriter

pytestmark = pytest.mark.bpf

HZ = 997


def record_run(exe: str, a_permille: int, path: str, seconds: float = 3.0) -> dict[str, float]:
    """cpuprofile -p on one run of the workload, its records saved as the window's Record… saves them;
    the workload's own shares."""
    child = shares(exe, a_permille, seconds)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "-F", str(HZ), "0.5")
    try:
        tool.wait_meta()
        sampling_started(tool.proc.pid)
        child.release()
        while not select.select([child.proc.stdout], [], [], 0.2)[0]:
            tool.drain(0.05)         # a metric blocked on a full pipe stops reading its ring buffer
        report = child.report()
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        child.end()
    writer = SessionWriter(path)
    writer.write(tool.records)
    writer.close()
    assert not writer.error and writer.written == len(tool.records)
    return own_shares(report)


def test_diff_against_a_saved_session_follows_the_workloads_own_change(qtbot, tmp_path):
    exe = build_shares(tmp_path)
    before_path, after_path = str(tmp_path / "before.ndjson"), str(tmp_path / "after.ndjson")
    before = record_run(exe, 700, before_path)
    after = record_run(exe, 300, after_path)
    truth = {f: after[f] - before[f] for f in before}
    assert truth["hot_a"] < -30 and truth["hot_b"] > 30, (before, after)      # the workload did change

    window = make_window(qtbot, tmp_path, show=True)
    window.session.open(after_path)
    qtbot.waitUntil(lambda: "cpuprofile" in window.session.opened, timeout=30_000)
    panel = window.tab_for("cpuprofile").chart
    dialog = panel.ask_baseline("file")
    dialog.path.setText(before_path)
    dialog.load()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=30_000)
    qtbot.waitUntil(lambda: panel.redraw(force=True) is not None and panel.comparing() and not panel.store.backlog,
                    timeout=30_000)
    panel.redraw(force=True)
    changes = {r["function"]: r["change_pct"] for r in panel.change_model.rows}
    print(f"own shares before {before}, after {after}; the window's changes {changes}")
    for f, change in truth.items():
        assert abs(changes[f] - change) <= 5.0, (f, changes[f], change)
    assert "baseline: file before.ndjson" in panel.status.text()
