"""sysnest --sample N against exact timing of the same calls: workloads whose syscalls come in a fixed
rhythm (preadv/pwritev pairs, a preadv/pwritev/readv cycle) and 300,000 calls. A sampler that times
every Nth call of a thread locks onto such a rhythm (with N = 2 a pair only ever has its preadv timed,
with N = 3 a cycle only one of its three); sysnest draws each gap at random, so every syscall's
estimated total must be within 10 % of the exact one.

Both sysnest instances, exact and sampled, trace the same run, so the workload's own variation (on a
shared, loaded VM it is +-12 % from run to run) does not enter the comparison. What does:
- each instance's timed span also holds the other's probe work (attached first, the exact one's exit
  program runs inside the sampled one's span): 16 KiB copies (~2 us) keep that near 2-4 %;
- the sampling error itself, CV * sqrt((N-1)/n) (docs/metrics/sysnest.md): ~1 % here, if nothing
  stretches a call by milliseconds. The workload runs at real-time priority, with its buffer
  preallocated, so that no other task preempts it and no page fault lands inside a call.
Measured on this machine (loaded, 2 vCPUs): 2.1-4.5 % over nine runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import MetricProcess, timed_bound

pytestmark = pytest.mark.bpf

RHYTHM = """
import os, signal, sys
rounds, kinds = int(sys.argv[1]), int(sys.argv[2])
path = "/dev/shm/sysnest-rhythm-%d" % os.getpid()
f = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
os.unlink(path)
buf = [bytearray(b"s" * 16384)]
os.pwritev(f, buf, 0)
zero = os.open("/dev/zero", os.O_RDONLY)
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
os.kill(os.getpid(), signal.SIGSTOP)     # sysnest attaches while the workload is stopped
for _ in range(rounds):
    os.preadv(f, buf, 0)
    os.pwritev(f, buf, 0)
    if kinds == 3:
        os.readv(zero, buf)
"""


def per_syscall(tool: MetricProcess) -> dict[str, tuple[int, float, int]]:
    """{syscall: (count, total_us, timed)} over the whole run."""
    totals: dict[str, tuple[int, float, int]] = {}
    for r in tool.records:
        if r["kind"] == "row" and r["level"] == "detail":
            count, total, timed = totals.get(r["syscall"], (0, 0.0, 0))
            totals[r["syscall"]] = (count + r["count"], total + r["total_us"], timed + r["timed"])
    return totals


def traced_twice(argv: list[str], sample: int) -> tuple[dict, dict]:
    """Exact and sampled per-syscall totals of one run of a workload that stops itself before its work."""
    child = subprocess.Popen(argv)
    tools = []
    try:
        while not open(f"/proc/{child.pid}/stat").read().rpartition(") ")[2].startswith("T"):
            time.sleep(0.01)
        for extra in ((), ("--sample", str(sample))):
            tools.append(MetricProcess("sysnest", "-p", str(child.pid), "1", "--top", "50", "--details-top", "50",
                                       *extra))
            tools[-1].wait_meta()
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=120) == 0
        for tool in tools:      # each ends by itself after the process exits (its `end` record)
            tool.read_until(lambda r: r["kind"] == "end", timeout=60)
            assert tool.proc.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
        for tool in tools:
            tool.kill()
    return per_syscall(tools[0]), per_syscall(tools[1])


@pytest.mark.parametrize(("kinds", "sample"), [(2, 2), (3, 3)], ids=["pairs, --sample 2", "cycle of 3, --sample 3"])
def test_sampled_totals_match_exact_in_a_fixed_rhythm(kinds: int, sample: int) -> None:
    rounds = 300_000 // kinds
    exact, sampled = traced_twice([sys.executable, "-c", RHYTHM, str(rounds), str(kinds)], sample)
    names = [name for name, (count, _, _) in exact.items() if count == rounds]
    assert len(names) == kinds, exact
    for name in names:
        count, exact_us, _ = exact[name]
        s_count, sampled_us, timed = sampled[name]
        print(f"{name}: exact {exact_us / 1e3:.1f} ms, sampled {sampled_us / 1e3:.1f} ms "
              f"({sampled_us / exact_us - 1:+.1%}), {timed} of {count} timed")
        assert s_count == count
        assert abs(timed - count / sample) <= timed_bound(count, sample, calls=rounds * kinds), (name, timed)
        assert abs(sampled_us - exact_us) <= 0.10 * exact_us, (name, exact_us, sampled_us)


def test_dd_bs1_has_both_its_reads_and_writes_timed() -> None:
    """The real program: dd bs=1 alternates read and write; with a fixed one-in-8, its reads took
    0.000 us. Each now gets its share of timed calls and an estimated total, near the exact one (the
    calls are so short, ~0.4 us, that the other instance's probe work is a sizeable part of each)."""
    stop_then_dd = ("import os, signal; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10)); "
                    "os.kill(os.getpid(), signal.SIGSTOP); "
                    "os.execvp('dd', ['dd', 'if=/dev/zero', 'of=/dev/null', 'bs=1', 'count=150000', 'status=none'])")
    exact, sampled = traced_twice([sys.executable, "-c", stop_then_dd], 8)
    for name in ("read", "write"):
        count, timed = sampled[name][0], sampled[name][2]
        print(f"dd {name}: exact {exact[name][1] / 1e3:.1f} ms, sampled {sampled[name][1] / 1e3:.1f} ms, "
              f"{timed} of {count} timed")
        # the gaps run over both: 386 off in CI run 59, over 5 times the sd of the write count alone (74)
        calls = sampled["read"][0] + sampled["write"][0]
        assert count >= 150_000 and abs(timed - count / 8) <= timed_bound(count, 8, calls), (name, timed)
        assert 0.5 * exact[name][1] < sampled[name][1] < 2 * exact[name][1]
