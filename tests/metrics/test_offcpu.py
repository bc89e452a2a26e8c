"""offcpu against a workload whose blocking is known: a thread that sleeps 50 ms twenty times, and keeps
the kernel's own books on itself (schedstat, voluntary context switches) while it does."""


import pytest
from helpers import MetricProcess, end_workload, headings, human_output, metric_on_report, next_line, run_workload
from workloads import SLEEPER_CHILD, offcpu_on_sleeper, one_thread_child

pytestmark = pytest.mark.bpf


def test_sleeping_thread_blocked_time_and_stack():
    tool, pid, tid, truth, meta = offcpu_on_sleeper("0.5", "--stacks", "50")
    assert meta["filters"] == {"filter_pid": pid}

    rows = [r for r in tool.of_kind("row") if r["tid"] == tid]
    threads = [r for r in rows if r["level"] == "thread"]
    blocked_ms, count = sum(r["total_ms"] for r in threads), sum(r["count"] for r in threads)
    print(f"tid {tid}: blocked {blocked_ms:.1f} ms in {count} blocks; the thread's own books: {truth}")
    assert {r["pid"] for r in rows} == {pid}
    # Ground truth is the thread's wall time less its schedstat run and run-queue time, not the nominal
    # 1000 ms: a sleep the thread spends preempted or on a stolen vCPU is not blocked time. Blocks after
    # its first and last look (thread start and exit, handing the GIL over) may add a few switches.
    assert truth["blocks"] >= 20 - 1 and truth["blocked_ms"] > 900
    assert truth["blocks"] <= count <= truth["blocks"] + 3
    assert blocked_ms == pytest.approx(truth["blocked_ms"], rel=0.03, abs=2.0)
    assert all(r["min_us"] <= r["avg_us"] <= r["max_us"] for r in threads)
    assert max(r["max_us"] for r in threads) >= 50_000

    # The heaviest kernel stack of the sleeper, over the whole run, is the sleep syscall's path. (By kernel
    # stack: the whole user stacks, unwound with CFI, differ between the first sleeps and the later ones,
    # once CPython 3.11 has specialized the call.)
    by_stack: dict[tuple, float] = {}
    for r in rows:
        if r["level"] == "stack":
            by_stack[tuple(r["kernel_frames"])] = by_stack.get(tuple(r["kernel_frames"]), 0.0) + r["total_ms"]
    top = max(by_stack, key=by_stack.get)
    top_row = next(r for r in rows if r["level"] == "stack" and tuple(r["kernel_frames"]) == top)
    print("top stack:", top_row["kernel_frames"], f"{by_stack[top]:.1f} ms")
    assert any("nanosleep" in f for f in top_row["kernel_frames"]), top_row["kernel_frames"]
    assert top_row["kernel_frames"][0] in ("__schedule", "schedule")
    assert by_stack[top] >= 0.95 * truth["blocked_ms"]
    assert top_row["folded"].startswith(top_row["comm"] + ";")

    # the default takes a thread's stacks whenever it has taken none for 10 ms, besides one block in 16
    # at random: a thread that blocks every 50 ms keeps every block's (no time left [not sampled])
    assert {r["kernel_frames"][0] for r in rows if r["level"] == "stack"} <= {"__schedule", "schedule"}
    summaries = tool.of_kind("summary")
    assert {s["stack_every"] for s in summaries} == {16}
    assert sum(s["total_events"] for s in summaries) >= count
    tops = [t for s in summaries for t in s["top_blocking_threads"] if t["tid"] == tid]
    assert tops and all(0 < t["percentage"] <= 100 for t in tops)


def test_min_block_filters_short_blocks():
    child = run_workload(SLEEPER_CHILD)
    tool = MetricProcess("offcpu", "-p", str(child.pid), "--min-block-us", "60000", "0.5")
    try:
        tool.wait_meta()
        tid = int(next_line(child))
        assert child.stdout.readline().startswith("done ")
        tool.read_until(lambda r: r["kind"] == "summary")
        status, _ = tool.stop()
        assert status == 0
    finally:
        tool.kill()
        end_workload(child)
    # Every 50 ms sleep is shorter than 60 ms: none of the sleeper's blocks may be reported.
    assert not [r for r in tool.of_kind("row") if r["tid"] == tid]


