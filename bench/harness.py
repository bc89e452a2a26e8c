"""What every benchmark runs things with: the project's paths on sys.path, tracers and metrics started
and stopped as subprocesses (ready line, peak RSS, CPU), C workloads built with the system compiler,
a light background load, and the machine a result was measured on. Figures are in stats.py, the
kernel's view (other people's programs, bpf_stats) in bpfwatch.py.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
BUILD = os.path.join(BENCH, "build")
for _path in (ROOT, os.path.join(ROOT, "tests", "support")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from helpers import PYTHON, prog_ids_of  # noqa: E402
from stats import BenchError  # noqa: E402

if TYPE_CHECKING:
    from registry.spec import MetricSpec

__all__ = ["PYTHON", "BenchError", "prog_ids_of"]


# --- the machine -----------------------------------------------------------------------------------
def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "cpu": model,
        "mem_gb": round(mem_kb / 1024 / 1024, 1),
        "os": _os_name(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _os_name() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


# --- build -----------------------------------------------------------------------------------------
def compile_c(name: str) -> str:
    """bench/NAME.c built with the system gcc into bench/build/NAME (rebuilt when the source is newer)."""
    src = os.path.join(BENCH, f"{name}.c")
    out = os.path.join(BUILD, name)
    os.makedirs(BUILD, exist_ok=True)
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        gcc = shutil.which("gcc") or "cc"
        subprocess.run([gcc, "-O2", "-Wall", "-o", out, src], check=True)
    return out


def run_workload(argv: list[str], timeout: float = 300) -> str:
    """Run a workload (possibly wrapped by a tracer) and return its stdout; BenchError on failure."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{argv[0]} timed out after {timeout}s") from None
    if result.returncode != 0:
        raise BenchError(f"{' '.join(argv[:4])}... exit {result.returncode}: {result.stderr.strip()[-300:]}")
    return result.stdout


# --- tracers as subprocesses -----------------------------------------------------------------------
class Tracer:
    """A tool running in the background: started, awaited until it prints its ready line, stopped with
    SIGTERM (SIGKILL if it lingers). Its output is drained by a thread so a full pipe never stalls it;
    peak RSS comes from the kernel's rusage of the child when it is reaped."""

    def __init__(self, argv: list[str], ready: str | Callable[[str], bool], name: str = "",
                 env: dict | None = None) -> None:
        self.name = name or os.path.basename(argv[0])
        self.argv = argv
        self._ready_test = (lambda line: ready in line) if isinstance(ready, str) else ready
        self.ready = threading.Event()
        self.tail: deque[str] = deque(maxlen=40)
        self.lines = 0
        self.first_line_at: dict[str, float] = {}
        self.on_line: Callable[[str], None] | None = None
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=ROOT, start_new_session=True, env=env)
        self.peak_rss_kb: int | None = None
        self.cpu_s: float | None = None
        self.status: int | None = None
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.lines += 1
            self.tail.append(line.rstrip("\n"))
            if not self.ready.is_set() and self._ready_test(line):
                self.first_line_at["ready"] = time.monotonic()
                self.ready.set()
            if self.on_line:
                self.on_line(line)

    def wait_ready(self, timeout: float = 120) -> float:
        """Seconds from start to the ready line; BenchError (with its last output) if it never came."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.exited() or time.monotonic() > deadline:
                self._reader.join(1)
                why = "exited" if self.exited() else f"not ready after {timeout}s"
                last = " | ".join(list(self.tail)[-3:])
                self.stop()
                raise BenchError(f"{self.name} {why}: {last[-300:]}")
        return self.first_line_at["ready"] - self.started

    def rss_kb(self) -> int | None:
        """Current resident set size, from /proc/PID/status."""
        return proc_status_kb(self.proc.pid, "VmRSS")

    def exited(self) -> bool:
        """True once the child has exited. It is not reaped here (Popen.poll would reap it and take its
        rusage with it): stop() reaps it with wait4, which is where peak RSS and CPU time come from."""
        if self.status is not None or self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM, wait, SIGKILL after `timeout`; returns the exit status and records the peak RSS."""
        if self.status is not None:
            return self.status
        if not self.exited():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:
                # reaped by someone else (a Popen.poll() or wait() on self.proc): its status is in the
                # Popen; its rusage went with the reaping, so peak RSS and CPU stay None (not guessed)
                self.status = self.proc.returncode if self.proc.returncode is not None else -1
                break
            if pid:
                self.peak_rss_kb = usage.ru_maxrss
                self.cpu_s = usage.ru_utime + usage.ru_stime
                self.status = os.waitstatus_to_exitcode(status)
                self.proc.returncode = self.status
                break
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
            time.sleep(0.02)
        self._reader.join(2)
        return self.status

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def proc_status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- metrics and workloads ---------------------------------------------------------------------------
def metric_argv(spec: MetricSpec, **values: Any) -> list[str]:
    """argv running a registry metric with --json: its defaults, a sample value for each required
    argument, then `values`."""
    chosen = {a.name: a.sample for a in spec.args if a.required and a.sample is not None}
    chosen.update({k: v for k, v in values.items() if any(a.name == k for a in spec.args)})
    return spec.command(chosen, python=PYTHON)


def is_meta(line: str) -> bool:
    import config  # noqa: PLC0415 - the registry is only needed by the benches that run metrics

    record = config.parse_ndjson(line)
    return bool(record) and record["kind"] == "meta"


class BackgroundLoad:
    """bench/mixed.c in its light endless mode (about 100 rounds a second): every metric has events
    to report while it is measured."""

    def __enter__(self) -> BackgroundLoad:
        binary = compile_c("mixed")
        self.proc = subprocess.Popen([binary, "0", BUILD], stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
