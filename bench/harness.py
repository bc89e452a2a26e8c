"""What every benchmark shares: alternating repetitions and their statistics, tracers started and
stopped as subprocesses (ready line, peak RSS), C workloads built with the system compiler, and the
machine a result was measured on.

The machine is shared and noisy, so a benchmark never compares a number with one taken minutes
apart: each repetition runs every configuration once, in a rotated order, and figures are medians of
per-repetition differences or ratios, with min and max shown.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
BUILD = os.path.join(BENCH, "build")
for _path in (ROOT, os.path.join(ROOT, "metrics"), os.path.join(ROOT, "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from helpers import PYTHON, loaded_prog_ids, prog_ids_of  # noqa: E402

__all__ = ["PYTHON", "loaded_prog_ids", "prog_ids_of"]


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


def loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# --- statistics ------------------------------------------------------------------------------------
def summary(values: Iterable[float], digits: int = 1) -> dict:
    """median, min, max and n of a list (None when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(vals), digits), "min": round(min(vals), digits),
            "max": round(max(vals), digits), "n": len(vals)}


def alternate(configs: list[str], run_one: Callable[[str, int], float | dict | None], reps: int,
              log: Callable[[str], None] | None = None) -> dict[str, list]:
    """Run every configuration once per repetition, rotating the order so none is always first.

    Returns {config: [value per repetition]} (None where a run failed)."""
    out: dict[str, list] = {c: [] for c in configs}
    for rep in range(reps):
        shift = rep % len(configs)
        for name in configs[shift:] + configs[:shift]:
            try:
                value = run_one(name, rep)
            except BenchError as exc:
                value = None
                if log:
                    log(f"  {name} rep {rep + 1}: {exc}")
            out[name].append(value)
            if log and value is not None and not isinstance(value, dict):
                log(f"  rep {rep + 1}/{reps} {name}: {value:g}")
    return out


def paired(values: dict[str, list], base: str, how: str = "diff") -> dict[str, list]:
    """Per-repetition difference (or ratio) of every configuration to `base`, same repetition."""
    out = {}
    for name, vals in values.items():
        pairs = zip(vals, values[base], strict=True)
        if how == "diff":
            out[name] = [v - b for v, b in pairs if v is not None and b is not None]
        else:
            out[name] = [v / b for v, b in pairs if v is not None and b]
    return out


def target(name: str, goal: str, measured: float | None, limit: float, higher_is_better: bool,
           unit: str = "") -> dict:
    """One target's verdict: met or not, and the margin as a factor of the limit."""
    if measured is None:
        return {"name": name, "target": goal, "measured": None, "met": None, "margin": "not measured"}
    met = measured >= limit if higher_is_better else measured <= limit
    if higher_is_better:
        margin = f"{measured / limit:.2f}x the target" if limit else ""
    else:
        margin = f"{measured / limit:.2f}x the limit" if limit else ""
    return {"name": name, "target": goal, "measured": f"{measured:g}{unit}", "met": met, "margin": margin}


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


