"""The overhead budget with real processes: the controller's restart (one stream, a note before the new
run, no end reported between) and `--headless --budget` end to end, with the synthetic `burner` metric
(it spins a share of the CPU, no BPF) and, marked bpf, with real metrics: a tiny budget sees the metric
stopped or switched to its sampling mode as chosen, a line on stderr and a `note` record saying so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from fakes import BURNER
from helpers import PYTHON, ROOT, SUPPORT

from monitor.controller import MonitorController
from monitor.events import EventQueue

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

# main_app.main() as `main_app.py` runs it, with the synthetic metric added to the registry first
RUN_HEADLESS = """
import sys
import config
from fakes import BURNER
config.METRICS.append(BURNER)
import main_app
sys.exit(main_app.main(sys.argv[1:]))
"""
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, SUPPORT])}


def wait_until(events: EventQueue, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        events.wait(0.1)


def test_a_restart_goes_on_in_one_stream_after_its_note(tmp_path):
    events = EventQueue()
    c = MonitorController(None, state_dir=str(tmp_path), registry=[BURNER], relay=events, elevate=[])
    records: list[dict] = []
    finished: list[tuple] = []
    started: list[str] = []
    c.records.connect(lambda name, batch: records.extend(batch))
    c.metric_finished.connect(lambda *end: finished.append(end))
    c.metric_started.connect(started.append)
    try:
        c.start_metric("burner", {"duty": 0.05, "interval": 0.1})
        wait_until(events, lambda: sum(r["kind"] == "summary" for r in records) >= 2)
        note = c.note("burner", {"source": "test", "text": "switching"})
        assert note["kind"] == "note" and note["interval"] == records[-2]["interval"] >= 1
        with pytest.raises(ValueError, match="duty must be at most 1"):
            c.restart_metric("burner", {"duty": 2})
        c.restart_metric("burner", {"duty": 0.01, "interval": 0.1})
        wait_until(events, lambda: sum(r["kind"] == "meta" for r in records) == 2 and records[-1]["kind"] == "summary")
        metas = [i for i, r in enumerate(records) if r["kind"] == "meta"]
        assert metas[0] == 0 and records.index(note) < metas[1]
        assert records[metas[1]]["args"]["duty"] == 0.01
        assert records[metas[0]]["pid"] != records[metas[1]]["pid"]
        assert finished == [] and started == ["burner", "burner"] and c.running() == ["burner"]
        assert c.values_of("burner")["duty"] == 0.01
        assert c.totals["burner"]["records"] == len(records)      # the first run's records count too

        # a stop asked for while a restart is pending is a stop
        c.restart_metric("burner", {"duty": 0.02})
        c.stop_metric("burner")
        wait_until(events, lambda: finished)
        assert finished == [("burner", 0, "")] and c.running() == [] and started == ["burner", "burner"]
        with pytest.raises(ValueError, match="burner is not running"):
            c.restart_metric("burner", {"duty": 0.02})
    finally:
        c.shutdown(10)


def headless(tmp_path, *args: str, metric: str = "burner") -> subprocess.Popen:
    """main_app.py --headless with the burner in the registry (as root: no elevation)."""
    return subprocess.Popen([PYTHON, "-c", RUN_HEADLESS, "--headless", "--metric", metric, "--elevate", "",
                             "--state-dir", str(tmp_path), "--record", str(tmp_path / "run.ndjson"),
                             "--summary-json", str(tmp_path / "summary.json"), *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def budget_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[budget] ")]


def budget_line_then_stop(run: subprocess.Popen, after: float | None) -> tuple[str, str, str]:
    """The first `[budget]` line of a headless run's stderr, then a SIGTERM `after` seconds later (None:
    the run ends by itself): (that line, "" when none came; the rest of stdout; the rest of stderr)."""
    try:
        line = next((line for line in run.stderr if line.startswith("[budget] ")), "")
        if after is not None and line:
            time.sleep(after)
            run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return line.rstrip(), out, err


def recorded(tmp_path) -> list[dict]:
    with open(tmp_path / "run.ndjson") as f:
        return [json.loads(line) for line in f]


def test_a_tiny_budget_stops_the_costliest_metric_headless(tmp_path):
    run = headless(tmp_path, "--arg", "burner.duty=0.3", "--budget", "0.01", "--over-budget", "stop",
                   "--over-budget-for", "1", "--duration", "60", "--progress", "1")
    out, err = run.communicate(timeout=90)
    assert run.returncode == 0, err
    assert "headless: stopping (every metric ended)" in out          # the budget stopped the only metric
    [line] = budget_lines(err)
    assert line.startswith("[budget] burner: over the overhead budget for ") and line.endswith(": stopped")
    [note] = [r for r in recorded(tmp_path) if r["kind"] == "note"]
    assert note == {**note, "metric": "burner", "source": "overhead budget", "action": "stop", "asked": "stop",
                    "budget_pct": 0.01}
    assert note["cost_pct"] > 0 and note["total_pct"] > note["budget_pct"] and note["over_s"] >= 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["budget"]["actions"] == [{"metric": "burner", **{k: v for k, v in note.items()
                                                                    if k not in ("ts", "kind", "interval", "metric")}}]
    assert summary["metrics"]["burner"]["error"] == "" and "budget: burner: over the overhead budget" in out
    assert "profiler " in out and "budget 0.01 %" in out                # the progress line's total


def test_a_tiny_budget_switches_the_costliest_metric_to_its_sampling_mode_headless(tmp_path):
    run = headless(tmp_path, "--arg", "burner.duty=0.3", "--budget", "0.01", "--over-budget", "sample",
                   "--over-budget-for", "1", "--duration", "60")
    line, out, err = budget_line_then_stop(run, after=5)       # the restart and a few of its summaries
    assert run.returncode == 0, err
    assert line.startswith("[budget] burner: ") and line.endswith("switched to its sampling mode (duty 0.05)")
    records = recorded(tmp_path)
    note, *later = [r for r in records if r["kind"] == "note"]
    assert (note["action"], note["args"]) == ("sample", {"duty": 0.05})
    # over the tiny budget still: named again only after a measured dip, and then there is nothing cheaper
    assert all((n["action"], n["reason"]) == ("warn", "burner runs in its sampling mode already") for n in later)
    metas = [i for i, r in enumerate(records) if r["kind"] == "meta"]
    assert [records[i]["args"]["duty"] for i in metas] == [0.3, 0.05] and records.index(note) < metas[1]
    assert any(r["kind"] == "summary" and r["duty"] == 0.05 for r in records[metas[1]:])
    assert "headless: stopping (SIGTERM)" in out


@pytest.mark.bpf
# offcpu's switch (to the stacks of one block in 16) goes the same way: its arguments are checked in test_budget.py,
# and a third real run would add 13 s to a suite at the edge of its 25 minutes
@pytest.mark.parametrize(("action", "metric"), [("stop", "sysnest"), ("sample", "sysnest")])
def test_a_tiny_budget_acts_on_a_real_metric(tmp_path, action, metric):
    """sysnest stopped; sysnest switched to one syscall in 8 timed; offcpu to the stacks of one block in 16: each
    with its note record and its line on stderr; the new run's meta record has the new arguments."""
    run = subprocess.Popen([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", metric,
                            "--state-dir", str(tmp_path), "--record", str(tmp_path / "run.ndjson"), "--budget", "0.01",
                            "--over-budget", action, "--over-budget-for", "2", "--duration", "40"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # a switch: the restart, its attach and an interval or two before the SIGTERM
    line, out, err = budget_line_then_stop(run, after=8 if action == "sample" else None)
    assert run.returncode == 0, err
    records = recorded(tmp_path)
    note, *later = [r for r in records if r["kind"] == "note"]
    assert note["metric"] == metric and note["action"] == action and note["cost_pct"] > 0
    assert all(n["action"] == "warn" and "sampling mode already" in n["reason"] for n in later)
    assert line.startswith(f"[budget] {metric}: over the overhead budget")
    metas = [r for r in records if r["kind"] == "meta"]
    if action == "stop":
        assert line.endswith(": stopped") and "every metric ended" in out and len(metas) == 1
    else:
        changes = {"sysnest": {"sample": 8}, "offcpu": {"stack_every": 64}}[metric]
        assert note["args"] == changes and len(metas) == 2
        assert {k: metas[1]["args"][k] for k in changes} == changes
        assert any(r["kind"] == "summary" for r in records[records.index(metas[1]):])
