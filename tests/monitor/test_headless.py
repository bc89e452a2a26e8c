"""`main_app.py --headless` end to end: real sysnest records reach a test collector once each and in
sequence; a client SIGKILLed with batches pending leaves no process or BPF program, and its restart
sends them; bad arguments and a refused elevation end with one line and the right exit status."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

import pytest
from collector_stub import CollectorStub, free_port
from helpers import PYTHON, ROOT, SUPPORT, process_alive, prog_ids_of, progs_released, reachable_by_others

import config
from host import procs

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

SYSNEST_ROW_FIELDS = {f.name for f in config.get("sysnest").fields}
SUMMARY_FIELDS = {"syscalls", "per_sec", "processes", "errors", "interval_s"}


def headless(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def pending_rows(state_dir: str) -> list[tuple[str, str, int]]:
    path = os.path.join(state_dir, "outbox.sqlite")
    if not os.path.exists(path):
        return []
    with sqlite3.connect(path) as db:
        try:
            return db.execute("SELECT batch_id, run_id, sequence FROM batches ORDER BY id").fetchall()
        except sqlite3.OperationalError:      # the client has not created its tables yet
            return []


def child_pids(state_dir: str) -> list[int]:
    return [int(os.path.basename(p)[:-5]) for p in glob.glob(os.path.join(state_dir, "children", "*.json"))]


@pytest.mark.bpf
def test_sysnest_to_collector_then_sigterm(tmp_path):
    stub = CollectorStub().start()
    summary_file = tmp_path / "summary.json"
    try:
        client = headless("--metric", "sysnest", "--arg", "sysnest.interval=0.5", "--arg", "sysnest.top=5",
                          "--server", stub.url, "--state-dir", str(tmp_path), "--progress", "1",
                          "--summary-json", str(summary_file))
        deadline = time.monotonic() + 60
        while len(stub.batches) < 3 and time.monotonic() < deadline and client.poll() is None:
            time.sleep(0.1)
        client.send_signal(signal.SIGTERM)
        out, err = client.communicate(timeout=30)
    finally:
        stub.stop()
    assert client.returncode == 0, err
    assert "stopping (SIGTERM)" in out and "summary:" in out and "Traceback" not in err
    assert out.count("collector up") >= 1                  # the progress lines
    # one key figure per metric; below 1,000 a rate has a decimal (registry/units.number): loaded run 10
    # of 265fad5 saw "169.6 syscalls/s" with the machine busy in stress-ng's loops, which make no syscalls
    assert re.search(r"sysnest [\d,]+(\.\d+)? syscalls/s", out), out
    summary = json.loads(summary_file.read_text())["metrics"]["sysnest"]
    assert summary["error"] == "" and summary["pending"] == 0 and summary["dropped"] == 0
    # every batch the client reports sent was received, once
    assert summary["batches_sent"] == summary["batches_created"] == len(stub.batches) >= 3
    assert all(n == 1 for n in stub.posts.values())
    (run_id, source), sequences = next(iter(stub.streams().items()))
    assert source == "sysnest" and sequences == list(range(summary["batches_sent"]))
    records = stub.records("sysnest")
    assert len(records) == summary["records_sent"] == summary["records"]
    assert records[0]["kind"] == "meta" and records[0]["metric"] == "sysnest"
    rows = [r for r in records if r["kind"] == "row"]
    summaries = [r for r in records if r["kind"] == "summary"]
    assert rows and summaries
    assert all(isinstance(r, dict) and SYSNEST_ROW_FIELDS - {"pid", "comm", "syscall"} <= set(r) for r in rows)
    assert all(SYSNEST_ROW_FIELDS <= set(r) for r in rows if r["level"] == "detail")
    assert all(SUMMARY_FIELDS <= set(r) and r["syscalls"] > 0 for r in summaries)
    assert child_pids(str(tmp_path)) == []                  # the pid file went with the process


@pytest.mark.bpf
def test_sigkill_with_pending_batches_then_restart(tmp_path):
    state = str(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"                         # nothing listening yet: the collector is down
    client = headless("--metric", "sysnest", "--arg", "sysnest.interval=0.3", "--server", url, "--state-dir", state)
    try:
        deadline = time.monotonic() + 60
        while len(pending_rows(state)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = child_pids(state)
        assert len(pids) == 1, "the running metric's pid file"
        progs = prog_ids_of(pids[0])
        assert progs
        client.kill()
        client.wait()
    finally:
        if client.poll() is None:
            client.kill()
    pending = pending_rows(state)
    assert len(pending) >= 3
    # the metric died with the app (PR_SET_PDEATHSIG) and its BPF programs went with it
    deadline = time.monotonic() + 5
    while process_alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(pids[0]) and procs.group_members(pids[0]) == []
    assert progs_released(progs)

    stub = CollectorStub(port=port).start()
    try:
        again = headless("--metric", "sysnest", "--arg", "sysnest.interval=0.5", "--duration", "2",
                         "--server", url, "--state-dir", state)
        out, err = again.communicate(timeout=90)
    finally:
        stub.stop()
    assert again.returncode == 0, err
    old_run = pending[0][1]
    assert {batch_id for batch_id, _, _ in pending} <= set(stub.batches)
    assert stub.streams()[(old_run, "sysnest")] == list(range(len(pending)))   # nothing lost, in order
    assert pending_rows(state) == []
    assert child_pids(state) == []


BAD_ARGS = [
    (["--metric", "sysnest", "--arg", "sysnest.interval=abc"], "interval must be a number"),
    (["--metric", "sysnest", "--arg", "sysnest.interval=-1"], "interval must be at least"),
    (["--metric", "sysnest", "--arg", "interval=1"], "expected NAME.key=value"),
    (["--metric", "sysnest", "--arg", "sysnest.nope=1"], "sysnest has no argument 'nope'"),
    (["--metric", "sysnest", "--arg", "offcpu.pid=1"], "not one of the --metric names"),
    (["--metric", "sysnest", "--arg", "sysnest.milliseconds=maybe"], "is a flag: true or false"),
    (["--metric", "nosuch"], "unknown metric 'nosuch'"),
    (["--metric", "sysnest", "--metric", "sysnest"], "given twice"),
    (["--metric", "sysnest", "--duration", "0"], "must be a positive number"),
    ([], "the following arguments are required: --metric"),
]


@pytest.mark.parametrize("args, message", BAD_ARGS)
def test_bad_arguments_exit_2_with_one_line(args, message, capsys):
    from monitor import headless

    with pytest.raises(SystemExit) as exited:
        headless.main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_bad_argument_through_main_app():
    result = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                             "--arg", "sysnest.interval=abc"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr == "main_app.py --headless: error: sysnest: interval must be a number\n"


def test_unusable_state_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                             "--state-dir", str(blocker / "state")], cwd=ROOT, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("main_app.py --headless: error: cannot use state directory")
    assert result.stderr.count("\n") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_refused_elevation_exits_1_with_one_message():
    """Not root, and `sudo -n` wants a password: the metric does not start, the run says why once."""
    tmp_path = tempfile.mkdtemp(prefix="headless-nobody-")    # pytest's tmp_path is not reachable by nobody
    os.chmod(tmp_path, 0o777)
    fake_sudo = os.path.join(SUPPORT, "fake_bin", "sudo")
    with reachable_by_others(ROOT):
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"HOME={tmp_path}",
             PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest", "--duration", "30",
             "--state-dir", str(tmp_path), "--elevate", f"{fake_sudo} -n"],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    said = [line for line in result.stderr.splitlines() if "cannot start sysnest as root" in line]
    assert len(said) == 1 and "sudo: a password is required" in said[0], result.stderr
    assert "Traceback" not in result.stderr
    assert "every metric ended" in result.stdout
    shutil.rmtree(tmp_path)


@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_every_metric_has_a_key_figure_its_summary_carries(spec):
    """headless progress shows one number per metric: each entry declares it, and the field is in the
    metric's own summary records (tests/samples, recorded from the real scripts)."""
    path = os.path.join(ROOT, "tests", "samples", f"{spec.name}.ndjson")
    with open(path) as f:
        summary = next(r for r in map(json.loads, f) if r["kind"] == "summary")
    text = spec.key_figure_text(summary)
    assert re.fullmatch(r"[\d,.]+(%| \S+)( \S.*)?", text), text     # 33,374 syscalls/s, 96.8% CPU, 8.9 MiB/s ...


@pytest.mark.bpf
def test_record_saves_every_record_the_collector_received(tmp_path):
    """--record FILE holds the run record for record as the collector stored it, and the summary says so."""
    stub = CollectorStub().start()
    session = tmp_path / "run.ndjson"
    try:
        result = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                                 "--arg", "sysnest.interval=0.5", "--duration", "3", "--server", stub.url,
                                 "--state-dir", str(tmp_path), "--record", str(session)],
                                cwd=ROOT, capture_output=True, text=True, timeout=90)
        received = stub.records("sysnest")
    finally:
        stub.stop()
    assert result.returncode == 0, result.stderr
    with open(session) as f:
        saved = [json.loads(line) for line in f]
    assert saved and saved[0]["kind"] == "meta"
    assert saved == received
    assert f"recorded {len(saved):,} records to {session}" in result.stdout


def test_an_unwritable_record_file_is_one_line(tmp_path):
    result = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                             "--record", str(tmp_path / "nope" / "run.ndjson")], cwd=ROOT, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr == (f"main_app.py --headless: error: cannot write --record {tmp_path}/nope/run.ndjson: "
                             "No such file or directory\n")
