"""Workload programs that more than one test runs (through helpers.run_workload), each measuring its own
ground truth, and the runs of a metric on them that more than one test makes."""

from __future__ import annotations

import json

from helpers import MetricProcess, end_workload, next_line, run_workload, settle_and_stop

GETPPID_N = 20_000
GETPPID_CHILD = f"""
import os, sys
sys.stdin.readline()
for _ in range({GETPPID_N}):
    os.getppid()
print("done", flush=True)
sys.stdin.readline()
"""   # exactly GETPPID_N getppid calls once released, then "done"


def pipes_child(pipes: int, touch_mb: int = 0, spread_s: float = 0.0) -> str:
    """A run_workload child that raises its open-files limit and grows its descriptor table up front (2
    descriptors a pipe: the table's own kmalloc must not fall among the pipes'); then, a line from the
    test each: touches `touch_mb` MiB of anonymous memory (a known RSS) and opens `pipes` pipes (at once,
    or 100 at a time spread over `spread_s` seconds: a steady allocation rate), printing "open"; closes
    them, printing "closed"; waits for a last line. Each pipe holds a pipe_inode_info and an array of 16
    pipe buffers (640 bytes, from kmalloc-1k) until it is closed."""
    batch = 100 if spread_s else pipes
    pause = spread_s * batch / pipes
    return f"""
import mmap, os, resource, sys, time
want = {pipes} * 2 + 200
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, want), hard), hard))   # hard: 20,000 here
os.dup2(0, want - 1)
os.close(want - 1)
sys.stdin.readline()
m = mmap.mmap(-1, max({touch_mb}, 1) << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, {touch_mb} << 20, 4096):
    m[off] = 1
fds = []
for first in range(0, {pipes}, {batch}):
    fds += [os.pipe() for _ in range(min({batch}, {pipes} - first))]
    time.sleep({pause})
print("open", flush=True)
sys.stdin.readline()
for r, w in fds:
    os.close(r)
    os.close(w)
print("closed", flush=True)
sys.stdin.readline()
"""


def anon_pages_child(pages: int) -> str:
    """A run_workload child that, once released, touches `pages` fresh anonymous pages (one byte each),
    then reports its rusage delta around the touching and its lifetime ru_minflt, and waits for a last
    line before it exits."""
    return f"""
import json, mmap, resource, sys
sys.stdin.readline()
r0 = resource.getrusage(resource.RUSAGE_SELF)
m = mmap.mmap(-1, {pages} * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, {pages} * 4096, 4096):
    m[off] = 1
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"minflt": r1.ru_minflt - r0.ru_minflt, "majflt": r1.ru_majflt - r0.ru_majflt,
                  "lifetime_minflt": r1.ru_minflt}}), flush=True)
sys.stdin.readline()
"""


SLEEPER_CHILD = """
import json, sys, threading, time
sys.stdin.readline()
truth = {}
def own_accounting():
    # the kernel's own books for this thread: time on CPU, time waiting for one, blocking switches
    run_ns, wait_ns, _ = map(int, open("/proc/thread-self/schedstat").read().split())
    status = open("/proc/thread-self/status").read()
    voluntary = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return time.monotonic_ns(), run_ns, wait_ns, voluntary
def sleeper():
    before = own_accounting()
    for _ in range(20):
        time.sleep(0.05)
    after = own_accounting()
    wall, run, wait, blocks = (a - b for a, b in zip(after, before))
    truth.update(blocked_ms=(wall - run - wait) / 1e6, blocks=blocks)
t = threading.Thread(target=sleeper)
t.start()
print(t.native_id, flush=True)
t.join()
print("done", json.dumps(truth), flush=True)
sys.stdin.readline()
"""


# A run_workload child whose work runs on one thread of its own (one_thread_child): past its first stdin
# line it runs the target, which fills `out`, prints `out` as JSON and waits for a last line. run_ns() is
# the calling thread's CPU time from its schedstat.
_THREAD_CHILD_HEAD = """
import json, os, sys, threading, time
sys.stdin.readline()
out = {}

def run_ns():
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        return int(f.read().split()[0])
"""
_THREAD_CHILD_TAIL = """
t = threading.Thread(target=%s)
t.start()
t.join()
print(json.dumps(out), flush=True)
sys.stdin.readline()
"""


def one_thread_child(body: str, target: str) -> str:
    """The child's code: `body` defines the function named `target`."""
    return _THREAD_CHILD_HEAD + body + _THREAD_CHILD_TAIL % target


def offcpu_on_sleeper(*options: str) -> tuple[MetricProcess, int, int, dict, dict]:
    """offcpu -p on SLEEPER_CHILD for one interval after its sleeps: (the stopped tool, the child's pid,
    the sleeping thread's tid, the thread's own books, offcpu's meta record)."""
    child = run_workload(SLEEPER_CHILD)
    tool = MetricProcess("offcpu", "-p", str(child.pid), *options)
    try:
        meta = tool.wait_meta()
        tid = int(next_line(child))
        done, _, truth = child.stdout.readline().partition(" ")
        assert done == "done"
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        end_workload(child)
    return tool, child.pid, tid, json.loads(truth), meta
