"""compmem by cgroup: workloads holding known numbers of pipes in two test-made cgroups and one outside;
each one's outstanding kernel bytes (at least test_compmem's 1,000 bytes a pipe) in its own group, and
--cgroup with --group-by cgroup keeps one group and a group made below it after start."""

import pytest
from cgroup_fixtures import PIPES, traced_in_cgroups

pytestmark = pytest.mark.bpf

COUNTS = {"a": 400, "b": 250, "out": 150, "late": 200}
PER_PIPE = 1000


def test_each_process_outstanding_in_its_own_cgroup(test_cgroups):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "compmem", ["0.5", "--sample-bytes", "0", "--top", "1000"], PIPES, COUNTS)
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    last = max(r["interval"] for r in tool.of_kind("row"))
    for name in ("a", "b", "out"):
        rows = [r for r in tool.of_kind("row") if r["level"] == "process" and r["pid"] == kids[name].pid]
        assert rows, name
        newest = max(rows, key=lambda r: r["interval"])
        print(name, newest["outstanding_bytes"], truth[name], newest["interval"], last)
        assert newest["outstanding_bytes"] >= truth[name]["pipes"] * PER_PIPE, (name, newest)
        got = {r["cgroup_id"] for r in rows}
        assert got == {ids[name]} if name in ids else not got & set(ids.values()), (name, got)


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, "compmem", ["0.5", "--sample-bytes", "0", "--group-by", "cgroup"], PIPES,
                                              COUNTS, filtered=True)
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    groups = [r for r in tool.of_kind("row") if r["level"] == "cgroup"]
    assert {g["cgroup_id"] for g in groups} == set(ids.values()), groups
    stacks = [r for r in tool.of_kind("row") if r["level"] == "stack"]
    assert {r["cgroup_id"] for r in stacks} <= set(ids.values())
    last = max(g["interval"] for g in groups)
    for name in ("a", "late"):
        newest = [g for g in groups if g["cgroup_id"] == ids[name] and g["interval"] == last]
        assert newest and newest[0]["outstanding_bytes"] >= truth[name]["pipes"] * PER_PIPE, (name, newest)
