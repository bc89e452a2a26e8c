"""The overhead panel's user-space side against the process's own account: a child that spins reports
its CPU time (time.process_time) and the sampler's CPU share over the same span agrees; a child that
touches 64 MiB more grows its PSS by that much; each metric gets a subtotal row after its programs and
the app its own row."""

import subprocess
import sys
import time

import pytest

from host.bpf_sampler import OverheadSampler
from host.proc_cost import ProcessCost, cpu_seconds, pss_bytes

CHILD = """
import sys, time
print("ready", flush=True)
block = None
for line in sys.stdin:
    if line.startswith("cpu"):
        print(time.process_time(), flush=True)
    elif line.startswith("spin"):
        end = time.process_time() + float(line.split()[1])
        while time.process_time() < end:
            pass
        print("spun", flush=True)
    elif line.startswith("child"):              # a child that spins, waited for: its time is in cutime
        import subprocess
        subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + float(%s)\\n"
                        "while time.process_time() < end: pass" % line.split()[1]], check=True)
        print("waited", flush=True)
    elif line.startswith("grow"):
        block = bytearray(64 << 20)          # zero pages: touch each so it is resident
        for i in range(0, len(block), 4096):
            block[i] = 1
        print("grown", flush=True)
"""


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.stdin.close()
    proc.wait(10)


def ask(proc, line: str) -> str:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_cpu_share_matches_the_time_the_child_spent(child):
    cost = ProcessCost()
    before = float(ask(child, "cpu"))
    t0 = time.monotonic()
    assert cost.sample(child.pid, t0)["proc_cpu_pct"] is None       # nothing to compare with yet
    assert ask(child, "spin 0.6") == "spun"
    t1 = time.monotonic()
    pct = cost.sample(child.pid, t1)["proc_cpu_pct"]
    spent = float(ask(child, "cpu")) - before
    measured = pct / 100 * (t1 - t0)
    # /proc counts in clock ticks (10 ms): one tick either way at each end, plus the readline round trips
    assert measured == pytest.approx(spent, abs=0.05), (measured, spent)
    assert spent >= 0.6


def test_cpu_seconds_with_children_adds_the_waited_for_childrens(child):
    own, with_children = cpu_seconds(child.pid), cpu_seconds(child.pid, with_children=True)
    assert ask(child, "child 0.4") == "waited"
    own_added = cpu_seconds(child.pid) - own
    children_added = cpu_seconds(child.pid, with_children=True) - with_children - own_added
    # its child's 0.4 s of spinning plus its interpreter's start, to a tick at each end
    assert 0.38 <= children_added <= 0.4 + 0.5, children_added
    assert own_added < 0.2


def test_pss_grows_by_what_the_child_touched(child):
    before = pss_bytes(child.pid)
    assert ask(child, "grow") == "grown"
    grown = pss_bytes(child.pid) - before
    assert 62 << 20 <= grown <= 70 << 20, grown / 2**20


def test_each_metric_gets_a_subtotal_after_its_programs_and_the_app_its_own_row(child):
    sampler = OverheadSampler(elevate=[])
    sampler.set_targets({"spinner": (child.pid, set()), "idle": (None, set())})
    sampler.sample()
    assert ask(child, "spin 0.3") == "spun"
    rows, summary = sampler.sample()
    assert [(r["metric"], r["type"]) for r in rows] == [("idle", "subtotal"), ("spinner", "subtotal"), ("(this app)", "app")]
    idle, spinner, app = rows
    assert idle["proc_cpu_pct"] is None and idle["pss_bytes"] is None
    assert spinner["proc_cpu_pct"] > 10 and spinner["total_cpu_pct"] == spinner["proc_cpu_pct"]
    assert spinner["pss_bytes"] == pytest.approx(pss_bytes(child.pid), rel=0.05)
    assert app["pss_bytes"] > 1 << 20
    assert summary.startswith("processes ") and "PSS" in summary
