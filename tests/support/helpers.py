"""Helpers for tests that run metric scripts: start them, read their NDJSON, stop them, and check
that no BPF program they loaded is left in the kernel."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from bcctool import task_alive as process_alive  # noqa: F401 - true while a pid exists and is no zombie
from host.procs import prog_ids_of  # noqa: F401 - the app's own /proc/PID/fdinfo reader, re-exported

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")    # helpers, fakes and fixtures
SAMPLES = os.path.join(ROOT, "tests", "samples")    # real output of every metric
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
if not os.path.exists(PYTHON):
    PYTHON = sys.executable


def bpf_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc not importable"
    if not os.path.isdir("/sys/kernel/tracing/events") and not os.path.isdir("/sys/kernel/debug/tracing/events"):
        return "tracefs not mounted"
    return None


def script(name: str) -> str:
    return os.path.join(ROOT, "metrics", f"{name}.py")


class MetricProcess:
    """A metric script running with --json; records are read as they come."""

    def __init__(self, name: str, *args: str, json_output: bool = True) -> None:
        argv = [PYTHON, script(name), *args] + (["--json"] if json_output else [])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=ROOT, start_new_session=True)
        self.records: list[dict] = []
        self.prog_ids: set[int] = set()
        self._buf = ""

    def read_until(self, predicate, timeout: float = 60.0) -> dict:
        """Read records until one satisfies predicate; returns it (fails the test on timeout/exit)."""
        deadline = time.monotonic() + timeout
        for rec in self.records:
            if predicate(rec):
                return rec
        while time.monotonic() < deadline:
            line = self._readline(deadline - time.monotonic())
            if line is None:
                break
            rec = json.loads(line)
            self.records.append(rec)
            if predicate(rec):
                return rec
        status = self.proc.poll()
        if status is None:
            # still running yet silent: what it said on stderr is the diagnosis (a stderr pipe nobody reads
            # fills at 64 KiB and blocks the tool too), readable once it is gone
            self.kill()
        err = self.proc.stderr.read()
        raise AssertionError(f"no matching record within {timeout}s (exit={status}): {err[-2000:]}")

    def drain(self, quiet: float = 0.1) -> int:
        """Read the records already written (until none comes for `quiet` s); the last interval seen."""
        while (line := self._readline(quiet)) is not None:
            self.records.append(json.loads(line))
        return max((r["interval"] for r in self.records), default=0)

    def wait_meta(self, timeout: float = 90.0) -> dict:
        meta = self.read_until(lambda r: r["kind"] == "meta", timeout)
        self.prog_ids = prog_ids_of(self.proc.pid)
        return meta

    def _readline(self, timeout: float) -> str | None:
        fd = self.proc.stdout
        while "\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
            if not ready:
                return None
            chunk = os.read(fd.fileno(), 65536).decode()
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split("\n", 1)
        return line

    def stop(self, sig: int = signal.SIGINT, timeout: float = 10.0) -> tuple[int, float]:
        """Signal, then read everything left; (exit status, seconds it took to exit)."""
        start = time.monotonic()
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        took = time.monotonic() - start
        self.stderr = err
        for line in (self._buf + out).splitlines():
            if line.strip():
                self.records.append(json.loads(line))
        self._buf = ""
        return self.proc.returncode, took

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def of_kind(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["kind"] == kind]

    def lost_in_the_tool(self) -> list[dict]:
        """`lost` records but the kernel's skipped runs (`skipped:<program>`). The kernel skips a classic
        tracepoint program that fires in an interrupt while a bpf() map syscall runs on its CPU (ours
        at a cut, or another tool's): measured, 1 sched_wakeup in ~3,400 while a process read a 5,000-entry
        hash every 10 ms, 0 without the reads, 0 for a raw tracepoint on the same event. Those runs may be
        any task's, so a test checks its workload's own events by count; the rest is a loss of the tool."""
        return [r for r in self.of_kind("lost") if not r["source"].startswith("skipped:")]


def pids_with_cmdline(fragment: str) -> list[int]:
    """Processes (zombies included) whose command line contains `fragment`: the process table check
    for "nothing left behind"."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline:
            found.append(int(entry))
    return found


def loaded_prog_ids() -> set[int]:
    """Every BPF program id the kernel has loaded now."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


def run_workload(code: str, *args: str) -> subprocess.Popen:
    """A Python child that waits for a line on stdin before its work, so tracing can start first."""
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def human_output(metric: str, *args: str) -> str:
    """What a metric prints for a person (no --json) in a short run that must end by itself, exit 0."""
    tool = MetricProcess(metric, *args, json_output=False)
    out, err = tool.proc.communicate(timeout=60)
    assert tool.proc.returncode == 0, err
    return out


def headings(out: str, first: str) -> list[str]:
    """The headings of the first table in a metric's human output whose first heading is `first`
    (columns are two spaces apart at least, a heading in words holds single spaces); the unit of a
    column of times, which its values choose, written (TIME): "Blocked (TIME)"."""
    line = next((line for line in out.splitlines() if line.strip().startswith(first)), "")
    assert line, f"no table headed {first!r} in:\n{out[:2000]}"
    return [re.sub(r"\((ns|µs|ms|s)\)$", "(TIME)", h) for h in re.split(r"\s{2,}", line.strip())]


def end_workload(child: subprocess.Popen, timeout: float = 30.0) -> None:
    """Let a run_workload child past its last stdin wait (closing stdin), and reap it."""
    try:
        child.stdin.write("\n")
        child.stdin.close()
    except OSError:
        pass
    child.wait(timeout=timeout)


def next_line(child: subprocess.Popen) -> str:
    """Release a run_workload child past its next stdin wait (a line on its stdin) and take the line it
    prints then."""
    child.stdin.write("\n")
    child.stdin.flush()
    return child.stdout.readline()


def report_of(child: subprocess.Popen) -> Any:
    """next_line, a JSON report."""
    return json.loads(next_line(child))


def whole_machine_beside(tool: MetricProcess, argv: list[str]) -> tuple[int, str]:
    """Run a workload to its end while a whole-machine metric (started, its meta read) runs, then let
    the metric settle and stop it: (the workload's pid, its stdout). The metric is drained meanwhile:
    the whole machine's records, left unread, block it on its full pipe."""
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    while run.poll() is None:
        tool.drain()
    out = run.stdout.read()
    assert run.returncode == 0
    settle_and_stop(tool)
    return run.pid, out


def settle_and_stop(tool: MetricProcess, intervals: int = 2, timeout: float = 60.0) -> None:
    """Once the workload is done: let the metric print `intervals` more full intervals after the one in
    progress (by then every event it raised has been read and counted), then stop it; it must exit 0."""
    last = tool.read_until(lambda r: r["kind"] == "summary")["interval"]
    tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= last + intervals, timeout)
    status, _ = tool.stop()
    assert status == 0, tool.stderr


def progs_released(ids: set[int], timeout: float = 3.0) -> bool:
    """True once none of `ids` is loaded; the kernel frees a program shortly after its last fd closes
    (deferred work), so this polls briefly rather than asking once."""
    deadline = time.monotonic() + timeout
    while ids & loaded_prog_ids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def block_device_dir(candidates: tuple[str, ...] = ("/var/tmp", ROOT)) -> tuple[str, str]:
    """(directory, device name) of the first candidate on a real block device — not tmpfs or overlay,
    whose st_dev is no disk in /proc/partitions. A test that needs disk I/O fails without one."""
    names = {}
    with open("/proc/partitions") as f:
        for line in f.read().splitlines()[2:]:
            major, minor, _, name = line.split()
            names[os.makedev(int(major), int(minor))] = name
    for candidate in candidates:
        dev = os.stat(candidate).st_dev
        if dev in names:
            return candidate, names[dev]
    raise AssertionError(f"none of {candidates} is on a block device (tmpfs or overlay?)")


def timed_bound(count: int, n: int, calls: int | None = None) -> float:
    """Five standard deviations of how many of `count` calls a gap uniform in 1..2n-1 selects, the gaps
    running over `calls` calls in all (default: those alone). A renewal count has variance
    calls * var(gap) / mean(gap)^3; of the calls of one kind among others in a rhythm, the count varies
    more than that formula on the kind's own count says (whether a gap lands on it depends on the gaps
    before), but no more than the timed calls in all (simulated, 3,000 runs each: dd's read and write in
    turn at n=8, sd 102 against 74 on its own count and 105 in all; pairs at n=2, 158 against 112 and 158;
    a cycle of 3 at n=3, 132 against 86 and 149)."""
    return 5 * ((count if calls is None else calls) * ((2 * n - 1) ** 2 - 1) / 12 / n**3) ** 0.5


def metric_on_report(code: str, metric: str, *args: str) -> tuple[MetricProcess, Any]:
    """`metric *args -p CHILD` on a run_workload child that does its work once released and prints a
    JSON report of its own books; (the stopped tool, that report)."""
    return metric_on_child(run_workload(code), metric, *args)


def metric_on_child(child: subprocess.Popen, metric: str, *args: str) -> tuple[MetricProcess, Any]:
    """metric_on_report on a run_workload child already started (with arguments of its own)."""
    tool = MetricProcess(metric, "-p", str(child.pid), *args)
    try:
        tool.wait_meta()
        truth = report_of(child)
        settle_and_stop(tool)
    finally:
        tool.kill()
        end_workload(child)
    return tool, truth


def user_names(record: dict) -> list[str]:
    """The user frames' names of a cpuprofile `stack` record, root first."""
    return [f["name"] for f in record["frames"] if f["kind"] == "user"]


def contains(names: list[str], chain: list[str]) -> bool:
    """True when `chain` runs, frame after frame, somewhere in `names`."""
    k = len(chain)
    return any(names[i : i + k] == chain for i in range(len(names) - k + 1))


def cpuprofile_of(argv: list[str], *options: str, seconds: float = 3.0) -> tuple[list[dict], list[dict], dict]:
    """`cpuprofile -U -p PID -F 199 1 *options` on a workload started from argv, for `seconds` of
    intervals: (its stack records, the summaries, the meta record)."""
    child = subprocess.Popen(argv)
    tool = MetricProcess("cpuprofile", "-p", str(child.pid), "-U", "-F", "199", "1", *options)
    try:
        meta = tool.wait_meta()
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= seconds, timeout=120)
        settle_and_stop(tool, intervals=0)
    finally:
        tool.kill()
        child.kill()
        child.wait()
    return [r for r in tool.of_kind("stack") if r["pid"] == child.pid], tool.of_kind("summary"), meta


