"""Benchmark 3: records per second from a metric's stdout to the collector's database, and how late the
window's event loop runs while they flow.

The synthetic metric tests/support/fake_metrics/flood.py prints N NDJSON records as fast as it can. It is
started from the real window (main_app.MainWindow, offscreen) through the controller, worker and
transport to server.py on SQLite, as a user would. Throughput is N+1 records (the meta record too)
over the time from start until the database holds all of them; loss is checked in the database (every
i from 0 to N-1 stored once). Meanwhile a 10 ms precise QTimer on the GUI thread records how late each
of its ticks is: that lateness is the stall a user would feel.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import harness  # noqa: E402 - sets sys.path for the project's modules
import stats
from server_fixtures import ServerProcess  # noqa: E402
from stats import BenchError  # noqa: E402

if TYPE_CHECKING:
    from collector.store import Store

TICK_MS = 10
TARGET_RATE, TARGET_STALL_MS = 50_000, 50.0


def cpu_s(pid: int | None = None) -> float:
    """User+system CPU seconds of a process (this one by default)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StoredCounter(threading.Thread):
    """Polls the collector's database (off the GUI thread, through its own Store) until it holds
    `want` flood records."""

    def __init__(self, store: Store, want: int, timeout: float) -> None:
        super().__init__(daemon=True)
        self.store, self.want, self.timeout = store, want, timeout
        self.done_at: float | None = None
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.stop.is_set() and time.monotonic() < deadline:
            self.count = sum(s.records for s in self.store.streams(source="flood"))
            if self.count >= self.want:
                self.done_at = time.monotonic()
                return
            time.sleep(0.05)


def one_run(lines: int, workdir: str, n: int) -> dict:
    from fakes import FLOOD
    from PySide6.QtCore import QSettings, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from collector.settings import normalise_db_url
    from collector.store import Store
    from gui.thread_relay import GuiThreadRelay
    from main_app import MainWindow
    from monitor.controller import MonitorController

    app = QApplication.instance() or QApplication(["bench"])
    db_path = os.path.join(workdir, f"pipeline{n}.db")
    server = ServerProcess("--db", db_path, output=os.path.join(workdir, f"server{n}.log"))
    controller = MonitorController(server.url, state_dir=os.path.join(workdir, f"state{n}"), registry=[FLOOD],
                                   relay=GuiThreadRelay())
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
    store = Store(normalise_db_url(db_path))
    counter = StoredCounter(store, lines + 1, timeout=max(120.0, lines / 2000))
    finisher = QTimer()
    finisher.timeout.connect(lambda: app.quit() if not counter.is_alive() else None)
    try:
        for _ in range(20):                     # let the window settle before measuring
            app.processEvents()
        ticker.start(TICK_MS)
        finisher.start(50)
        started = time.monotonic()
        last[0] = started
        cpu0 = (cpu_s(), cpu_s(server.proc.pid))
        if not window.start_metric("flood", {"lines": lines}):
            raise BenchError("the window refused to start the flood metric")
        counter.start()
        app.exec()
        cpu1 = (cpu_s(), cpu_s(server.proc.pid))
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
    events = store.records(source="flood", kind="event", limit=lines + 1000)
    seen = {json.loads(r["data"]).get("i") for r in events}
    lost = lines - len(seen & set(range(lines)))
    stored = counter.count
    store.close()
    wall = counter.done_at - started
    return {"records_per_s": (lines + 1) / wall, "stored": stored, "lost": lost,
            "app_cpu_pct": 100 * (cpu1[0] - cpu0[0]) / wall, "collector_cpu_pct": 100 * (cpu1[1] - cpu0[1]) / wall,
            "dropped": status["dropped"], "stall_p50_ms": stats.percentile(lateness, 50),
            "stall_p99_ms": stats.percentile(lateness, 99), "stall_max_ms": max(lateness, default=0.0),
            "ticks": len(lateness)}


def run(quick: bool = False, reps: int | None = None) -> dict:
    reps = reps or (3 if quick else 5)
    lines = 100_000 if quick else 300_000
    workdir = tempfile.mkdtemp(prefix="bench-pipeline-")
    samples: list[dict] = []

    def one(config: str, rep: int) -> dict:
        sample = one_run(lines, workdir, rep)
        samples.append(sample)
        harness.log(f"  rep {rep + 1}: {sample['records_per_s']:,.0f} records/s, lost {sample['lost']}, "
                    f"stall p99 {sample['stall_p99_ms']:.1f} ms, max {sample['stall_max_ms']:.1f} ms")
        return sample

    harness.log(f"pipeline: {reps} repetitions of {lines:,} records through window, worker, transport, collector")
    try:
        stats.alternate(["flood"], one, reps, harness.log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    row = {k: stats.summary([s[k] for s in samples], 1) for k in
           ("records_per_s", "stall_p50_ms", "stall_p99_ms", "stall_max_ms", "app_cpu_pct", "collector_cpu_pct")}
    row["lost_total"] = sum(s["lost"] for s in samples)
    row["dropped_total"] = sum(s["dropped"] for s in samples)
    return {"title": "Pipeline throughput", "reps": reps, "lines": lines, "row": row,
            "targets": [
                stats.target("records/s stored end to end (zero loss)", f">= {TARGET_RATE:,}",
                               row["records_per_s"]["median"] if not row["lost_total"] else 0, TARGET_RATE,
                               higher_is_better=True),
                stats.target("GUI event-loop stall p99 while records flow", f"<= {TARGET_STALL_MS:g} ms",
                               row["stall_p99_ms"]["median"], TARGET_STALL_MS, higher_is_better=False, unit=" ms")]}


def table(result: dict) -> str:
    r = result["row"]
    rows = [[f"{result['lines']:,} records", stats.fmt(r["records_per_s"]), f"{r['lost_total']} / {r['dropped_total']}",
             stats.fmt(r["stall_p50_ms"], " ms", 1), stats.fmt(r["stall_p99_ms"], " ms", 1),
             stats.fmt(r["stall_max_ms"], " ms", 0), stats.fmt(r.get("app_cpu_pct"), " %", 0),
             stats.fmt(r.get("collector_cpu_pct"), " %", 0)]]
    return stats.md_table(["run", "records/s stored", "lost / dropped (all reps)", "stall p50", "stall p99",
                             "stall max", "app CPU", "collector CPU"], rows)


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
