"""cacheraw by cgroup: new files of known sizes written by workloads in two test-made cgroups and one
outside; each one's dirtied pages (its /proc/self/io write_bytes) in its own group."""

import pytest
from cgroup_fixtures import WRITE_PAGES, traced_in_cgroups

pytestmark = pytest.mark.bpf

PAGES = {"a": 4096, "b": 2048, "out": 1024, "late": 1536}



def test_each_write_in_its_own_cgroup(test_cgroups, block_directory):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, "cacheraw", ["0.5", "--max-rows", "100000"],
                                                 WRITE_PAGES, PAGES, extra=(block_directory,))
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b", "out"):
        rows = [r for r in tool.of_kind("row") if r["pid"] == kids[name].pid]
        dirtied = sum(r["write_miss_pages"] for r in rows)
        print(name, dirtied, truth[name])
        # test_cacheraw's tolerance for a new file's dirtied pages against /proc/self/io
        assert abs(dirtied - truth[name]["write_pages"]) <= 0.02 * truth[name]["write_pages"], (name, dirtied)
        got = {r["cgroup_id"] for r in rows}
        assert got == {ids[name]} if name in ids else not got & set(ids.values()), (name, got)


def test_filter_and_group_by_cgroup_with_a_group_made_after_start(test_cgroups, block_directory):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, "cacheraw", ["0.5", "--group-by", "cgroup"],
                                              WRITE_PAGES, PAGES, filtered=True, extra=(block_directory,))
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    rows = tool.of_kind("row")
    assert {r["cgroup_id"] for r in rows} == set(ids.values()), rows
    for name in ("a", "late"):
        dirtied = sum(r["write_miss_pages"] for r in rows if r["cgroup_id"] == ids[name])
        assert abs(dirtied - truth[name]["write_pages"]) <= 0.02 * truth[name]["write_pages"], (name, dirtied)
