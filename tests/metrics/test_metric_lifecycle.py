"""Every registered metric, started for real and stopped by SIGINT or SIGTERM: it attaches each probe
the registry says it needs, prints its last interval, exits 0 within 2 s, and leaves no process and no
BPF program behind. One test for all ten, so a new metric is checked the day it is registered."""

import os
import signal

import pytest
from helpers import MetricProcess, loaded_prog_ids, progs_released

import config
from bcctool import kernelfeatures

pytestmark = pytest.mark.bpf

# Options that switch on a metric's optional paths, so those are stopped cleanly too.
EXTRA_ARGS = {
    "cpuschedrun": ["-P"],
    "netpack": ["--events"],
    "pagefault": ["--traps"],
    "compmem": ["--caches"],
}


def attached(required: str, probes: list[dict]) -> bool:
    """A registry probe name ("category:event", "perf:NAME") against the meta record's probes, where
    raw tracepoints carry only the event name and perf events their perf name."""
    category, _, event = required.partition(":")
    for probe in probes:
        if probe["name"] == required:
            return True
        if probe["type"] == "raw_tracepoint" and probe["name"] == event:
            return True
        if category == "perf" and probe["type"] == "perf_event" and probe["name"] == event:
            return True
    return False


def group_is_empty(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("spec", config.METRICS, ids=[s.name for s in config.METRICS])
def test_stop_prints_last_interval_and_leaves_nothing(spec, sig):
    tool = MetricProcess(spec.name, "0.3", *EXTRA_ARGS.get(spec.name, []))
    try:
        meta = tool.wait_meta()
        missing = [p for p in spec.probes if not attached(p, meta["probes"])]
        assert not missing, f"{spec.name}: required probes not attached: {missing}"
        if not kernelfeatures.kprobes_available():
            assert all(p["type"] != "kprobe" for p in meta["probes"])
        assert tool.prog_ids, f"{spec.name} holds no BPF program"
        assert tool.prog_ids <= loaded_prog_ids()
        tool.read_until(lambda r: r["kind"] == "summary")
        signalled_at = len(tool.records)
        status, took = tool.stop(sig)
    finally:
        tool.kill()
    assert status == 0, tool.stderr
    assert took < 2.0, f"{spec.name} took {took:.2f}s to stop"
    assert "Traceback" not in tool.stderr
    assert len(tool.records) > signalled_at, f"{spec.name} printed nothing after the signal"
    assert tool.records[-1]["kind"] in ("summary", "row", "hist", "event", "lost", "stack")
    assert tool.proc.poll() is not None and group_is_empty(tool.proc.pid)
    assert progs_released(tool.prog_ids), f"{spec.name} left BPF programs loaded"
