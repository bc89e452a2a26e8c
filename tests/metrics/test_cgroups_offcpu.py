"""offcpu by cgroup: threads sleeping a known time in two test-made cgroups and one outside, each thread's
blocked time in its own group as its schedstat says; --cgroup and --group-by cgroup on one group."""

import pytest
from cgroup_fixtures import SLEEPS, traced_in_cgroups

pytestmark = pytest.mark.bpf

SLEEPS_OF = {"a": 20, "b": 12, "out": 8, "late": 10}


def as_thread_books(blocked_ms: float, truth: dict) -> bool:
    """offcpu's 3 % (test_offcpu) around the thread's own books: asleep <= blocked <= off the CPU."""
    return truth["blocked_ms"] * 0.97 - 2 <= blocked_ms <= truth["off_cpu_ms"] * 1.03 + 2


def test_each_blocked_time_in_its_own_cgroup(test_cgroups):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, "offcpu", ["0.5", "--top", "10000"], SLEEPS, SLEEPS_OF,
                                              intervals=1)
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b", "out"):
        rows = [r for r in tool.of_kind("row") if r["level"] == "thread" and r["tid"] == truth[name]["tid"]]
        blocked = sum(r["total_ms"] for r in rows)
        print(name, blocked, truth[name])
        assert as_thread_books(blocked, truth[name]), (name, blocked, truth[name])
        got = {r["cgroup_id"] for r in rows}
        if name in ids:
            assert got == {ids[name]}, (name, got)
            assert {r["cgroup"] for r in rows} == {test_cgroups.rel(paths[name])}
        else:
            assert not got & set(ids.values())
    stacks = [r for r in tool.of_kind("row") if r["level"] == "stack" and r["tid"] == truth["a"]["tid"]]
    assert stacks and {r["cgroup_id"] for r in stacks} == {ids["a"]}


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "offcpu",
                                                 ["0.5", "--group-by", "cgroup", "--top", "1000"],
                                                 SLEEPS, SLEEPS_OF, filtered=True, intervals=1)
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    groups = [r for r in tool.of_kind("row") if r["level"] == "cgroup"]
    assert {g["cgroup_id"] for g in groups} == set(ids.values())
    stacks = [r for r in tool.of_kind("row") if r["level"] == "stack"]
    assert {r["pid"] for r in stacks} <= {kids["a"].pid, kids["late"].pid}
    for name in ("a", "late"):
        # the group's time holds the sleeping thread's (and its main thread's wait for it)
        in_group = sum(g["total_ms"] for g in groups if g["cgroup_id"] == ids[name])
        sleeper = sum(r["total_ms"] for r in stacks if r["tid"] == truth[name]["tid"])
        assert as_thread_books(sleeper, truth[name]), (name, sleeper, truth[name])
        assert in_group >= sleeper