def test_folded_output_is_flamegraph_input():
    out = human_output("offcpu", "--folded", "0.5", "1")
    lines = out.strip().splitlines()
    assert lines, "no stacks in half a second of a running machine?"
    for line in lines:
        stack, _, value = line.rpartition(" ")
        assert value.isdigit() and ";" in stack, line


def test_human_output_has_columns():
    out = human_output("offcpu", "0.3", "1")
    assert headings(out, "PID") == ["PID", "TID", "Command", "Blocked (TIME)", "Count", "Min (TIME)", "Avg (TIME)",
                                    "Max (TIME)", "Share (%)"]
    assert "__schedule" in out


def test_stack_depth_over_limit_is_one_line_error():
    tool = MetricProcess("offcpu", "--stack-depth", "500", json_output=False)
    out, err = tool.proc.communicate(timeout=60)
    assert tool.proc.returncode == 2
    assert len(err.strip().splitlines()) == 1


# One thread blocked once for 3 s, its own books over the block (wall time less schedstat run and wait).
LONG_SLEEP_CHILD = one_thread_child("""
def books():
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        run, wait = (int(x) for x in f.read().split()[:2])
    return time.monotonic_ns() - run - wait

def sleeper():
    out["tid"] = threading.get_native_id()
    before = books()
    time.sleep(3.0)
    out["blocked_ms"] = (books() - before) / 1e6
""", "sleeper")


def test_long_block_is_split_across_the_intervals_it_spans():
    tool, truth = metric_on_report(LONG_SLEEP_CHILD, "offcpu", "1")

    interval_s = {s["interval"]: s["interval_s"] for s in tool.of_kind("summary")}
    mine = sorted((r for r in tool.of_kind("row") if r["level"] == "thread" and r["tid"] == truth["tid"]),
                  key=lambda r: r["interval"])
    print(f"blocked {truth['blocked_ms']:.1f} ms by its books; per interval",
          [(r["total_ms"], interval_s[r["interval"]], r["count"]) for r in mine])
    # a 3 s block over 1 s intervals: each interval charged its part (1/1/1 when they line up; a
    # loaded machine may stretch one), never more than the interval's wall time
    assert len(mine) >= 2
    assert all(r["total_ms"] <= interval_s[r["interval"]] * 1e3 * 1.01 + 1 for r in mine)
    assert all(r["total_ms"] == pytest.approx(interval_s[r["interval"]] * 1e3, rel=0.02) for r in mine[1:-1])
    assert sum(r["total_ms"] for r in mine) == pytest.approx(truth["blocked_ms"], rel=0.03)
    # counted once, in the interval it ends in, with its whole length (under load the thread may also
    # wait a moment for the GIL as it starts: a short block of its own, counted where it ends)
    assert mine[-1]["max_us"] >= 2.9e6
    assert all(r["max_us"] < 2.9e6 for r in mine[:-1])


def test_state_filter_keeps_sleeps_or_d_state_waits():
    # nanosleep is an interruptible sleep (S): all of it under --state interruptible, none under
    # uninterruptible (D)
    tool, _, tid, truth, _ = offcpu_on_sleeper("0.5", "--state", "interruptible")
    blocked = sum(r["total_ms"] for r in tool.of_kind("row") if r["level"] == "thread" and r["tid"] == tid)
    print(f"interruptible: {blocked:.1f} ms, its books {truth['blocked_ms']:.1f}")
    assert blocked == pytest.approx(truth["blocked_ms"], rel=0.03, abs=2.0)
    tool, _, tid, truth, _ = offcpu_on_sleeper("0.5", "--state", "uninterruptible")
    assert not [r for r in tool.of_kind("row") if r["tid"] == tid]


# Two blocking calls in turn, each timed by the thread's own clock: nanosleep 0.5 ms and select 1.5 ms,
# 2,000 of each, so about 26 % and 74 % of its blocked time and half its blocks each.
TWO_WAITS_CHILD = one_thread_child("""
import select

def books():   # off the CPU: not running; not running nor waiting for a CPU; blocking switches
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        run, wait = (int(x) for x in f.read().split()[:2])
    now = time.monotonic_ns()
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as f:
        voluntary = int(f.read().split("voluntary_ctxt_switches:")[1].split()[0])
    return now - run, now - run - wait, voluntary

def two_waits():
    out["tid"] = threading.get_native_id()
    sleep_ns = select_ns = 0
    before = books()
    for _ in range(2000):
        t0 = time.monotonic_ns()
        time.sleep(0.0005)
        t1 = time.monotonic_ns()
        select.select([], [], [], 0.0015)
        sleep_ns += t1 - t0
        select_ns += time.monotonic_ns() - t1
    after = books()
    out["off_ms"], out["asleep_ms"] = ((a - b) / 1e6 for a, b in zip(after[:2], before[:2]))
    out["blocks"] = after[2] - before[2]
    out["sleep_share"] = sleep_ns / (sleep_ns + select_ns)
""", "two_waits")


