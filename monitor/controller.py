"""What the window and the headless runner share: start and stop metrics, each in a MetricWorker on a
thread of its own whose records go straight to the Transport from that thread. No Qt: the owner hands
in a Relay (monitor/events.py) that carries the workers' news to its own thread, where the controller
updates its totals and emits its hooks; the subprocess I/O is in the workers and the network I/O in the
transport's threads, so the owner never waits on either. The window's relay is gui/thread_relay.py
(Qt's event loop runs the calls); the headless runner's an EventQueue it waits on.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import config
from client import statedir
from client.transport import Transport
from host import procs
from host.elevation import DEFAULT_ELEVATE, needs_elevation
from monitor.events import Hook, Relay
from monitor.metric_worker import MetricWorker, WorkerCallbacks, build_argv
from registry.args import APP_PID_ENV


class MonitorController:
    """Its hooks (monitor/events.py), emitted on the owner's thread:
    records(name, list[dict])               parsed records, ~10 batches a second
    log(name, line)                         name "" = the app
    metric_started(name)
    metric_finished(name, status, error)    error "" when stopped cleanly (not between the two runs
                                            of a restart_metric)
    transport_status(dict)                  Transport.status(), about once a second
    """

    def __init__(self, server_url: str | None = None, token: str | None = None,
                 state_dir: str | None = None, elevate: list[str] | None = None, *, relay: Relay,
                 registry: Iterable[config.MetricSpec] | None = None, python: str | None = None,
                 transport_tuning: dict[str, Any] | None = None, worker_options: dict[str, Any] | None = None,
                 status_interval_ms: int = 1000) -> None:
        self.records, self.log, self.metric_started = Hook(), Hook(), Hook()
        self.metric_finished, self.transport_status = Hook(), Hook()
        self.relay = relay          # required: a controller nobody relays for would never report a thing
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
        self._workers: dict[str, MetricWorker] = {}
        self._values: dict[str, dict] = {}          # the raw values each metric was last started with
        self._restarts: dict[str, dict] = {}        # metric -> the values it starts with again once ended
        self._intervals: dict[str, Any] = {}        # each metric's newest record's interval, for its notes
        self._retiring: list[MetricWorker] = []     # finished, their threads ending
        self.totals: dict[str, dict[str, Any]] = {}   # per metric: records, started, status, error
        self._last_error = ""
        self._callbacks = WorkerCallbacks(records=self._on_records, log=self._on_log, started=self._on_started,
                                          finished=self._on_finished).through(self.relay)
        self._closed = threading.Event()
        threading.Thread(target=_post_status, args=(weakref.ref(self), status_interval_ms / 1000, self._closed),
                         name="controller-status", daemon=True).start()
        for message in self.startup_messages:   # after the caller has had a chance to connect
            self.relay.post(lambda m=message: self.log.emit("", m))

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
        if any(arg.name == "app_pid" for arg in spec.args) and not values.get("app_pid"):
            values = {**values, "app_pid": app_pid()}      # what the metric leaves out as the profiler's own
        argv = build_argv(spec, values, self.python, self.elevate, elevated)
        worker = MetricWorker(name, spec, argv, self._callbacks, children=self.children,
                              elevate=self.elevate if elevated else (), sink=self.transport.submit,
                              **self.worker_options)
        self._workers[name] = worker
        self._values[name] = dict(values)
        self.totals[name] = {"records": 0, "started": False, "status": None, "error": ""}
        worker.start()

    def stop_metric(self, name: str) -> None:
        """Ask `name` to stop; returns at once, metric_finished follows."""
        self._restarts.pop(name, None)
        worker = self._workers.get(name)
        if worker:
            worker.stop()

    def stop_all(self) -> None:
        self._restarts.clear()
        for worker in self._workers.values():
            worker.stop()

    def restart_metric(self, name: str, values: dict) -> None:
        """Stop `name` and, once it has ended, start it again with `values` (the overhead budget's switch
        to its sampling mode): its records go on in the same stream, and metric_finished is not emitted
        between the two runs. ValueError(reason) when it is not running or a value is invalid."""
        if name not in self._workers:
            raise ValueError(f"{name} is not running")
        self.registry[name].command(values)         # refused now, not after the stop
        self._restarts[name] = dict(values)
        self._workers[name].stop()

    def values_of(self, name: str) -> dict | None:
        """The raw values `name` was last started with (None: never started)."""
        values = self._values.get(name)
        return dict(values) if values is not None else None

    def note(self, name: str, fields: dict[str, Any]) -> dict:
        """A `note` record in `name`'s stream, written by the app (docs/ndjson.md): to the collector
        and to the records hook (the tab, a recording) as if the metric had printed it."""
        record = {"metric": name, "ts": time.time(), "kind": "note", "interval": self._intervals.get(name, 0),
                  **fields}
        self.transport.submit(name, [record])
        self._on_records(name, [record])
        return record

    def running(self) -> list[str]:
        return list(self._workers)

    def bpf_program_ids(self) -> dict[str, set[int]]:
        """metric -> ids of the BPF programs its subprocess holds now (from /proc/PID/fdinfo)."""
        return {name: worker.bpf_program_ids() for name, worker in self._workers.items()}

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every metric, wait for them (delivering their last records), then flush the transport."""
        deadline = time.monotonic() + timeout
        self.stop_all()
        while self._alive() and time.monotonic() < deadline:
            for worker in self._alive():
                worker.join(0.02)
            self.relay.process()                 # their records and ends, relayed to this thread
        self.relay.process()
        for name in self._workers:
            self.log.emit(name, f"{name} did not stop within {timeout:g}s")
        self._closed.set()
        self.transport.close(max(1.0, deadline - time.monotonic()))
        self._emit_status()

    # --- from the workers (relayed onto this thread) --------------------------------------------------
    def _on_records(self, name: str, records: list) -> None:
        totals = self.totals.get(name)
        if totals is not None:
            totals["records"] += len(records)
        if records:
            self._intervals[name] = records[-1].get("interval", 0)
        self.records.emit(name, records)

    def _on_log(self, name: str, line: str) -> None:
        self.log.emit(name, line)

    def _on_started(self, name: str, pid: int) -> None:
        self.totals[name]["started"] = True
        self.totals[name]["pid"] = pid
        self.metric_started.emit(name)

    def _on_finished(self, name: str, status: int, error: str) -> None:
        worker = self._workers.pop(name, None)
        if worker:
            self._retiring.append(worker)    # its thread ends shortly; the name is free again now
        values = self._restarts.pop(name, None)
        if values is not None:
            error = self._start_again(name, values, error)
            if error is None:
                return
        self.totals[name].update(status=status, error=error)
        self.transport.end_of(name)         # its last records are all in the transport: send them now
        if error:
            self.log.emit(name, error)
        self.metric_finished.emit(name, status, error)

    def _start_again(self, name: str, values: dict, error: str) -> str | None:
        """restart_metric's second half: None once started, else the error its end is reported with."""
        if error:
            self.log.emit(name, error)              # how the first run ended, said before the second
        records = self.totals[name]["records"]
        try:
            self.start_metric(name, values)
        except ValueError as exc:
            return f"{name}: not started again: {exc}"
        self.totals[name]["records"] = records      # one stream: the first run's records count too
        return None

    def _emit_status(self) -> None:
        status = self.transport.status()
        if status["last_error"] and status["last_error"] != self._last_error:
            self.log.emit("", f"transport: {status['last_error']}")
        self._last_error = status["last_error"]
        self.transport_status.emit(status)

    def _alive(self) -> list[MetricWorker]:
        self._retiring = [w for w in self._retiring if w.is_alive()]
        return [w for w in [*self._workers.values(), *self._retiring] if w.is_alive()]


def app_pid() -> int:
    """The profiler app the metrics run for: the launcher that started this process with the collector
    (APP_PID_ENV), else this process. Each metric leaves out that process's tree (bcctool/own.py)."""
    try:
        pid = int(os.environ.get(APP_PID_ENV, ""))
    except ValueError:
        return os.getpid()
    return pid if pid > 0 and os.path.exists(f"/proc/{pid}") else os.getpid()


def _post_status(controller: weakref.ref[MonitorController], interval: float, closed: threading.Event) -> None:
    """transport_status every `interval` seconds, on the owner's thread, until shutdown (or until the
    controller is gone: a weak reference, so this thread never keeps one alive)."""
    while not closed.wait(interval):
        owner = controller()
        if owner is None:
            return
        owner.relay.post(owner._emit_status)
        del owner

