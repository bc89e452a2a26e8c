"""biopwise by cgroup: O_DIRECT writes of known sizes by workloads in two test-made cgroups and one outside,
each one's bytes in its own group; --cgroup and --group-by cgroup on one group and a group made later."""

import pytest
from cgroup_fixtures import DIRECT_WRITE, traced_in_cgroups

pytestmark = pytest.mark.bpf

MIB = {"a": 16, "b": 8, "out": 4, "late": 6}



def test_each_write_in_its_own_cgroup(test_cgroups, block_directory):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "biopwise", ["0.5", "--maxrows", "100000"],
                                                 DIRECT_WRITE, MIB, extra=(block_directory,))
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b", "out"):
        rows = [r for r in tool.of_kind("row") if r["pid"] == kids[name].pid]
        written = sum(r["write_bytes"] for r in rows)
        print(name, written, truth[name])
        # test_biopwise's 2 % for O_DIRECT bytes
        assert abs(written - truth[name]["bytes"]) <= 0.02 * truth[name]["bytes"], (name, written)
        got = {r["cgroup_id"] for r in rows}
        assert got == {ids[name]} if name in ids else not got & set(ids.values()), (name, got)


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups, block_directory):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, "biopwise", ["0.5", "--group-by", "cgroup"],
                                              DIRECT_WRITE, MIB, filtered=True, extra=(block_directory,))
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    rows = tool.of_kind("row")
    assert {r["cgroup_id"] for r in rows} == set(ids.values()), rows
    for name in ("a", "late"):
        written = sum(r["write_bytes"] for r in rows if r["cgroup_id"] == ids[name])
        assert abs(written - truth[name]["bytes"]) <= 0.02 * truth[name]["bytes"], (name, written)