def test_stacks_of_one_block_in_n_share_exact_totals():
    """--stack-every 4: every block is timed and counted (the thread's rows against its own books), and
    the thread's time is shared among the stacks of the quarter of blocks sampled in proportion to
    theirs: the sleep's share of it against the workload's own clock, each call's count against 2,000."""
    tool, truth = metric_on_report(TWO_WAITS_CHILD, "offcpu", "1", "--stack-every", "4")
    tid = truth["tid"]
    rows = [r for r in tool.of_kind("row") if r["tid"] == tid]
    threads = [r for r in rows if r["level"] == "thread"]
    stacks = [r for r in rows if r["level"] == "stack"]
    blocked_ms, count = sum(r["total_ms"] for r in threads), sum(r["count"] for r in threads)

    def waits_in(word: str) -> tuple[float, int]:
        mine = [r for r in stacks if any(word in f for f in r["kernel_frames"])]
        return sum(r["total_ms"] for r in mine), sum(r["count"] for r in mine)

    (sleep_ms, sleeps), (select_ms, selects) = waits_in("nanosleep"), waits_in("do_select")
    print(f"blocked {blocked_ms:.1f} ms in {count} blocks (books: {truth['blocks']} blocking switches, asleep "
          f"{truth['asleep_ms']:.1f} ms, off the CPU {truth['off_ms']:.1f} ms); sleep "
          f"{sleep_ms:.1f} ms / {sleeps}, select {select_ms:.1f} ms / {selects}; sleep share by its clock "
          f"{truth['sleep_share']:.3f}")
    assert all(s["stack_every"] == 4 for s in tool.of_kind("summary"))
    # exact, as without sampling, against the thread's own count of blocking switches (the GIL handed over
    # at the thread's start and end adds a few blocks). Not the 4,000 calls: a sleep can return without
    # blocking, its timer fired before it switched out (the vCPU stolen between arming the timer and
    # schedule()): once in 184,000 calls here (92,000 of each) under a CPU load (2026-11-28), with neither a
    # voluntary nor an involuntary switch in the call; CI run 58 counted 3,999. A
    # block lasts from its switch out to its switch in, so it holds the wait for a CPU after its wakeup:
    # between the time asleep and the time off the CPU (preemptions' waits too), 4,000 such waits on a
    # loaded machine being far from nothing. Up to 2 % over the time off the CPU: blocks this short come
    # out 7-14 us longer each than schedstat's books say, with or without --stack-every (2026-11-28,
    # 4,000 blocks: +27 to +56 ms over 4,306-4,332 ms; 250 blocks of 8-24 ms: -4 ms), not yet explained
    assert truth["blocks"] >= 4000 - 5
    assert truth["blocks"] <= count <= truth["blocks"] + 5
    assert truth["asleep_ms"] * 0.99 - 2 <= blocked_ms <= truth["off_ms"] * 1.02 + 2
    # the stack rows add up to the thread's, up to each row's rounding to 1 us
    assert sum(r["total_ms"] for r in stacks) == pytest.approx(blocked_ms, abs=0.01 * len(stacks) + 0.01)
    assert sum(r["count"] for r in stacks) == pytest.approx(count, abs=len(stacks))
    # Sampled: about 500 blocks of each call. The sleep's share of the time has a standard deviation of
    # ~1.1 points from the binomial draw (5 points: over 4 of them); its count, ~60 blocks (300: 5 of them).
    assert sleep_ms / (sleep_ms + select_ms) == pytest.approx(truth["sleep_share"], abs=0.05)
    assert sleep_ms + select_ms >= 0.97 * blocked_ms
    assert sleeps == pytest.approx(2000, abs=300) and selects == pytest.approx(2000, abs=300)
