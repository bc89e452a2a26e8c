"""pagefault by cgroup: anonymous pages touched by workloads in two test-made cgroups and one outside,
each counted in its own group as its rusage says; --cgroup shows one group and its children."""

import pytest
from cgroup_fixtures import TOUCH_PAGES, traced_in_cgroups

pytestmark = pytest.mark.bpf

PAGES = {"a": 20_000, "b": 12_000, "out": 7_000, "late": 5_000}


def minor_of(records: list[dict], pid: int) -> dict[int, int]:
    """{cgroup id: minor faults} of one pid."""
    out: dict[int, int] = {}
    for r in records:
        if r["kind"] == "row" and r.get("pid") == pid:
            out[r["cgroup_id"]] = out.get(r["cgroup_id"], 0) + r["minor"]
    return out


def test_each_count_in_its_own_cgroup(test_cgroups):
    tool, paths, kids, reports = traced_in_cgroups(test_cgroups, "pagefault", ["0.5", "--top", "1000"],
                                                   TOUCH_PAGES, PAGES)
    ids = {name: test_cgroups.id_of(path) for name, path in paths.items()}
    for name in ("a", "b"):
        counted = minor_of(tool.records, kids[name].pid)
        lifetime = reports[name]["lifetime_minflt"]
        print(name, counted, lifetime)
        # rusage counts from fork: the forked child's faults before it moved itself into its group (a
        # few hundred, copy-on-write in the test's interpreter) are the test's cgroup's; the rest are its own
        assert abs(sum(counted.values()) - lifetime) <= 0.02 * lifetime, (name, counted, lifetime)
        assert counted[ids[name]] >= PAGES[name], (name, counted)
        assert set(counted) <= {ids[name], test_cgroups.own_id()}, (name, counted)
        assert sum(counted.values()) - counted[ids[name]] < 1000, (name, counted)
    outside = minor_of(tool.records, kids["out"].pid)
    assert not set(outside) & set(ids.values())
    assert abs(sum(outside.values()) - reports["out"]["lifetime_minflt"]) <= 0.02 * reports["out"]["lifetime_minflt"]


def test_group_by_cgroup_and_the_filter_with_a_group_made_after_start(test_cgroups):
    tool, paths, _, reports = traced_in_cgroups(test_cgroups, "pagefault",
                                                ["0.5", "--group-by", "cgroup", "--top", "1000"],
                                                TOUCH_PAGES, PAGES, filtered=True)
    rows = tool.of_kind("row")
    by_id: dict[int, int] = {}
    for r in rows:
        assert "pid" not in r and r["processes"] >= 1
        by_id[r["cgroup_id"]] = by_id.get(r["cgroup_id"], 0) + r["minor"]
    ids = {name: test_cgroups.id_of(paths[name]) for name in ("a", "late")}
    assert set(by_id) == set(ids.values()), by_id
    for name in ("a", "late"):
        lifetime = reports[name]["lifetime_minflt"]   # less the faults before the move (see above)
        assert PAGES[name] <= by_id[ids[name]] <= lifetime, (name, by_id, lifetime)
        assert by_id[ids[name]] >= lifetime - 1000, (name, by_id, lifetime)
    assert {r["cgroup"] for r in rows} == {test_cgroups.rel(paths["a"]), test_cgroups.rel(paths["late"])}
