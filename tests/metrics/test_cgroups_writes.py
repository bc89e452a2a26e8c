"""biopwise and cacheraw by cgroup: writes of known sizes by workloads in two test-made cgroups and one
outside, each one's written amount in its own group; --cgroup and --group-by cgroup on one group and a
group made later. biopwise counts O_DIRECT bytes; cacheraw counts a new file's dirtied pages, against
the workload's /proc/self/io write_bytes."""

from dataclasses import dataclass

import pytest
from cgroup_fixtures import DIRECT_WRITE, WRITE_PAGES, traced_in_cgroups

pytestmark = pytest.mark.bpf


@dataclass(frozen=True)
class Case:
    metric: str
    max_rows: list[str]   # the metric's own row limit, raised so no workload's row is cut
    workload: str
    sizes: dict           # per group: MiB (biopwise) or pages (cacheraw) the workload writes
    field: str            # the record field counting what was written
    truth: str            # the workload's own figure for it


CASES = [
    Case("biopwise", ["--maxrows", "100000"], DIRECT_WRITE, {"a": 16, "b": 8, "out": 4, "late": 6},
         "write_bytes", "bytes"),
    Case("cacheraw", ["--max-rows", "100000"], WRITE_PAGES, {"a": 4096, "b": 2048, "out": 1024, "late": 1536},
         "write_miss_pages", "write_pages"),
]
by_metric = pytest.mark.parametrize("case", CASES, ids=lambda case: case.metric)


def near(got: int, want: int) -> bool:
    """test_biopwise's 2 % for O_DIRECT bytes; test_cacheraw's for a new file's dirtied pages."""
    return abs(got - want) <= 0.02 * want


@by_metric
def test_each_write_in_its_own_cgroup(case, test_cgroups, block_directory):
    tool, paths, kids, truth = traced_in_cgroups(test_cgroups, case.metric, ["0.5", *case.max_rows],
                                                 case.workload, case.sizes, extra=(block_directory,))
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b", "out"):
        rows = [r for r in tool.of_kind("row") if r["pid"] == kids[name].pid]
        written = sum(r[case.field] for r in rows)
        print(name, written, truth[name])
        assert near(written, truth[name][case.truth]), (name, written, tool.of_kind("lost"), [
            (r["interval"], r["pid"], r[case.field]) for r in tool.of_kind("row")])
        got = {r["cgroup_id"] for r in rows}
        assert got == {ids[name]} if name in ids else not got & set(ids.values()), (name, got)


@by_metric
def test_filter_and_group_by_cgroup_with_a_group_made_after_start(case, test_cgroups, block_directory):
    tool, paths, _, truth = traced_in_cgroups(test_cgroups, case.metric, ["0.5", "--group-by", "cgroup"],
                                              case.workload, case.sizes, filtered=True, extra=(block_directory,))
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    rows = tool.of_kind("row")
    assert {r["cgroup_id"] for r in rows} == set(ids.values()), rows
    lost = tool.of_kind("lost")
    for name in ("a", "late"):
        written = sum(r[case.field] for r in rows if r["cgroup_id"] == ids[name])
        assert near(written, truth[name][case.truth]), (
            name, written, lost, [(r["interval"], r["cgroup"], r[case.field]) for r in rows])
