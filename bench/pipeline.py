"""Benchmark 3: records per second from a metric's stdout to the collector's database, and how late the
window's event loop runs while they flow.

The synthetic metric tests/fake_metrics/flood.py prints N NDJSON records as fast as it can. It is
started from the real window (main_app.MainWindow, offscreen) through the controller, worker and
transport to server.py on SQLite, as a user would. Throughput is N+1 records (the meta record too)
over the time from start until the database holds all of them; loss is checked in the database (every
i from 0 to N-1 stored once). Meanwhile a 10 ms precise QTimer on the GUI thread records how late each
of its ticks is: that lateness is the stall a user would feel.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import harness  # noqa: E402 - sets sys.path for the project's modules
from harness import BenchError  # noqa: E402
from server_fixtures import ServerProcess  # noqa: E402

TICK_MS = 10
TARGET_RATE, TARGET_STALL_MS = 50_000, 50.0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


class StoredCounter(threading.Thread):
    """Polls the collector's SQLite file (off the GUI thread) until it holds `want` flood records."""

    def __init__(self, db_path: str, want: int, timeout: float) -> None:
        super().__init__(daemon=True)
        self.db_path, self.want, self.timeout = db_path, want, timeout
        self.done_at: float | None = None
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                with sqlite3.connect(self.db_path, timeout=30) as db:
                    self.count = db.execute("SELECT COUNT(*) FROM records WHERE source = 'flood'").fetchone()[0]
            except sqlite3.OperationalError:      # tables not created yet
                self.count = 0
            if self.count >= self.want:
                self.done_at = time.monotonic()
                return
            time.sleep(0.05)


def one_run(lines: int, workdir: str, n: int) -> dict:
    from fakes import FLOOD
    from PySide6.QtCore import QSettings, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from controller import MonitorController
    from main_app import MainWindow

    app = QApplication.instance() or QApplication(["bench"])
    db_path = os.path.join(workdir, f"pipeline{n}.db")
    server = ServerProcess("--db", db_path, output=os.path.join(workdir, f"server{n}.log"))
    controller = MonitorController(server.url, state_dir=os.path.join(workdir, f"state{n}"), registry=[FLOOD])
    window = MainWindow(controller, settings=QSettings(os.path.join(workdir, f"s{n}.ini"), QSettings.Format.IniFormat),
                        server_url=server.url, registry=[FLOOD])
    window.resize(1400, 900)
    window.show()
    lateness: list[float] = []
    last = [time.monotonic()]

    def tick() -> None:
        now = time.monotonic()
        lateness.append(max(0.0, (now - last[0]) * 1000 - TICK_MS))
        last[0] = now

    ticker = QTimer()
    ticker.setTimerType(Qt.TimerType.PreciseTimer)
    ticker.timeout.connect(tick)
    counter = StoredCounter(db_path, lines + 1, timeout=max(120.0, lines / 2000))
    finisher = QTimer()
    finisher.timeout.connect(lambda: app.quit() if not counter.is_alive() else None)
    try:
        for _ in range(20):                     # let the window settle before measuring
            app.processEvents()
        ticker.start(TICK_MS)
        finisher.start(50)
        started = time.monotonic()
        last[0] = started
        if not window.start_metric("flood", {"lines": lines}):
            raise BenchError("the window refused to start the flood metric")
        counter.start()
        app.exec()
        ticker.stop()
        finisher.stop()
        if counter.done_at is None:
            raise BenchError(f"the collector had {counter.count} of {lines + 1} records when the wait ended")
        status = controller.transport.status()
    finally:
        counter.stop.set()
        window.shutdown()
        window.close()
        window.deleteLater()
        app.processEvents()
        server.stop()
    with sqlite3.connect(db_path) as db:
        distinct = db.execute("SELECT COUNT(DISTINCT json_extract(data, '$.i')) FROM records "
                              "WHERE source = 'flood' AND kind = 'event' AND json_extract(data, '$.i') BETWEEN 0 AND ?",
                              (lines - 1,)).fetchone()[0]
        stored = db.execute("SELECT COUNT(*) FROM records WHERE source = 'flood'").fetchone()[0]
    lost = lines - distinct
    return {"records_per_s": (lines + 1) / (counter.done_at - started), "stored": stored, "lost": lost,
            "dropped": status["dropped"], "stall_p50_ms": percentile(lateness, 50),
            "stall_p99_ms": percentile(lateness, 99), "stall_max_ms": max(lateness, default=0.0),
            "ticks": len(lateness)}


def run(quick: bool = False, reps: int | None = None) -> dict:
    reps = reps or (3 if quick else 5)
    lines = 100_000 if quick else 300_000
    workdir = tempfile.mkdtemp(prefix="bench-pipeline-")
    samples: list[dict] = []

    def one(config: str, rep: int) -> float:
        sample = one_run(lines, workdir, rep)
        samples.append(sample)
        harness.log(f"  rep {rep + 1}: {sample['records_per_s']:,.0f} records/s, lost {sample['lost']}, "
                    f"stall p99 {sample['stall_p99_ms']:.1f} ms, max {sample['stall_max_ms']:.1f} ms")
        return sample["records_per_s"]

    harness.log(f"pipeline: {reps} repetitions of {lines:,} records through window, worker, transport, collector")
    try:
        harness.alternate(["flood"], one, reps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    row = {k: harness.summary([s[k] for s in samples], 1) for k in
           ("records_per_s", "stall_p50_ms", "stall_p99_ms", "stall_max_ms")}
    row["lost_total"] = sum(s["lost"] for s in samples)
    row["dropped_total"] = sum(s["dropped"] for s in samples)
    return {"title": "Pipeline throughput", "reps": reps, "lines": lines, "row": row,
            "targets": [
                harness.target("records/s stored end to end (zero loss)", f">= {TARGET_RATE:,}",
                               row["records_per_s"]["median"] if not row["lost_total"] else 0, TARGET_RATE,
                               higher_is_better=True),
                harness.target("GUI event-loop stall p99 while records flow", f"<= {TARGET_STALL_MS:g} ms",
                               row["stall_p99_ms"]["median"], TARGET_STALL_MS, higher_is_better=False, unit=" ms")]}


def table(result: dict) -> str:
    r = result["row"]
    rows = [[f"{result['lines']:,} records", harness.fmt(r["records_per_s"]), f"{r['lost_total']} / {r['dropped_total']}",
             harness.fmt(r["stall_p50_ms"], " ms", 1), harness.fmt(r["stall_p99_ms"], " ms", 1),
             harness.fmt(r["stall_max_ms"], " ms", 0)]]
    return harness.md_table(["run", "records/s stored", "lost / dropped (all reps)", "stall p50", "stall p99",
                             "stall max"], rows)


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
