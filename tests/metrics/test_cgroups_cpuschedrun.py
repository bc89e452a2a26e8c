"""cpuschedrun by cgroup: threads burning CPU in two test-made cgroups and one outside, each thread's run
time (schedstat) in its own group; --cgroup and --group-by cgroup on one group and a group made later."""

import json
import time

import pytest
from cgroup_fixtures import BURN, traced_in_cgroups, workload_in
from helpers import MetricProcess, end_workload, settle_and_stop

pytestmark = pytest.mark.bpf

BURN_MS = {"a": 1000, "b": 700, "out": 400, "late": 500}


def test_each_run_time_in_its_own_cgroup(test_cgroups):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, "cpuschedrun", ["-P", "0.5", "--top", "100000"],
                                              BURN, BURN_MS)
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b", "out"):
        rows = [r for r in tool.of_kind("row") if r["tid"] == truth[name]["tid"]]
        run_ms = sum(r["run_ms"] for r in rows)
        print(name, run_ms, truth[name])
        assert run_ms == pytest.approx(truth[name]["run_ns"] / 1e6, rel=0.10), (name, run_ms, truth[name])
        got = {r["cgroup_id"] for r in rows if r["run_ms"] > 0}
        if name in ids:
            assert got == {ids[name]}, (name, rows)
        else:
            assert not got & set(ids.values())


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, "cpuschedrun",
                                              ["-P", "0.5", "--group-by", "cgroup", "--top", "1000"],
                                              BURN, BURN_MS, filtered=True)
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    rows = tool.of_kind("row")
    assert {r["cgroup_id"] for r in rows if r["run_ms"] > 0} == set(ids.values()), rows
    for name in ("a", "late"):
        in_group = sum(r["run_ms"] for r in rows if r["cgroup_id"] == ids[name])
        burner = truth[name]["run_ns"] / 1e6
        # the group holds the burning thread's run time and the interpreter's own, and nothing else's
        assert burner * 0.9 <= in_group <= burner + 1000, (name, in_group, truth[name])
    total = sum(r["run_ms"] for r in rows)
    assert total < sum(truth[n]["run_ns"] / 1e6 for n in ("a", "late")) + 2000, total


# A thread spinning in the group, moved out while it spins (the test writes its pid to the other group),
# then asleep outside for 2.5 s: it keeps no open run inside the filter, so the intervals it sleeps
# through charge it nothing.
MOVED_OUT_WHILE_RUNNING = """
import json, sys, threading, time
sys.stdin.readline()
out, moved = {}, threading.Event()
def spin():
    out["tid"] = threading.get_native_id()
    while not moved.is_set():
        pass
    end = time.monotonic() + 0.3     # still running a while outside the group, then asleep there
    while time.monotonic() < end:
        pass
    out["asleep_at"] = time.monotonic()
    time.sleep(2.5)
t = threading.Thread(target=spin)
t.start()
print(json.dumps({"started": True}), flush=True)
sys.stdin.readline()
moved.set()
t.join()
print(json.dumps(out), flush=True)
sys.stdin.readline()
"""


def test_a_thread_moved_out_of_the_group_while_running_is_charged_nothing_after(test_cgroups):
    inside, outside = test_cgroups.make("a"), test_cgroups.make("b")
    tool = MetricProcess("cpuschedrun", "-P", "0.5", "--top", "1000", "--cgroup", inside)
    child = None
    try:
        tool.wait_meta()
        child = workload_in(inside, MOVED_OUT_WHILE_RUNNING)
        child.stdin.write("\n")
        child.stdin.flush()
        assert json.loads(child.stdout.readline())["started"]
        time.sleep(1.0)  # spinning in the group
        with open(f"{outside}/cgroup.procs", "w") as f:
            f.write(str(child.pid))
        child.stdin.write("\n")
        child.stdin.flush()
        out = json.loads(child.stdout.readline())
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        if child is not None:
            end_workload(child)
    rows = [r for r in tool.of_kind("row") if r["tid"] == out["tid"]]
    assert any(r["run_ms"] > 200 for r in rows), rows   # it was seen running in the group first
    # the intervals printed a whole interval after it fell asleep (for 2.5 s) charge it (almost) nothing
    asleep = out["asleep_at"] + time.time() - time.monotonic()
    later = [r for r in rows if asleep + 0.6 < r["ts"] < asleep + 2.5]
    print("rows", [(r["interval"], r["run_ms"], round(r["ts"] - asleep, 2)) for r in rows])
    assert sum(r["run_ms"] for r in later) < 50, rows