class BenchError(Exception):
    """A run that failed in a way the benchmark reports rather than crashes on."""


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
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(1)
                why = "exited" if self.proc.poll() is not None else f"not ready after {timeout}s"
                last = " | ".join(list(self.tail)[-3:])
                self.stop()
                raise BenchError(f"{self.name} {why}: {last[-300:]}")
        return self.first_line_at["ready"] - self.started

    def rss_kb(self) -> int | None:
        """Current resident set size, from /proc/PID/status."""
        return proc_status_kb(self.proc.pid, "VmRSS")

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM, wait, SIGKILL after `timeout`; returns the exit status and records the peak RSS."""
        if self.status is not None:
            return self.status
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
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


_SYSCALL_PROG = re.compile(r"sys_(enter|exit)|raw_syscalls")
_TRACING_TYPES = {"tracepoint", "raw_tracepoint", "perf_event", "kprobe", "tracing", "raw_tracepoint_writable"}


def foreign_progs(own_pids: Iterable[int] = (), syscalls_only: bool = False) -> set[int]:
    """Tracing BPF programs other people have loaded right now (another engineer's test slows every
    traced event on the machine while it runs)."""
    own: set[int] = set()
    for pid in own_pids:
        own |= prog_ids_of(pid)
    try:
        out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {p["id"] for p in json.loads(out or "[]")
            if p["id"] not in own and p.get("type") in _TRACING_TYPES
            and (not syscalls_only or _SYSCALL_PROG.search(p.get("name", "")))}


class Quiet:
    """Runs a measurement again (up to `retries` times) when someone else's tracing program came or
    went while it ran, and counts how many measurements still overlapped one."""

    def __init__(self, syscalls_only: bool, retries: int = 2) -> None:
        self.syscalls_only = syscalls_only
        self.retries = retries
        self.retried = 0
        self.overlapped = 0

    def run(self, measure: Callable[[], float], own_pids: Iterable[int] = ()) -> float:
        own_pids = list(own_pids)
        for attempt in range(self.retries + 1):
            before = foreign_progs(own_pids, self.syscalls_only)
            value = measure()
            after = foreign_progs(own_pids, self.syscalls_only)
            if before == after or attempt == self.retries:
                break
            self.retried += 1
            time.sleep(1)
        if before or after:
            self.overlapped += 1
        return value

    def note(self) -> dict:
        return {"retried_runs": self.retried, "runs_with_foreign_tracers": self.overlapped}


def quiet_note(result: dict) -> str:
    """The sentence a table ends with when other people's tracers were running."""
    q = result.get("interference") or {}
    if not q.get("runs_with_foreign_tracers") and not q.get("retried_runs"):
        return ""
    return (f"\n\nOther people's tracing programs were loaded during {q['runs_with_foreign_tracers']} run(s) "
            f"(they slow every configuration they overlap); {q['retried_runs']} run(s) were repeated because one "
            f"was loaded or unloaded mid-run.")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class BpfStats:
    """The kernel's own per-program run time (kernel.bpf_stats_enabled) over a block of code, for the
    given program ids: {id: {"name", "runs", "ns_per_run"}}. Turning stats on adds two clock reads to
    every program run, so it is only ever used in a separate profiling pass, never in a timed one."""

    SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"

    def __init__(self, prog_ids: set[int]) -> None:
        self.ids = prog_ids
        self.result: dict[int, dict] = {}

    def _snapshot(self) -> dict[int, tuple[str, int, int]]:
        out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
        return {p["id"]: (p.get("name", ""), p.get("run_cnt", 0), p.get("run_time_ns", 0))
                for p in json.loads(out or "[]") if p["id"] in self.ids}

    def __enter__(self) -> BpfStats:
        with open(self.SYSCTL) as f:
            self._was = f.read().strip()
        with open(self.SYSCTL, "w") as f:
            f.write("1")
        self._before = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        after = self._snapshot()
        with open(self.SYSCTL, "w") as f:
            f.write(self._was)
        for pid, (name, cnt, ns) in after.items():
            _, cnt0, ns0 = self._before.get(pid, (name, 0, 0))
            runs = cnt - cnt0
            self.result[pid] = {"name": name, "runs": runs, "ns_per_run": round((ns - ns0) / runs, 1) if runs else None}


# --- markdown ----------------------------------------------------------------------------------------
def fmt(s: dict | None, unit: str = "", digits: int | None = None) -> str:
    """A summary as `median (min–max)`, or `n/a`."""
    if not s or s.get("median") is None:
        return "n/a"

    def num(v: float) -> str:
        if digits is not None:
            return f"{v:,.{digits}f}"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2g}" if abs(v) < 1 else f"{v:,.1f}"

    if s.get("n", 1) > 1 and num(s["min"]) != num(s["max"]):
        return f"{num(s['median'])}{unit} ({num(s['min'])}–{num(s['max'])})"
    return f"{num(s['median'])}{unit}"


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- metrics and workloads ---------------------------------------------------------------------------
def metric_argv(spec, **values) -> list[str]:
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
