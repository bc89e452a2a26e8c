"""--cgroup on cpuprofile through the harness's BPF filter (bpf/common.h skip_task): it samples only
threads of the group and of a group made below it after start, and each group's burning thread is
sampled in proportion to its CPU time (the records' cgroups: test_cgroups_cpuprofile.py)."""

import pytest
from cgroup_fixtures import BURN, traced_in_cgroups

pytestmark = pytest.mark.bpf

BURN_MS = {"a": 1000, "b": 700, "out": 400, "late": 600}


def test_cpuprofile_samples_only_the_group_and_a_group_made_later(test_cgroups):
    tool, _, kids, truth = traced_in_cgroups(test_cgroups, "cpuprofile", ["-F", "99", "1"], BURN, BURN_MS,
                                             filtered=True, intervals=1)
    stacks = tool.of_kind("stack")
    samples = {}
    for s in stacks:
        samples[s["pid"]] = samples.get(s["pid"], 0) + s["count"]
    print(samples, {n: truth[n]["run_ns"] for n in truth})
    assert set(samples) <= {kids["a"].pid, kids["late"].pid}, samples
    for name in ("a", "late"):
        # 99 Hz on the thread's own CPU time: a sample per 10.1 ms of it, at least 60 % of them on a
        # loaded VM (a sample is lost when the CPU's timer fires while another task runs)
        expected = truth[name]["run_ns"] / 1e9 * 99
        assert samples.get(kids[name].pid, 0) >= 0.6 * expected, (name, samples, expected)
