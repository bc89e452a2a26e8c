"""One running metric: its script as a subprocess, read without blocking, parsed into records that
reach the owner in batches through callbacks. Runs on a plain thread of its own and imports no Qt: the
headless runner uses it as it is, the window through gui/thread_relay.py (monitor/controller.py starts it).

The script runs in its own process group (so a stop reaches everything it started) and dies with the
thread that started it (PR_SET_PDEATHSIG). stdout and stderr are read together through a selector;
stdout lines go through the registry's output_parser and those that are not records go to the log with
stderr; with the default parser a read's whole run of record lines is parsed in one json.loads. Records
go to `sink` (the transport's submit) from this thread as they are parsed, so sending them costs the
owner's thread nothing, and to the `records` callback every `batch_interval` seconds or `batch_records`
records, never one call per line, so a script printing thousands of lines a second cannot flood the
owner. stop() asks with SIGINT, then SIGTERM, then SIGKILL, each after a short wait; the process is
always reaped. Every callback runs on the worker's thread.
"""
from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import config
from bcctool.taskinfo import descendants
from client.wire import is_record
from host import procs
from host.elevation import elevated_argv, missing_message, refused_message, said_by_elevation
from monitor.events import Relay, relayed

STOP_WAITS = (3.0, 2.0, 2.0)       # seconds after SIGINT, after SIGTERM, after SIGKILL
CLEAN_EXITS = (0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)
STDERR_TAIL = 20                   # stderr lines kept for a crash report
LOG_LINES_PER_SECOND = 200         # beyond this a chatty script's log lines are counted, not sent
MAX_LINE = 8 * 2**20
_DECODER = json.JSONDecoder()


def build_argv(spec: config.MetricSpec, values: dict[str, Any], python: str,
               elevate: list[str] | tuple[str, ...] | None, elevated: bool | None = None) -> list[str]:
    """The metric's command line, through the elevation command and the privilege helper when the app
    is not root. Raises ValueError with the reason when a value is invalid."""
    return elevated_argv(spec.name, spec.command(values, python=python), elevate, elevated)


@dataclass(frozen=True)
class WorkerCallbacks:
    """What a worker reports, each called on the worker's thread with the metric's name first."""

    records: Callable[[str, list[dict]], None]     # one batch of parsed records
    log: Callable[[str, str], None]                # a stderr or non-record stdout line
    started: Callable[[str, int], None]            # the pid (= its process group id)
    finished: Callable[[str, int, str], None]      # exit status, error ("" = clean); always the last call

    def through(self, relay: Relay) -> WorkerCallbacks:
        """These callbacks, each run on the relay owner's thread (in the order the worker called them)."""
        return relayed(self, relay)


