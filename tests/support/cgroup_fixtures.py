"""cgroup v2 groups a test makes under the real v2 mount, and workloads started inside them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import block_device_dir

import config
from bcctool import cgroups


class MadeCgroups:
    """Makes groups under the v2 mount (named for this test run) and removes them, children first,
    after moving anything still in them to the root."""

    def __init__(self, mount: str) -> None:
        self.mount = mount
        self.base = os.path.join(mount, f"pytest-cg-{os.getpid()}-{time.monotonic_ns()}")
        os.mkdir(self.base)
        self.made = [self.base]

    def make(self, name: str) -> str:
        path = os.path.join(self.base, name)
        os.mkdir(path)
        self.made.append(path)
        return path

    def id_of(self, path: str) -> int:
        return cgroups.cgroup_id(path)

    def own_id(self) -> int:
        """The id of the group this test process is in (where a forked child starts)."""
        return cgroups.cgroup_id(self.mount + (cgroups.own_cgroup() or "/"))

    def rel(self, path: str) -> str:
        """The path as records carry it: relative to the mount, '/' first."""
        return "/" + os.path.relpath(path, self.mount)

    def remove(self) -> None:
        for path in sorted(self.made, key=len, reverse=True):
            for _ in range(50):
                try:
                    with open(os.path.join(path, "cgroup.procs")) as f:
                        pids = f.read().split()
                    for pid in pids:
                        try:
                            with open(os.path.join(self.mount, "cgroup.procs"), "w") as f:
                                f.write(pid)
                        except OSError:
                            pass
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@pytest.fixture
def test_cgroups() -> Iterator[MadeCgroups]:
    mount = cgroups.v2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    groups = MadeCgroups(mount)
    try:
        yield groups
    finally:
        groups.remove()


@pytest.fixture
def block_directory(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh directory on a real block device (not tmpfs), for workloads whose writes must reach it."""
    path = tempfile.mkdtemp(dir=block_device_dir()[0], prefix=f"{request.module.__name__}-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def workload_in(cgroup: str | None, code: str, *args: str) -> subprocess.Popen:
    """run_workload's child, moved into `cgroup` (None: left where the test is) before it execs, so
    the interpreter's whole life is in the group."""

    def enter() -> None:
        if cgroup is not None:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=enter)


# Workloads that wait for a line, do a known amount of work, print one JSON report, wait for a last line.
GETPPID = """
import json, os, sys
n = int(sys.argv[1])
sys.stdin.readline()
for _ in range(n):
    os.getppid()
print(json.dumps({"calls": n}), flush=True)
sys.stdin.readline()
"""

FORK_N = 5_000
# a command for command mode: forks three children that each make FORK_N getppid calls and exit 3; then the same itself, and exits 3
FORK_THREE = f"""
import os, sys
for _ in range(3):
    if os.fork() == 0:
        for _ in range({FORK_N}):
            os.getppid()
        os._exit(3)
for _ in range(3):
    os.wait()
for _ in range({FORK_N}):
    os.getppid()
sys.exit(3)
"""


def check_fork_three_counted(rows: list[dict], outside_pid: int, group: str) -> None:
    """sysnest's detail rows of FORK_THREE run in `group`: every getppid of the command and its three
    children counted (within 0.1 %), in those 4 processes, in that group, and nothing of `outside_pid`."""
    from bcctool import cgroups  # noqa: PLC0415

    getppid = [r for r in rows if r["syscall"] == "getppid"]
    counted = sum(r["count"] for r in getppid)
    print("getppid counted", counted, "of", 4 * FORK_N, "in", len({r["pid"] for r in getppid}), "processes")
    assert abs(counted - 4 * FORK_N) <= 4 * FORK_N * 0.001, counted
    assert len({r["pid"] for r in getppid}) == 4          # the command and its three children
    assert outside_pid not in {r["pid"] for r in rows}
    rel = "/" + os.path.relpath(group, cgroups.v2_mount())
    assert {r["cgroup"] for r in rows} <= {rel, ""}, {r["cgroup"] for r in rows}

TOUCH_PAGES = """
import json, mmap, resource, sys
n = int(sys.argv[1])
sys.stdin.readline()
m = mmap.mmap(-1, n * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, n * 4096, 4096):
    m[off] = 1
print(json.dumps({"lifetime_minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}), flush=True)
sys.stdin.readline()
"""


