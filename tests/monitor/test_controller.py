"""The controller with real and synthetic metrics: a crashing metric is reported while the others
keep running, with nothing left behind; 100,000 records go through worker and transport to a test
collector, every one once and in order."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from collector_stub import CollectorStub  # noqa: E402
from fakes import CRASHER, FLOOD  # noqa: E402
from helpers import process_alive, progs_released  # noqa: E402

import config  # noqa: E402
from host import procs  # noqa: E402
from monitor.controller import MonitorController  # noqa: E402
from worker import GuiThreadRelay  # noqa: E402

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

FAST = {"flush_interval": 0.2, "backoff_base": 0.05, "backoff_max": 0.5}


class Recorder:
    """Everything a controller emitted, by metric."""

    def __init__(self, controller: MonitorController) -> None:
        self.records: dict[str, list[dict]] = {}
        self.arrival: dict[str, list[float]] = {}
        self.finished: dict[str, tuple[int, str]] = {}
        self.started: list[str] = []
        self.statuses: list[dict] = []
        self.threads: set[str] = set()
        controller.records.connect(self.on_records)
        controller.metric_started.connect(self.started.append)
        controller.metric_finished.connect(lambda name, status, error: self.finished.__setitem__(name, (status, error)))
        controller.transport_status.connect(self.statuses.append)

    def on_records(self, name: str, records: list) -> None:
        self.threads.add(threading.current_thread().name)
        self.records.setdefault(name, []).extend(records)
        self.arrival.setdefault(name, []).extend([time.monotonic()] * len(records))

    def count(self, name: str, kind: str | None = None) -> int:
        return sum(1 for r in self.records.get(name, []) if kind in (None, r["kind"]))


@pytest.mark.bpf
def test_crash_is_reported_and_others_continue(qtbot, tmp_path):
    c = MonitorController(None, state_dir=str(tmp_path), registry=[config.get("sysnest"), CRASHER],
                          relay=GuiThreadRelay())
    seen = Recorder(c)
    c.start_metric("sysnest", {"interval": 0.3})
    c.start_metric("crasher", {"after": 3})
    try:
        qtbot.waitUntil(lambda: seen.count("crasher", "meta") == 1, timeout=60_000)
        meta = seen.records["crasher"][0]
        crasher_progs = c.bpf_program_ids()["crasher"]
        assert crasher_progs, "the crasher should hold its BPF program while it runs"
        assert process_alive(meta["grandchild"])
        qtbot.waitUntil(lambda: seen.count("sysnest", "summary") >= 1, timeout=60_000)
        sysnest_progs = c.bpf_program_ids()["sysnest"]
        assert sysnest_progs

        qtbot.waitUntil(lambda: "crasher" in seen.finished, timeout=30_000)
        crashed_at = time.monotonic()
        status, error = seen.finished["crasher"]
        assert status == 1
        assert error.startswith("crasher exited with status 1")
        assert "RuntimeError: synthetic crash" in error
        assert c.running() == ["sysnest"]
        assert not process_alive(meta["grandchild"]), "the crashed metric's child was left behind"
        assert not process_alive(meta["pid"])
        assert progs_released(crasher_progs)

        # sysnest carries on: new intervals after the crash
        qtbot.waitUntil(lambda: sum(t > crashed_at for t in seen.arrival["sysnest"]) >= 3, timeout=10_000)
        sysnest_pid = c.totals["sysnest"]["pid"]
        c.stop_metric("sysnest")
        qtbot.waitUntil(lambda: "sysnest" in seen.finished, timeout=15_000)
        assert seen.finished["sysnest"] == (0, "")
        assert not os.path.exists(f"/proc/{sysnest_pid}")
        assert progs_released(sysnest_progs)
        # the process table: nothing left in either metric's process group (an orphan keeps its group)
        assert procs.group_members(meta["pid"]) == [] and procs.group_members(sysnest_pid) == []
        assert seen.threads == {"MainThread"}
    finally:
        c.shutdown(10)


def test_100k_records_through_worker_and_transport(qtbot, tmp_path):
    stub = CollectorStub().start()
    c = MonitorController(stub.url, state_dir=str(tmp_path), registry=[FLOOD], transport_tuning=FAST,
                          status_interval_ms=200, relay=GuiThreadRelay())
    seen = Recorder(c)
    try:
        started = time.monotonic()
        c.start_metric("flood", {"lines": 100_000})
        qtbot.waitUntil(lambda: "flood" in seen.finished, timeout=60_000)
        qtbot.waitUntil(lambda: c.transport.status()["sent_records"] == 100_001, timeout=60_000)
        took = time.monotonic() - started
        c.shutdown(10)
    finally:
        stub.stop()
    assert seen.finished["flood"] == (0, "")
    received = stub.records("flood")
    assert [r["i"] for r in received if r["kind"] == "event"] == list(range(100_000))
    assert len(received) == 100_001
    (run_id, _), sequences = next(iter(stub.streams().items()))
    assert sequences == list(range(len(sequences)))
    status = c.transport.status()
    assert status["sent_batches"] == len(sequences) and status["dropped"] == 0 and status["pending_outbox"] == 0
    assert seen.statuses and seen.statuses[-1]["sent_records"] == 100_001
    assert c.totals["flood"]["records"] == 100_001
    print(f"pipeline: 100,001 / 100,001 records stored by the test collector in {len(sequences)} batches, "
          f"{took:.2f}s ({100_001 / took:,.0f} records/s)")
