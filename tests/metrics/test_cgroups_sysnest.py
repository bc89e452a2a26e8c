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


TWO_BATCHES = """
import os, sys
n1, n2 = int(sys.argv[1]), int(sys.argv[2])
sys.stdin.readline()
for _ in range(n1):
    os.getppid()
print("done", flush=True)
sys.stdin.readline()
for _ in range(n2):
    os.getppid()
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_process_moved_mid_run_is_counted_in_each_group(test_cgroups):
    """A child makes 9,000 getppid calls in group a, is moved to b while sysnest runs (its threads keep their
    cgroup until a move is seen), then makes 4,000 more: a holds exactly the first, b exactly the second."""
    a, b = test_cgroups.make("a"), test_cgroups.make("b")
    child = workload_in(a, TWO_BATCHES, "9000", "4000")
    tool = MetricProcess("sysnest", "0.5", "--group-by", "cgroup", "--top", "1000", "--details-top", "1000")
    try:
        tool.wait_meta()
        assert next_line(child).strip() == "done"
        with open(os.path.join(b, "cgroup.procs"), "w") as f:
            f.write(str(child.pid))
        run_and_stop(tool, [child])
    finally:
        tool.kill()
        end_workload(child)
    by_group: dict[int, int] = {}
    for r in getppid_by_pid(tool.records)[child.pid]:
        by_group[r["cgroup_id"]] = by_group.get(r["cgroup_id"], 0) + r["count"]
    assert by_group == {test_cgroups.id_of(a): 9000, test_cgroups.id_of(b): 4000}