def traced_in_cgroups(groups: MadeCgroups, metric: str, options: list[str], code: str, counts: dict[str, int],
                      filtered: bool = False, intervals: int = 2, extra: tuple[str, ...] = ()
                      ) -> tuple[Any, dict[str, str], dict, dict]:
    """`metric` started first, then workloads `code` (argv[1] = counts[name], then `extra`) in groups 'a' and 'b' and one
    'out'side; with `filtered`, the metric runs with --cgroup a, and 'a/late', made after it started,
    holds a fourth. Each workload is released, its JSON report read, then the metric stopped after
    `intervals` more: (the stopped MetricProcess, {name: group path}, {name: Popen}, {name: report})."""
    from helpers import MetricProcess, end_workload, report_of, settle_and_stop  # noqa: PLC0415

    paths = {"a": groups.make("a")}
    tool = MetricProcess(metric, *options, *(["--cgroup", paths["a"]] if filtered else []))
    kids: dict = {}
    try:
        meta = tool.wait_meta()
        # system-wide, a metric that can leaves out the profiler's own processes (bcctool/own.py)
        own = any(arg.name == "include_self" for arg in config.get(metric).args)
        assert meta["filters"] == ({"cgroup": paths["a"]} if filtered else {"own_processes": "left out"} if own else {})
        if filtered:
            paths["late"] = groups.make(os.path.join("a", "late"))
        paths["b"] = groups.make("b")
        kids = {name: workload_in(paths.get(name), code, str(counts[name]), *extra) for name in [*paths, "out"]}
        reports = {name: report_of(child) for name, child in kids.items()}
        settle_and_stop(tool, intervals=intervals)
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
    return tool, paths, kids, reports

# A thread that sleeps argv[1] x 50 ms, its blocked time from its own schedstat (wall - run - wait).
SLEEPS = """
import json, sys, threading, time
n = int(sys.argv[1])
sys.stdin.readline()
truth = {}
def books():
    run_ns, wait_ns, _ = map(int, open("/proc/thread-self/schedstat").read().split())
    return time.monotonic_ns(), run_ns, wait_ns
def sleeper():
    before = books()
    for _ in range(n):
        time.sleep(0.05)
    wall, run, wait = (a - b for a, b in zip(books(), before))
    # offcpu's blocked time runs to the switch back in, so it holds the run-queue waits after wakeups
    # (but not after preemption): it lies between the time asleep and the time off the CPU
    truth.update(tid=threading.get_native_id(), blocked_ms=(wall - run - wait) / 1e6, off_cpu_ms=(wall - run) / 1e6)
t = threading.Thread(target=sleeper)
t.start()
t.join()
print(json.dumps(truth), flush=True)
sys.stdin.readline()
"""

# A thread that burns argv[1] ms of wall time on a CPU, then parks; its schedstat run and wait ns, and
# the whole process's run ns (every thread's, interpreter start-up included) as proc_run_ns.
BURN = """
import json, os, sys, threading, time
ms = int(sys.argv[1])
sys.stdin.readline()
parked, leave, out = threading.Event(), threading.Event(), {}
def burn():
    out["tid"] = threading.get_native_id()
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        pass
    parked.set()
    leave.wait()
t = threading.Thread(target=burn)
t.start()
parked.wait()
time.sleep(0.05)
with open(f"/proc/self/task/{out['tid']}/schedstat") as f:
    out["run_ns"], out["wait_ns"] = (int(x) for x in f.read().split()[:2])
out["proc_run_ns"] = sum(int(open(f"/proc/self/task/{t}/schedstat").read().split()[0])
                         for t in os.listdir("/proc/self/task"))
print(json.dumps(out), flush=True)
sys.stdin.readline()
leave.set()
"""

# Writes argv[1] pages to a new file in argv[2] (buffered, then fsync); its /proc/self/io write_bytes delta.
WRITE_PAGES = """
import json, os, sys
pages, directory = int(sys.argv[1]), sys.argv[2]
sys.stdin.readline()
def written():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("write_bytes:")).split()[1])
before = written()
path = os.path.join(directory, f"w{os.getpid()}")
with open(path, "wb") as f:
    for _ in range(pages):
        f.write(b"x" * 4096)
    f.flush()
    os.fsync(f.fileno())
os.unlink(path)
print(json.dumps({"write_pages": (written() - before) // 4096}), flush=True)
sys.stdin.readline()
"""

# Writes argv[1] MiB with O_DIRECT to a new file in argv[2] (every byte reaches the device as issued).
DIRECT_WRITE = """
import json, mmap, os, sys
mib, directory = int(sys.argv[1]), sys.argv[2]
sys.stdin.readline()
buf = mmap.mmap(-1, 1 << 20)
path = os.path.join(directory, f"d{os.getpid()}")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
for _ in range(mib):
    os.write(fd, buf)
os.fsync(fd)
os.close(fd)
os.unlink(path)
print(json.dumps({"bytes": mib << 20}), flush=True)
sys.stdin.readline()
"""

# argv[1] TCP connects to 127.0.0.1:argv[2], each closed at once; how many were made.
CONNECTS = """
import json, socket, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
sys.stdin.readline()
for _ in range(n):
    with socket.create_connection(("127.0.0.1", port)):
        pass
print(json.dumps({"connects": n}), flush=True)
sys.stdin.readline()
"""

# Opens argv[1] pipes and holds them open until its last line (each pipe: a pipe_inode_info and its
# buffer array from kmalloc, about 1 KB).
PIPES = """
import json, os, sys
n = int(sys.argv[1])
sys.stdin.readline()
held = [os.pipe() for _ in range(n)]
print(json.dumps({"pipes": len(held)}), flush=True)
sys.stdin.readline()
"""
