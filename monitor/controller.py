"""What the window and the headless runner share: start and stop metrics, each in a Worker on its own
QThread whose records go straight to the Transport from that thread. Lives on the main thread; its
slots only pass the workers' batches on to the window (the subprocess I/O and the hand-over to the
transport are in the workers, the network I/O in the transport's threads), so the GUI never waits on
either.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal, Slot

import config
from client import statedir
from client.transport import Transport
from host import procs
from host.elevation import DEFAULT_ELEVATE, needs_elevation
from worker import Worker, build_argv


class MonitorController(QObject):
    # `object`, not `list`: a `list` signal makes PySide convert every record to a QVariantMap and back
    # (~1.6 µs a record, keys reordered); `object` hands the same Python list over.
    records = Signal(str, object)               # metric name, list[dict] parsed records (~10 batches a second)
    log = Signal(str, str)                      # metric name ("" = app), one log line
    metric_started = Signal(str)                # metric name
    metric_finished = Signal(str, int, str)     # metric name, exit status, error ("" when stopped cleanly)
    transport_status = Signal(dict)             # Transport.status(), about once a second

    def __init__(self, server_url: str | None = None, token: str | None = None,
                 state_dir: str | None = None, elevate: list[str] | None = None, parent: QObject | None = None,
                 *, registry: Iterable[config.MetricSpec] | None = None, python: str | None = None,
                 transport_tuning: dict[str, Any] | None = None, worker_options: dict[str, Any] | None = None,
                 status_interval_ms: int = 1000) -> None:
        super().__init__(parent)
        self.state_dir = statedir.state_dir(state_dir)
        self.elevate = list(DEFAULT_ELEVATE if elevate is None else elevate)
        self.registry = {spec.name: spec for spec in (config.METRICS if registry is None else registry)}
        self.python = python or sys.executable
        # the window takes records at most 10 times a second, in one batch however many arrived (the
        # transport has them already); the record bound only caps a batch's memory
        self.worker_options = {"batch_records": 50_000, "batch_interval": 0.1, **(worker_options or {})}
        self.children = procs.ChildRegistry(self.state_dir)
        # A previous run that was killed may have left metric processes (and their BPF programs).
        self.startup_messages = self.children.end_leftovers(self.elevate if needs_elevation() else None)
        self.transport = Transport(server_url, token, outbox_path=os.path.join(self.state_dir, "outbox.sqlite"),
                                   **(transport_tuning or {}))
        self._workers: dict[str, tuple[Worker, QThread]] = {}
        self._retiring: list[tuple[Worker, QThread]] = []
        self.totals: dict[str, dict[str, Any]] = {}   # per metric: records, started, status, error
        self._last_error = ""
        self._timer = QTimer(self)
        self._timer.timeout.connect(self._emit_status)
        self._timer.start(status_interval_ms)
        for message in self.startup_messages:   # after the caller has had a chance to connect
            QTimer.singleShot(0, self, lambda m=message: self.log.emit("", m))

    # --- the interface the window and headless.py use --------------------------------------------------
    def set_server(self, url: str | None, token: str | None) -> None:
        self.transport.set_server(url, token)

    def start_metric(self, name: str, values: dict) -> None:
        """Start `name` with the form's raw values; ValueError(reason) when they are invalid."""
        spec = self.registry.get(name)
        if spec is None:
            raise ValueError(f"no metric named {name!r}")
        if name in self._workers:
            raise ValueError(f"{name} is already running")
        elevated = needs_elevation() and bool(self.elevate)
        argv = build_argv(spec, values, self.python, self.elevate, elevated)
        worker = Worker(name, spec, argv, children=self.children, elevate=self.elevate if elevated else (),
                        sink=self.transport.submit, **self.worker_options)
        thread = QThread()
        thread.setObjectName(f"worker-{name}")
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.output_ready.connect(self._on_records)
        worker.log_line.connect(self._on_log)
        worker.process_started.connect(self._on_started)
        worker.process_finished.connect(self._on_finished)
        worker.process_finished.connect(thread.quit)
        thread.finished.connect(self._on_thread_finished)
        self._workers[name] = (worker, thread)
        self.totals[name] = {"records": 0, "started": False, "status": None, "error": ""}
        thread.start()

    def stop_metric(self, name: str) -> None:
        """Ask `name` to stop; returns at once, metric_finished follows."""
        entry = self._workers.get(name)
        if entry:
            entry[0].stop()

    def stop_all(self) -> None:
        for worker, _ in self._workers.values():
            worker.stop()

    def running(self) -> list[str]:
        return list(self._workers)

    def bpf_program_ids(self) -> dict[str, set[int]]:
        """metric -> ids of the BPF programs its subprocess holds now (from /proc/PID/fdinfo)."""
        return {name: worker.bpf_program_ids() for name, (worker, _) in self._workers.items()}

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every metric, wait for them (delivering their last records), then flush the transport."""
        deadline = time.monotonic() + timeout
        self.stop_all()
        while self._threads() and time.monotonic() < deadline:
            for thread in self._threads():
                thread.wait(20)
            QCoreApplication.processEvents()     # queued records and finished signals
        QCoreApplication.processEvents()
        for name in self._workers:
            self.log.emit(name, f"{name} did not stop within {timeout:g}s")
        self._timer.stop()
        self.transport.close(max(1.0, deadline - time.monotonic()))
        self._emit_status()

    # --- from the workers (queued onto this thread) ---------------------------------------------------
    @Slot(str, object)
    def _on_records(self, name: str, records: list) -> None:
        totals = self.totals.get(name)
        if totals is not None:
            totals["records"] += len(records)
        self.records.emit(name, records)

    @Slot(str, str)
    def _on_log(self, name: str, line: str) -> None:
        self.log.emit(name, line)

    @Slot(str, int)
    def _on_started(self, name: str, pid: int) -> None:
        self.totals[name]["started"] = True
        self.totals[name]["pid"] = pid
        self.metric_started.emit(name)

    @Slot(str, int, str)
    def _on_finished(self, name: str, status: int, error: str) -> None:
        entry = self._workers.pop(name, None)
        if entry:
            self._retiring.append(entry)     # its thread ends shortly; the name is free again now
        self.totals[name].update(status=status, error=error)
        self.transport.end_of(name)         # its last records are all in the transport: send them now
        if error:
            self.log.emit(name, error)
        self.metric_finished.emit(name, status, error)

    @Slot()
    def _on_thread_finished(self) -> None:
        for entry in [e for e in self._retiring if e[1].isFinished()]:
            self._retiring.remove(entry)
            entry[0].deleteLater()
            entry[1].deleteLater()

    @Slot()
    def _emit_status(self) -> None:
        status = self.transport.status()
        if status["last_error"] and status["last_error"] != self._last_error:
            self.log.emit("", f"transport: {status['last_error']}")
        self._last_error = status["last_error"]
        self.transport_status.emit(status)

    def _threads(self) -> list[QThread]:
        return [t for _, t in list(self._workers.values()) + self._retiring if not t.isFinished()]

