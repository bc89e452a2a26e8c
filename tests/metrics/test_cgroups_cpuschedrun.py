"""cpuschedrun by cgroup: threads burning CPU in two test-made cgroups and one outside, each thread's run
time (schedstat) in its own group; --cgroup and --group-by cgroup on one group and a group made later."""

import pytest
from cgroup_fixtures import BURN, traced_in_cgroups

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
