"""The worker on its thread, its callbacks relayed to the main thread as the window's are, with synthetic metric scripts (tests/support/fake_metrics/): every line arrives in
order and in batches, log lines are kept apart, stop escalates and reaps, elevation failures read
well, and process groups a killed app left behind are ended on the next start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from fakes import FLOOD, STUBBORN  # noqa: E402
from helpers import ROOT, SUPPORT, process_alive  # noqa: E402

import monitor.controller as controller_module  # noqa: E402
from host import procs  # noqa: E402
from host.privhelper import HELPER  # noqa: E402
from monitor.controller import MonitorController  # noqa: E402
from worker import GuiThreadRelay, Worker, WorkerCallbacks, build_argv  # noqa: E402

FAKE_SUDO = os.path.join(SUPPORT, "fake_bin", "sudo")


class Run:
    """A Worker on its own thread, with everything it reported, relayed to the main thread through the
    window's Qt adapter (as the controller's are)."""

    def __init__(self, spec, values: dict, **options) -> None:
        self.batches: list[list[dict]] = []
        self.logs: list[str] = []
        self.finished: list[tuple[int, str]] = []
        self.slot_threads: set[str] = set()
        callbacks = WorkerCallbacks(records=self._on_records, log=lambda name, line: self.logs.append(line),
                                    started=lambda name, pid: None,
                                    finished=lambda name, status, error: self.finished.append((status, error)))
        self.worker = Worker(spec.name, spec, build_argv(spec, values, sys.executable, None),
                             callbacks.through(GuiThreadRelay()), **options)

    def _on_records(self, name: str, batch: list) -> None:
        self.slot_threads.add(threading.current_thread().name)
        self.batches.append(batch)

    def start(self) -> Run:
        self.worker.start()
        return self

    def wait(self, qtbot, timeout: float = 30.0) -> tuple[int, str]:
        qtbot.waitUntil(lambda: bool(self.finished) and not self.worker.is_alive(), timeout=int(timeout * 1000))
        qtbot.wait(50)     # queued signals emitted just before the end
        return self.finished[0]

    @property
    def records(self) -> list[dict]:
        return [r for batch in self.batches for r in batch]


@pytest.mark.slow
def test_flood_of_100k_lines_every_one_in_order(qtbot):
    started = time.monotonic()
    run = Run(FLOOD, {"lines": 100_000}).start()
    status, error = run.wait(qtbot, 60)
    took = time.monotonic() - started
    assert (status, error) == (0, "")
    events = [r for r in run.records if r["kind"] == "event"]
    assert [r["i"] for r in events] == list(range(100_000))
    assert run.records[0]["kind"] == "meta" and len(run.records) == 100_001
    assert len(run.batches) <= 400, "records must arrive in batches, not one signal per line"
    assert max(len(b) for b in run.batches) <= 1000
    assert run.slot_threads == {"MainThread"}
    assert not run.logs
    print(f"worker: 100,001 / 100,001 records in {len(run.batches)} batches, {took:.2f}s "
          f"({100_001 / took:,.0f} records/s)")


def test_non_records_go_to_the_log(qtbot):
    run = Run(FLOOD, {"lines": 10_000, "noise": True}).start()
    assert run.wait(qtbot) == (0, "")
    assert [r["i"] for r in run.records if r["kind"] == "event"] == list(range(10_000))
    assert sum(line.startswith("not a record") for line in run.logs) == 10      # stdout chatter
    assert sum(line.startswith("warning") for line in run.logs) == 10           # stderr


def test_stop_is_prompt_and_clean(qtbot):
    run = Run(FLOOD, {"lines": 10, "linger": 60}).start()
    qtbot.waitUntil(lambda: run.worker.pid is not None and len(run.records) == 11, timeout=10_000)
    pid = run.worker.pid
    started = time.monotonic()
    run.worker.stop()
    status, error = run.wait(qtbot)
    assert error == "" and status == -signal.SIGINT
    assert time.monotonic() - started < 1.5
    assert not process_alive(pid) and not os.path.exists(f"/proc/{pid}")   # reaped: not even a zombie


@pytest.mark.slow
def test_stop_escalates_to_sigkill(qtbot):
    run = Run(STUBBORN, {}, stop_waits=(0.3, 0.3, 2.0)).start()
    qtbot.waitUntil(lambda: len(run.records) >= 3, timeout=10_000)
    pid = run.worker.pid
    started = time.monotonic()
    run.worker.stop()
    status, error = run.wait(qtbot)
    took = time.monotonic() - started
    assert status == -signal.SIGKILL
    assert "did not stop on SIGINT or SIGTERM" in error
    assert 0.6 <= took < 2.0, took
    assert not os.path.exists(f"/proc/{pid}")


def test_elevation_failure_is_one_clear_message(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(controller_module, "needs_elevation", lambda: True)
    c = MonitorController(None, state_dir=str(tmp_path), elevate=[FAKE_SUDO, "-n"], registry=[FLOOD],
                          relay=GuiThreadRelay())
    finished, logs = [], []
    c.metric_finished.connect(lambda *a: finished.append(a))
    c.log.connect(lambda name, line: logs.append((name, line)))
    c.start_metric("flood", {"lines": 5})
    qtbot.waitUntil(lambda: bool(finished), timeout=10_000)
    (name, status, error), = finished
    assert status == 1
    assert error.startswith("cannot start flood as root:") and "sudo: a password is required" in error
    assert "\n" not in error
    # the advice allows the privilege helper only, never the interpreter (that would be root for all)
    assert f"{HELPER} sudoers" in error and sys.executable not in error, error
    c.shutdown(5)


def test_a_helper_refusal_is_one_clear_message(qtbot, tmp_path, monkeypatch):
    """The elevation command ran the helper, which refused (here: code a user could change): the metric's
    end says that one line, not a stderr dump."""
    monkeypatch.setattr(controller_module, "needs_elevation", lambda: True)
    refusing = ["/bin/sh", "-c", 'echo "privhelper: refusing: /x/metrics belongs to alice (uid 1000)" >&2; exit 2', "sh"]
    c = MonitorController(None, state_dir=str(tmp_path), elevate=refusing, registry=[FLOOD],
                          relay=GuiThreadRelay())
    finished, logs = [], []
    c.metric_finished.connect(lambda *a: finished.append(a))
    c.log.connect(lambda name, line: logs.append(line))
    c.start_metric("flood", {"lines": 5})
    qtbot.waitUntil(lambda: bool(finished), timeout=10_000)
    (_, status, error), = finished
    assert status == 2
    assert error == "cannot start flood as root: the privilege helper refused: refusing: /x/metrics belongs to alice (uid 1000)"
    assert not any(line.startswith("privhelper:") for line in logs)
    c.shutdown(5)


def test_missing_elevation_command(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(controller_module, "needs_elevation", lambda: True)
    c = MonitorController(None, state_dir=str(tmp_path), elevate=["/nonexistent/sudo"], registry=[FLOOD],
                          relay=GuiThreadRelay())
    finished = []
    c.metric_finished.connect(lambda *a: finished.append(a))
    c.start_metric("flood", {})
    qtbot.waitUntil(lambda: bool(finished), timeout=10_000)
    assert finished[0][1] == 127 and "elevation command `/nonexistent/sudo` not found" in finished[0][2]
    c.shutdown(5)


FAKE_APP = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from host import procs
child = subprocess.Popen(["sleep", "300"], start_new_session=True)   # like a child started through sudo
procs.ChildRegistry(sys.argv[2]).record(child.pid, ["sleep", "300"])
print(child.pid, flush=True)
time.sleep(300)
"""