class MetricWorker:
    def __init__(self, name: str, spec: config.MetricSpec, argv: list[str], callbacks: WorkerCallbacks, *,
                 children: procs.ChildRegistry | None = None, elevate: list[str] | tuple[str, ...] = (),
                 batch_records: int = 1000, batch_interval: float = 0.1,
                 stop_waits: tuple[float, float, float] = STOP_WAITS,
                 sink: Callable[[str, list[dict], list[bytes] | None], None] | None = None) -> None:
        self.name = name
        self.spec = spec
        self.argv = argv
        self.children = children
        self.elevate = tuple(elevate)          # set when argv starts with the elevation command
        self.batch_records = batch_records
        self.batch_interval = batch_interval
        self.stop_waits = stop_waits
        self.sink = sink                       # called on this thread with every run of parsed records
        # and, for a read parsed at once, its lines: the transport sends those, not the records encoded again
        self.callbacks = callbacks
        # a daemon, like a QThread: a worker that never ends cannot hold the interpreter's exit (its
        # script dies with the app anyway, PR_SET_PDEATHSIG)
        self.thread = threading.Thread(target=self.run, name=f"worker-{name}", daemon=True)
        self._whole_reads = spec.output_parser is config.parse_ndjson
        self.pid: int | None = None
        self.records_total = 0
        self._stop_requested = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_lock = threading.Lock()
        self._batch: list[dict] = []
        self._batch_started = 0.0
        self._partial = {False: b"", True: b""}
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._log_window = 0.0
        self._log_count = 0
        self._log_suppressed = 0

    # --- called from other threads --------------------------------------------------------------------
    def start(self) -> None:
        """Run the metric on the worker's own thread."""
        self.thread.start()

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker's thread to end; True when it has."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def stop(self) -> None:
        """Ask the worker to stop its process; returns at once (the finished callback follows)."""
        self._stop_requested = True
        with self._wake_lock:
            if self._wake_w is not None:
                try:
                    os.write(self._wake_w, b"x")
                except BlockingIOError:
                    pass        # pipe full: a wake is pending anyway

    def bpf_program_ids(self) -> set[int]:
        """BPF programs held by the process and its descendants (sudo's child when elevated)."""
        pid = self.pid
        if pid is None:
            return set()
        return set().union(*(procs.prog_ids_of(p) for p in descendants(pid)))

    # --- the worker thread ----------------------------------------------------------------------------
    def run(self) -> None:
        status, error = -1, ""
        try:
            status, error = self._run()
        except Exception as exc:  # noqa: BLE001 - whatever happens, the owner must hear of the end
            status, error = -1, f"{self.name}: worker failed: {type(exc).__name__}: {exc}"
        finally:
            with self._wake_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_w = None
        self.callbacks.finished(self.name, status, error)

    def _run(self) -> tuple[int, str]:
        if self._stop_requested:
            return 0, ""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        argv, hook = procs.dying_with_parent(self.argv)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=config.ROOT, env=env, start_new_session=True,
                                    preexec_fn=hook)
        except OSError as exc:
            return 127, self._start_error(exc)
        self.pid = proc.pid
        if self.children:
            self.children.record(proc.pid, self.argv)
        self.callbacks.started(self.name, proc.pid)
        killed_hard = False
        try:
            killed_hard = self._pump(proc)
        finally:
            if proc.poll() is None:         # only after an exception in _pump
                _signal_group(proc.pid, signal.SIGKILL)
            status = proc.wait()
            if self.children:
                self.children.forget(proc.pid)
            proc.stdout.close()
            proc.stderr.close()
        return status, self._verdict(status, killed_hard)

    def _pump(self, proc: subprocess.Popen) -> bool:
        """Read both pipes until the process has exited and they are closed; True if the stop had
        to go as far as SIGKILL."""
        sel = selectors.DefaultSelector()
        for stream, is_err in ((proc.stdout, False), (proc.stderr, True)):
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), selectors.EVENT_READ, is_err)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        open_pipes, exited, group_cleared = 2, False, False
        stage, next_step, killed_hard = 0, 0.0, False
        try:
            while open_pipes or not exited:
                now = time.monotonic()
                timeout = 0.5
                if self._batch:
                    timeout = min(timeout, self._batch_started + self.batch_interval - now)
                if stage:
                    timeout = min(timeout, next_step - now)
                if not open_pipes:
                    timeout = min(timeout, 0.02)     # pipes closed: only the exit is left to see
                for key, _ in sel.select(max(0.0, timeout)):
                    if key.data is None:
                        _drain(self._wake_r)
                        continue
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        self._feed(key.data, chunk)
                    else:
                        sel.unregister(key.fd)
                        open_pipes -= 1
                        self._end_of(key.data)
                now = time.monotonic()
                if not exited:
                    exited = _has_exited(proc.pid)
                if exited and not group_cleared:
                    # Anything the script started dies with it (and closes the pipes it inherited).
                    # The exited leader is not reaped yet, so its pgid cannot be reused by now.
                    _signal_group(proc.pid, signal.SIGKILL)
                    group_cleared = True
                elif not exited and self._stop_requested and stage < 3 and now >= next_step:
                    sig = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)[stage]
                    killed_hard = sig == signal.SIGKILL
                    _signal_group(proc.pid, sig)
                    next_step = now + self.stop_waits[stage]
                    stage += 1
                if self._batch and (len(self._batch) >= self.batch_records
                                    or now - self._batch_started >= self.batch_interval):
                    self._flush()
        finally:
            sel.close()
        self._flush()
        return killed_hard

    # --- lines ----------------------------------------------------------------------------------------
    def _feed(self, is_err: bool, chunk: bytes) -> None:
        data = self._partial[is_err] + chunk
        *lines, rest = data.split(b"\n")
        if len(rest) > MAX_LINE:
            self._log(f"[a line of more than {MAX_LINE} bytes was dropped]")
            rest = b""
        self._partial[is_err] = rest
        if not is_err and self._whole_reads and lines:
            records = parse_records(lines)
            if records is not None:
                self._add(records, lines)
                return
        for raw in lines:
            self._line(is_err, raw)

    def _end_of(self, is_err: bool) -> None:
        if self._partial[is_err]:
            self._line(is_err, self._partial[is_err])
            self._partial[is_err] = b""

    def _line(self, is_err: bool, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if is_err:
            if text.strip():
                self._stderr_tail.append(text)
                if not self._elevation_said(text):     # reported once, in the verdict
                    self._log(text)
            return
        try:
            record = self.spec.output_parser(text)
        except Exception:  # noqa: BLE001 - a parser bug must not end the metric; the line is kept
            record = None
        if record is None:
            if text.strip():
                self._log(text)
            return
        self._add([record])

    def _add(self, records: list[dict], lines: list[bytes] | None = None) -> None:
        if self.sink is not None:
            self.sink(self.name, records, lines)
        if not self._batch:
            self._batch_started = time.monotonic()
        self._batch.extend(records)
        self.records_total += len(records)
        if len(self._batch) >= self.batch_records:
            self._flush()

    def _flush(self) -> None:
        batch, self._batch, size = self._batch, [], self.batch_records
        if len(batch) <= size:
            if batch:
                self.callbacks.records(self.name, batch)
            return
        for start in range(0, len(batch), size):      # a read's run of records may pass the bound
            self.callbacks.records(self.name, batch[start:start + size])

    def _log(self, text: str) -> None:
        now = time.monotonic()
        if now - self._log_window >= 1.0:
            if self._log_suppressed:
                self.callbacks.log(self.name, f"[{self._log_suppressed} more log lines not shown]")
            self._log_window, self._log_count, self._log_suppressed = now, 0, 0
        if self._log_count < LOG_LINES_PER_SECOND:
            self._log_count += 1
            self.callbacks.log(self.name, text)
        else:
            self._log_suppressed += 1

    # --- how it ended ---------------------------------------------------------------------------------
    def _verdict(self, status: int, killed_hard: bool) -> str:
        if self._log_suppressed:
            self.callbacks.log(self.name, f"[{self._log_suppressed} more log lines not shown]")
        if self._stop_requested:
            if killed_hard:
                return f"{self.name} did not stop on SIGINT or SIGTERM and was killed"
            if status in CLEAN_EXITS:
                return ""
        elif status == 0:
            return ""
        elevation = self._elevation_error()
        if elevation:
            return elevation
        how = f"killed by {_signal_name(-status)}" if status < 0 else f"exited with status {status}"
        tail = "\n".join(list(self._stderr_tail)[-5:])
        return f"{self.name} {how}" + (f":\n{tail}" if tail else " (nothing on stderr)")

    def _elevation_error(self) -> str:
        """One clear message when the elevation command itself refused (e.g. sudo wants a password)."""
        said = [line for line in self._stderr_tail if self._elevation_said(line)]
        if not said:
            return ""
        return refused_message(self.name, self.elevate, said[-1])

    def _elevation_said(self, line: str) -> bool:
        """A line from the elevation command itself (`sudo: ...`), before the script printed a record."""
        return not self.records_total and said_by_elevation(self.elevate, line)

    def _start_error(self, exc: OSError) -> str:
        program = self.argv[0]
        if self.elevate and isinstance(exc, FileNotFoundError):
            return missing_message(self.name, program)
        return f"cannot start {self.name}: {program}: {exc.strerror or exc}"


def parse_records(lines: list[bytes]) -> list[dict] | None:
    """Lines that are all NDJSON records (as config.parse_ndjson takes them), decoded as one text and
    parsed object after object; None when any line is not exactly one record, and the caller goes line
    by line. Each object must end at a line's end and there must be as many as lines, so no object
    spans two lines (JSON allows a newline inside one) and none shares a line."""
    try:
        text = b"\n".join(lines).decode()
    except UnicodeDecodeError:          # line by line, with replacement characters
        return None
    records, at, decode = [], 0, _DECODER.raw_decode
    try:
        while at < len(text):
            record, at = decode(text, at)
            if at < len(text) and text[at] != "\n":
                return None
            at += 1
            if not is_record(record):
                return None
            records.append(record)
    except ValueError:                  # not JSON, or whitespace around it
        return None
    return records if len(records) == len(lines) else None


def _has_exited(pid: int) -> bool:
    """Exited, without reaping it (WNOWAIT), so its pid and process group stay reserved until
    the rest of the group has been cleared."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
