"""Faults: the collector dies under a running client, and a metric is started and stopped over and over.

- A 60 s headless run of three real metrics while the collector (server.py, SQLite) is SIGKILLed and
  restarted three times: every batch the client created is in the database exactly once, with all its
  records, and each metric's sequences run 0..n-1 without a gap.
- 100 start/stop cycles of sysnest through the controller and its worker: after each, no process, no
  zombie and none of its BPF programs is left; the app's file descriptors and threads do not grow.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time

import pytest
from helpers import PYTHON, ROOT, progs_released
from server_fixtures import ServerProcess

import config
from host import procs

pytestmark = [pytest.mark.bpf, pytest.mark.slow]

# Three cheap metrics that start fast and always have something to report.
PREFERRED = ["sysnest", "cpuschedrun", "pagefault", "biopwise", "offcpu"]
NAMES = [n for n in PREFERRED if n in {s.name for s in config.METRICS}][:3]
RUN_S = 60
KILLS_AT = (12, 27, 42)         # seconds into the run
DOWN_S = 4                      # how long the collector stays dead each time


def headless_argv(url: str, state: str, summary: str) -> list[str]:
    argv = [PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--duration", str(RUN_S), "--server", url,
            "--state-dir", state, "--progress", "5", "--summary-json", summary]
    for name in NAMES:
        argv += ["--metric", name]
        if any(a.name == "interval" for a in config.get(name).args):
            argv += ["--arg", f"{name}.interval=0.5"]
    return argv


@pytest.mark.timeout(300)
def test_collector_sigkilled_three_times_every_batch_stored_once(tmp_path):
    assert len(NAMES) == 3, f"three metrics needed, registry has {NAMES}"
    db_path, log = tmp_path / "collector.db", str(tmp_path / "server.log")
    server = ServerProcess("--db", str(db_path), output=log)
    port, summary_file = server.port, tmp_path / "summary.json"
    with open(tmp_path / "client.log", "w") as client_log:
        client = subprocess.Popen(headless_argv(server.url, str(tmp_path / "state"), str(summary_file)),
                                  cwd=ROOT, stdout=client_log, stderr=subprocess.STDOUT, text=True)
    started = time.monotonic()
    try:
        for at in KILLS_AT:
            time.sleep(max(0.0, started + at - time.monotonic()))
            assert client.poll() is None, (tmp_path / "client.log").read_text()[-2000:]
            server.kill()
            time.sleep(DOWN_S)
            server = ServerProcess("--db", str(db_path), port=port, output=log)
        status = client.wait(timeout=RUN_S + 90)
    finally:
        if client.poll() is None:
            client.kill()
        server.stop()
    out = (tmp_path / "client.log").read_text()
    assert status == 0, out[-3000:]
    assert "collector DOWN" in out, "the client never noticed the collector was gone"
    summary = json.loads(summary_file.read_text())
    run_id = summary["run_id"]

    with sqlite3.connect(db_path) as db:
        for name in NAMES:
            m = summary["metrics"][name]
            assert m["error"] == "" and m["pending"] == 0 and m["dropped"] == 0, (name, m)
            rows = db.execute("SELECT sequence, batch_id, n_records FROM batches WHERE run_id = ? AND source = ? "
                              "ORDER BY sequence", (run_id, name)).fetchall()
            assert [r[0] for r in rows] == list(range(m["batches_created"])), f"{name}: sequences not 0..n-1"
            assert m["batches_created"] >= RUN_S // 2, f"{name}: only {m['batches_created']} batches"
            assert len({r[1] for r in rows}) == len(rows)
            assert sum(r[2] for r in rows) == m["records"], f"{name}: records stored vs read from the metric"
        # batches made while the collector was dead were kept and delivered after each restart
        late = db.execute("SELECT COUNT(*) FROM batches WHERE run_id = ? AND received_at - client_ts > ?",
                          (run_id, DOWN_S / 2)).fetchone()[0]
        assert late >= len(KILLS_AT) * len(NAMES), f"only {late} batches arrived late"
        # each batch's records exactly once: a SIGKILL mid-transaction must not leave half a batch
        assert db.execute("SELECT COUNT(*) FROM batches b WHERE n_records != "
                          "(SELECT COUNT(*) FROM records r WHERE r.batch = b.id)").fetchone()[0] == 0


# --- 100 start/stop cycles -------------------------------------------------------------------------------
CYCLES = 100


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(600)
def test_100_start_stop_cycles_leave_nothing(qtbot, tmp_path):
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController

    controller = MonitorController(None, state_dir=str(tmp_path / "state"), relay=GuiThreadRelay())
    finished: list[tuple[str, int, str]] = []
    controller.metric_finished.connect(lambda n, s, e: finished.append((n, s, e)))
    baseline = None
    started = time.monotonic()
    try:
        for cycle in range(CYCLES):
            controller.start_metric("sysnest", {"interval": 0.2})
            qtbot.waitUntil(lambda: controller.totals["sysnest"]["records"] > 0, timeout=60_000)   # the meta record
            pid = controller.totals["sysnest"]["pid"]
            progs = controller.bpf_program_ids()["sysnest"]
            assert progs, f"cycle {cycle}: sysnest holds no BPF program"
            controller.stop_metric("sysnest")
            qtbot.waitUntil(lambda c=cycle: len(finished) == c + 1, timeout=30_000)
            assert finished[-1] == ("sysnest", 0, ""), f"cycle {cycle}: {finished[-1]}"
            # reaped, not just dead: a zombie keeps its /proc entry
            assert not os.path.exists(f"/proc/{pid}") and procs.group_members(pid) == [], f"cycle {cycle}: process left"
            assert progs_released(progs), f"cycle {cycle}: BPF programs {progs} still loaded"
            qtbot.waitUntil(lambda: not controller._alive(), timeout=10_000)     # the worker threads ended
            if cycle == 4:      # after a few cycles every lazily opened fd and pool thread exists
                baseline = (open_fds(), threading.active_count())
        took = time.monotonic() - started
        fds, threads = open_fds(), threading.active_count()
    finally:
        controller.shutdown(10)
    assert fds <= baseline[0], f"open fds grew from {baseline[0]} (cycle 5) to {fds} (cycle {CYCLES})"
    assert threads <= baseline[1], f"threads grew from {baseline[1]} (cycle 5) to {threads} (cycle {CYCLES})"
    print(f"{CYCLES} cycles in {took:.0f} s, {fds} fds, {threads} threads")