def test_leftovers_of_a_killed_app_are_ended_on_start(qtbot, tmp_path):
    app = subprocess.Popen([sys.executable, "-c", FAKE_APP, ROOT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    orphan = int(app.stdout.readline())
    app.kill()
    app.wait()
    assert process_alive(orphan), "the stand-in child should have outlived its app"
    # A group whose app is still running (here: this test process) must be left alone.
    mine = subprocess.Popen(["sleep", "300"], start_new_session=True)
    procs.ChildRegistry(str(tmp_path)).record(mine.pid, ["sleep", "300"])
    try:
        c = MonitorController(None, state_dir=str(tmp_path), registry=[FLOOD], relay=GuiThreadRelay())
        assert not process_alive(orphan)
        assert any(f"group {orphan}" in m and m.startswith("ended") for m in c.startup_messages), c.startup_messages
        assert mine.poll() is None
        c.shutdown(5)
    finally:
        mine.kill()
        mine.wait()


def test_controller_refuses_bad_values(qtbot, tmp_path):
    c = MonitorController(None, state_dir=str(tmp_path), registry=[FLOOD], relay=GuiThreadRelay())
    with pytest.raises(ValueError, match="lines must be an integer"):
        c.start_metric("flood", {"lines": "many"})
    with pytest.raises(ValueError, match="no metric named"):
        c.start_metric("nope", {})
    c.start_metric("flood", {"lines": 1, "linger": 30})
    with pytest.raises(ValueError, match="already running"):
        c.start_metric("flood", {})
    assert c.running() == ["flood"]
    c.shutdown(5)
    assert c.running() == []


def test_a_leftover_from_before_a_reboot_ends_nothing(tmp_path):
    """After a reboot a children/*.json names a pid and start time that may now be an unrelated process
    group's: it is dropped, and that group lives on."""
    unrelated = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        registry = procs.ChildRegistry(str(tmp_path))
        registry.record(unrelated.pid, ["sleep", "300"])  # the same pid and start time, as after a reboot ...
        path = tmp_path / "children" / f"{unrelated.pid}.json"
        entry = json.loads(path.read_text())
        path.write_text(json.dumps({**entry, "app_pid": 1, "app_start": -1, "boot_id": "an-earlier-boot"}))
        assert registry.end_leftovers() == []
        assert unrelated.poll() is None and not path.exists()
    finally:
        unrelated.kill()
        unrelated.wait()


EVERYDAY_LINES = [b'{"metric":"m","kind":"event","i":1}', b'{"metric":"m","kind":"row","x":[1,2]}']


@pytest.mark.parametrize("lines", [
    EVERYDAY_LINES,
    [b'{"metric":"m","kind":"event","i":1}', b'not a record'],
    [b'{"metric":"m","kind":"event","i":1}', b''],
    [b'{"metric":"m","kind":"nope"}', b'{"metric":"m","kind":"event"}'],
    [b'{"kind":"event"}'],
    [b'{"metric":"m","kind":"event"},{"metric":"m","kind":"event"}'],
    [b'{"metric":"m","kind":"row","x":[{}', b'{}]},{"metric":"m","kind":"row"}'],
    [b'{"metric":"m","kind":"event","s":"\xff"}'],
    [b'{"metric":"m","kind":"event","v":NaN}\r'],
    [b'{"metric":"m","kind":"event","v":NaN}'],
    [b'{"metric":"m",', b'"kind":"event"}', b'{"metric":"m","kind":"event"}'],
    [b' {"metric":"m","kind":"event"}'],
    [b'{"metric":"m","kind":"event"}', b'{"metric":"m","kind":"event"}', b''],
])
def test_a_read_parsed_at_once_is_what_line_by_line_would_give(lines):
    # a read's lines in one json.loads when every one is a record; else None, and they go line by line
    from config import parse_ndjson
    from worker import parse_records

    one_by_one = [parse_ndjson(line.decode("utf-8", "replace")) for line in lines]
    at_once = parse_records(lines)
    if None in one_by_one:          # a line that is not a record: the read must go line by line
        assert at_once is None
    elif at_once is not None:       # else line by line too (odd bytes or spacing), which is never wrong
        assert at_once == one_by_one
    if lines == EVERYDAY_LINES:
        assert at_once is not None, "a read of plain records is parsed at once"


def test_the_sink_takes_every_record_on_the_worker_thread(qtbot):
    taken, threads, with_lines = [], set(), []

    def sink(name: str, records: list[dict], lines: list[bytes] | None) -> None:
        threads.add(threading.current_thread().name)
        taken.extend(records)
        if lines is not None:       # a read parsed at once: each record's line, as the script printed it
            assert [json.loads(line) for line in lines] == records
            with_lines.extend(records)

    run = Run(FLOOD, {"lines": 20_000, "noise": True}, sink=sink).start()
    assert run.wait(qtbot) == (0, "")
    assert taken == run.records and len(taken) == 20_001
    assert "MainThread" not in threads
    assert with_lines, "a read of plain records comes with its lines"
