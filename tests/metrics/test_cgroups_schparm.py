"""schparm by cgroup: a thread that sleeps a known number of times and exits, in each of two test-made
cgroups and outside them: its exit record carries its own group and the voluntary switches its own
/proc status counted; --cgroup with --group-by cgroup on one group and a group made below it later."""

import pytest
from cgroup_fixtures import traced_in_cgroups

pytestmark = pytest.mark.bpf

# A thread that sleeps argv[1] x 20 ms, reads its own switch counts, and exits; its tid and counts once
# it is gone.
SLEEPING_THREAD = """
import json, os, sys, threading, time
n = int(sys.argv[1])
sys.stdin.readline()
out = {}
def sleeper():
    for _ in range(n):
        time.sleep(0.02)
    with open("/proc/thread-self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    out.update(tid=threading.get_native_id(), voluntary=int(status["voluntary_ctxt_switches"]))
t = threading.Thread(target=sleeper)
t.start()
t.join()
while os.path.exists(f"/proc/self/task/{out['tid']}"):   # join returns before the thread's exit
    time.sleep(0.005)
print(json.dumps(out), flush=True)
sys.stdin.readline()
"""
SLEEPS = {"a": 30, "b": 18, "out": 10, "late": 24}


def test_each_exit_in_its_own_cgroup(test_cgroups):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "schparm", ["0.3"], SLEEPING_THREAD, SLEEPS)
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    events = tool.of_kind("event")
    for name in ("a", "b", "out"):
        exits = [e for e in events if e["tid"] == truth[name]["tid"]]
        print(name, [(e["voluntary"], e["cgroup"]) for e in exits], truth[name])
        assert len(exits) == 1, (name, exits, tool.of_kind("lost"))
        e = exits[0]
        assert e["pid"] == kids[name].pid
        # the switches after its last look at /proc: at most a couple (test_schparm allows 2)
        assert truth[name]["voluntary"] <= e["voluntary"] <= truth[name]["voluntary"] + 2, (e, truth[name])
        assert e["voluntary"] >= SLEEPS[name]
        if name in ids:
            assert e["cgroup_id"] == ids[name] and e["cgroup"] == test_cgroups.rel(paths[name]), e
        else:
            assert e["cgroup_id"] not in ids.values()
    for name, cgid in ids.items():
        assert {e["pid"] for e in events if e["cgroup_id"] == cgid} == {kids[name].pid}, name


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "schparm", ["0.3", "--group-by", "cgroup"],
                                                 SLEEPING_THREAD, SLEEPS, filtered=True)
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    events = tool.of_kind("event")
    assert {e["pid"] for e in events} <= {kids["a"].pid, kids["late"].pid}, events
    rows = [r for r in tool.of_kind("row") if r["level"] == "cgroup"]
    assert {r["cgroup_id"] for r in rows} == set(ids.values()), rows
    for name, cgid in ids.items():
        mine = [e for e in events if e["cgroup_id"] == cgid]
        thread = [e for e in mine if e["tid"] == truth[name]["tid"]]
        assert len(thread) == 1 and truth[name]["voluntary"] <= thread[0]["voluntary"] <= truth[name]["voluntary"] + 2
        group = [r for r in rows if r["cgroup_id"] == cgid]
        print(name, [(r["exits"], r["voluntary"]) for r in group], truth[name])
        # the rows sum the group's exit records of each interval: the sleeping thread is one of them
        assert sum(r["exits"] for r in group) == len(mine)
        assert sum(r["voluntary"] for r in group) == sum(e["voluntary"] for e in mine)
        assert {r["processes"] for r in group} == {1}
