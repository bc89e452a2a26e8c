"""offcpu by cgroup: threads sleeping a known time in two test-made cgroups and one outside, each thread's
blocked time in its own group as its schedstat says; --cgroup and --group-by cgroup on one group."""

import os

import pytest
from cgroup_fixtures import SLEEPS, three_workloads, workload_in
from helpers import MetricProcess, end_workload, report_of, settle_and_stop

pytestmark = pytest.mark.bpf

SLEEPS_OF = {"a": 20, "b": 12, "out": 8, "late": 10}


def thread_rows(records: list[dict], tid: int) -> list[dict]:
    return [r for r in records if r["kind"] == "row" and r["level"] == "thread" and r["tid"] == tid]


def test_each_blocked_time_in_its_own_cgroup(test_cgroups):
    tool = MetricProcess("offcpu", "0.5", "--top", "10000")
    kids = {}
    try:
        tool.wait_meta()
        paths, kids = three_workloads(test_cgroups, SLEEPS, SLEEPS_OF)
        truth = {name: report_of(child) for name, child in kids.items()}
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b", "out"):
        rows = thread_rows(tool.records, truth[name]["tid"])
        blocked = sum(r["total_ms"] for r in rows)
        print(name, blocked, truth[name])
        assert blocked == pytest.approx(truth[name]["blocked_ms"], rel=0.03, abs=2.0), (name, blocked, truth[name])
        want = {ids[name]} if name in ids else None
        got = {r["cgroup_id"] for r in rows}
        if want:
            assert got == want, (name, got)
            assert {r["cgroup"] for r in rows} == {test_cgroups.rel(paths[name])}
        else:
            assert not got & set(ids.values())
    stacks = [r for r in tool.of_kind("row") if r["level"] == "stack" and r["tid"] == truth["a"]["tid"]]
    assert stacks and {r["cgroup_id"] for r in stacks} == {ids["a"]}


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups):
    a = test_cgroups.make("a")
    tool = MetricProcess("offcpu", "0.5", "--cgroup", a, "--group-by", "cgroup", "--top", "1000")
    kids = {}
    try:
        meta = tool.wait_meta()
        assert meta["filters"] == {"cgroup": a}
        late = test_cgroups.make(os.path.join("a", "late"))
        b = test_cgroups.make("b")
        kids = {"a": workload_in(a, SLEEPS, str(SLEEPS_OF["a"])), "late": workload_in(late, SLEEPS, str(SLEEPS_OF["late"])),
                "b": workload_in(b, SLEEPS, str(SLEEPS_OF["b"])), "out": workload_in(None, SLEEPS, str(SLEEPS_OF["out"]))}
        truth = {name: report_of(child) for name, child in kids.items()}
        settle_and_stop(tool, intervals=1)
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
    ids = {"a": test_cgroups.id_of(a), "late": test_cgroups.id_of(late)}
    groups = [r for r in tool.of_kind("row") if r["level"] == "cgroup"]
    assert {g["cgroup_id"] for g in groups} == set(ids.values())
    stacks = [r for r in tool.of_kind("row") if r["level"] == "stack"]
    assert {r["pid"] for r in stacks} <= {kids["a"].pid, kids["late"].pid}
    for name in ("a", "late"):
        # the group's time holds the sleeping thread's (and its main thread's wait for it)
        in_group = sum(g["total_ms"] for g in groups if g["cgroup_id"] == ids[name])
        sleeper = sum(r["total_ms"] for r in stacks if r["tid"] == truth[name]["tid"])
        assert sleeper == pytest.approx(truth[name]["blocked_ms"], rel=0.03, abs=2.0), (name, sleeper, truth[name])
        assert in_group >= sleeper
