"""cpuschedrun by cgroup: threads burning CPU in two test-made cgroups and one outside, each thread's run
time (schedstat) in its own group; --cgroup and --group-by cgroup on one group and a group made later."""

import os

import pytest
from cgroup_fixtures import BURN, three_workloads, workload_in
from helpers import MetricProcess, end_workload, report_of, settle_and_stop

pytestmark = pytest.mark.bpf

BURN_MS = {"a": 1000, "b": 700, "out": 400, "late": 500}


def test_each_run_time_in_its_own_cgroup(test_cgroups):
    tool = MetricProcess("cpuschedrun", "-P", "0.5", "--top", "100000")
    kids = {}
    try:
        tool.wait_meta()
        paths, kids = three_workloads(test_cgroups, BURN, BURN_MS)
        truth = {name: report_of(child) for name, child in kids.items()}
        settle_and_stop(tool)
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
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
    a = test_cgroups.make("a")
    tool = MetricProcess("cpuschedrun", "-P", "0.5", "--cgroup", a, "--group-by", "cgroup", "--top", "1000")
    kids = {}
    try:
        meta = tool.wait_meta()
        assert meta["filters"] == {"cgroup": a}
        late = test_cgroups.make(os.path.join("a", "late"))
        b = test_cgroups.make("b")
        kids = {"a": workload_in(a, BURN, str(BURN_MS["a"])), "late": workload_in(late, BURN, str(BURN_MS["late"])),
                "b": workload_in(b, BURN, str(BURN_MS["b"])), "out": workload_in(None, BURN, str(BURN_MS["out"]))}
        truth = {name: report_of(child) for name, child in kids.items()}
        settle_and_stop(tool)
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
    ids = {"a": test_cgroups.id_of(a), "late": test_cgroups.id_of(late)}
    rows = tool.of_kind("row")
    assert {r["cgroup_id"] for r in rows if r["run_ms"] > 0} == set(ids.values()), rows
    for name in ("a", "late"):
        in_group = sum(r["run_ms"] for r in rows if r["cgroup_id"] == ids[name])
        burner = truth[name]["run_ns"] / 1e6
        # the group holds the burning thread's run time and the interpreter's own, and nothing else's
        assert burner * 0.9 <= in_group <= burner + 1000, (name, in_group, truth[name])
    total = sum(r["run_ms"] for r in rows)
    assert total < sum(truth[n]["run_ns"] / 1e6 for n in ("a", "late")) + 2000, total
