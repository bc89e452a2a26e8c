"""sysnest by cgroup: getppid counts of workloads in two test-made cgroups and one outside land in their
own group, and --cgroup shows one group and a group made below it after start, nothing else."""

import os

import pytest
from cgroup_fixtures import workload_in
from helpers import MetricProcess, end_workload, next_line

pytestmark = pytest.mark.bpf

GETPPID = """
import os, sys
n = int(sys.argv[1])
sys.stdin.readline()
for _ in range(n):
    os.getppid()
print("done", flush=True)
sys.stdin.readline()
"""
COUNTS = {"a": 20_000, "b": 12_000, "out": 7_000, "late": 5_000}


def getppid_by_pid(records: list[dict]) -> dict[int, list[dict]]:
    rows: dict[int, list[dict]] = {}
    for r in records:
        if r["kind"] == "row" and r["level"] == "detail" and r["syscall"] == "getppid":
            rows.setdefault(r["pid"], []).append(r)
    return rows


def run_and_stop(tool: MetricProcess, children: list) -> None:
    for child in children:
        assert next_line(child).strip() == "done"
    last = tool.drain()
    tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= last + 2)
    status, _ = tool.stop()
    assert status == 0, tool.stderr


def test_each_count_in_its_own_cgroup(test_cgroups):
    a, b = test_cgroups.make("a"), test_cgroups.make("b")
    kids = {"a": workload_in(a, GETPPID, str(COUNTS["a"])), "b": workload_in(b, GETPPID, str(COUNTS["b"])),
            "out": workload_in(None, GETPPID, str(COUNTS["out"]))}
    tool = MetricProcess("sysnest", "0.5", "--group-by", "cgroup", "--top", "1000", "--details-top", "1000")
    try:
        tool.wait_meta()
        run_and_stop(tool, list(kids.values()))
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
    rows = getppid_by_pid(tool.records)
    ids = {"a": test_cgroups.id_of(a), "b": test_cgroups.id_of(b)}
    for name in ("a", "b"):
        mine = rows[kids[name].pid]
        assert {r["cgroup_id"] for r in mine} == {ids[name]}
        assert {r["cgroup"] for r in mine} == {test_cgroups.rel(a if name == "a" else b)}
        count = sum(r["count"] for r in mine)
        assert abs(count - COUNTS[name]) <= COUNTS[name] * 0.001, (name, count)
    outside = rows[kids["out"].pid]
    assert not {r["cgroup_id"] for r in outside} & set(ids.values())
    assert abs(sum(r["count"] for r in outside) - COUNTS["out"]) <= COUNTS["out"] * 0.001
    # the groups' own rows: each cgroup's group row holds nothing of the other's process
    groups = {r["cgroup_id"]: r for r in tool.of_kind("row") if r["level"] == "group"}
    assert ids["a"] in groups and ids["b"] in groups
    members = {r["pid"] for r in tool.of_kind("row") if r["level"] == "detail" and r["cgroup_id"] == ids["a"]}
    assert members == {kids["a"].pid}


def test_cgroup_filter_takes_in_groups_made_after_start(test_cgroups):
    a, b = test_cgroups.make("a"), test_cgroups.make("b")
    kids = {"a": workload_in(a, GETPPID, str(COUNTS["a"])), "b": workload_in(b, GETPPID, str(COUNTS["b"])),
            "out": workload_in(None, GETPPID, str(COUNTS["out"]))}
    tool = MetricProcess("sysnest", "0.5", "--cgroup", a, "--top", "1000", "--details-top", "1000")
    try:
        meta = tool.wait_meta()
        assert meta["filters"] == {"cgroup": a}
        late = test_cgroups.make(os.path.join("a", "late"))
        kids["late"] = workload_in(late, GETPPID, str(COUNTS["late"]))
        run_and_stop(tool, list(kids.values()))
    finally:
        tool.kill()
        for child in kids.values():
            end_workload(child)
    pids = {r["pid"] for r in tool.of_kind("row")}
    assert pids <= {kids["a"].pid, kids["late"].pid}, pids
    rows = getppid_by_pid(tool.records)
    for name in ("a", "late"):
        count = sum(r["count"] for r in rows[kids[name].pid])
        assert abs(count - COUNTS[name]) <= COUNTS[name] * 0.001, (name, count)
    assert {r["cgroup_id"] for r in rows[kids["late"].pid]} == {test_cgroups.id_of(late)}
