"""schparm against what the exiting children report about themselves: the nice value and policy they
set, and the voluntary switches /proc/self/status showed just before they exited."""

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import MetricProcess, next_line

# Switches itself to SCHED_BATCH, sleeps 20 times (20 voluntary switches at least), spins a little,
# then prints its own count of voluntary switches and its on-CPU time, and exits.
BATCH_CHILD = """
import json, os, sys, time
if sys.argv[1] == "wait":
    sys.stdin.readline()
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
for _ in range(20):
    time.sleep(0.02)
end = time.monotonic() + 0.05
while time.monotonic() < end:
    pass
with open("/proc/self/status") as f:
    status = dict(line.split(":", 1) for line in f)
vol, invol = int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"])
with open("/proc/self/schedstat") as f:
    run_ns = int(f.read().split()[0])
print(json.dumps({"voluntary": vol, "involuntary": invol, "run_ns": run_ns}), flush=True)
"""
FIFO_CHILD = "import time; time.sleep(0.05)"

pytestmark = pytest.mark.bpf


def spawn(code: str, *argv: str, setup=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, preexec_fn=setup)


def exit_of(tool: MetricProcess, pid: int) -> dict:
    return tool.read_until(lambda r: r["kind"] == "event" and r["tid"] == pid, timeout=30)


def check_batch_child(event: dict, child: subprocess.Popen, report: dict) -> None:
    print(f"pid {child.pid}: {event}, child says {report}")
    assert event["pid"] == child.pid and event["ppid"] == os.getpid()
    assert event["policy"] == "BATCH" and event["nice"] == 7 and event["prio"] == 127
    assert abs(event["voluntary"] - report["voluntary"]) <= 2
    # preemptions go on while the interpreter shuts down, after its last look at /proc
    assert report["involuntary"] - 2 <= event["involuntary"] <= report["involuntary"] + 20
    # on-CPU time, not wall time: 400 ms of sleeping must not be in it
    assert report["run_ns"] / 1e6 <= event["runtime_ms"] * 1.02 + 0.5
    assert event["runtime_ms"] <= report["run_ns"] / 1e6 + 100


def test_parameters_and_switches_at_exit():
    # Alive before tracing starts: its parameters and counts so far come from /proc.
    early = spawn(BATCH_CHILD, "wait", setup=lambda: os.nice(7))
    tool = MetricProcess("schparm")
    try:
        tool.wait_meta()
        # Born while tracing: nice is inherited over fork then set by setpriority in the child.
        late = spawn(BATCH_CHILD, "go", setup=lambda: os.nice(7))
        fifo = spawn(FIFO_CHILD, setup=lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10)))
        early.stdin.write("\n")
        early.stdin.flush()
        reports = {p.pid: json.loads(p.stdout.readline()) for p in (early, late)}
        for p in (early, late, fifo):
            p.wait(timeout=30)
        events = {p.pid: exit_of(tool, p.pid) for p in (early, late, fifo)}
        status, _ = tool.stop()
        assert status == 0, tool.stderr
    finally:
        tool.kill()
        for p in (early,):
            if p.poll() is None:
                p.kill()
                p.wait()

    check_batch_child(events[late.pid], late, reports[late.pid])
    check_batch_child(events[early.pid], early, reports[early.pid])
    f = events[fifo.pid]
    print(f"fifo child: {f}")
    assert f["policy"] == "FIFO" and f["rt_priority"] == 10 and f["prio"] == 89
    assert all(e["known"] for e in events.values())


def test_pid_filter_reports_that_process_only():
    # The traced process makes a thread (reported: same pid) and a child process (not reported).
    code = """
import subprocess, sys, threading, time
sys.stdin.readline()
t = threading.Thread(target=time.sleep, args=(0.05,))
t.start(); t.join()
subprocess.run([sys.executable, "-c", "pass"])
print(t.native_id, flush=True)
sys.stdin.readline()
"""
    parent = spawn(code)
    tool = MetricProcess("schparm", "-p", str(parent.pid), "0.3")
    try:
        assert tool.wait_meta()["filters"] == {"filter_pid": parent.pid}
        thread_tid = int(next_line(parent))
        parent.stdin.write("\n")
        parent.stdin.close()
        parent.wait(timeout=30)
        exit_of(tool, parent.pid)
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
    events = tool.of_kind("event")
    assert {e["pid"] for e in events} == {parent.pid}
    assert {e["tid"] for e in events} >= {parent.pid, thread_tid}
    thread = next(e for e in events if e["tid"] == thread_tid)
    assert thread["ppid"] == os.getpid() and thread["policy"] == "NORMAL" and thread["voluntary"] >= 1


def test_human_output_has_columns():
    tool = MetricProcess("schparm", json_output=False)
    try:
        lines = iter(tool.proc.stdout.readline, "")      # ends if the script does
        assert any(line.startswith("Command") for line in lines), tool.proc.stderr.read()   # tracing now
        nice = subprocess.Popen(["nice", "-n", "3", "true"])
        nice.wait()
        line = next((line for line in lines if line.split()[1:2] == [str(nice.pid)]), "")
        tool.proc.send_signal(signal.SIGINT)
        tool.proc.wait(timeout=10)
    finally:
        tool.kill()
    cells = line.split()
    assert tool.proc.returncode == 0
    assert cells[0] == "true" and cells[5:8] == ["123", "3", "NORMAL"], line    # PRIO NICE POLICY