@contextlib.contextmanager
def reachable_by_others(path: str = ROOT) -> Iterator[None]:
    """A checkout under /root (0700, as a CI runner may clone it) is out of an unprivileged user's reach:
    meanwhile each closed directory above `path` gets the others' search bit (x, never r), as a
    root-owned install under /opt has; the modes are put back after. Without root, nothing changes."""
    opened = []
    try:
        if os.geteuid() == 0:
            at = path
            while at != os.path.dirname(at):
                at = os.path.dirname(at)
                mode = stat.S_IMODE(os.stat(at).st_mode)
                if not mode & 0o001:
                    os.chmod(at, mode | 0o001)
                    opened.append((at, mode))
        yield
    finally:
        for at, mode in reversed(opened):
            os.chmod(at, mode)


def sampling_started(pid: int, timeout: float = 90.0) -> None:
    """Wait until the metric process holds its sampling perf events (loaded and attached): one more
    perf event than its tracepoints, which are attached first, at load."""
    import config  # noqa: PLC0415 - the registry, for the tests that need it

    tracepoints = sum(not p.startswith("perf:") for p in config.get("cpuprofile").probes)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            links = []
        if links.count("anon_inode:[perf_event]") > tracepoints:
            return
        time.sleep(0.1)
    raise AssertionError("cpuprofile did not attach its perf events")
