"""The kernel preflight on this machine, and on a kernel missing features (simulated)."""

import os
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, reachable_by_others

import config
from bcctool import kernelfeatures
from host import preflight


@pytest.mark.bpf
def test_doctor_on_this_machine():
    result = subprocess.run([sys.executable, "main_app.py", "--doctor"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "bcc           0." in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert "runnable" in lines["sysnest"]
    expected = "available" if kernelfeatures.kprobes_available() else "unavailable"
    assert lines["kprobes"].split()[1] == expected
    for spec in config.METRICS:
        assert spec.name in lines, f"doctor does not list {spec.name}"


def test_kprobe_detection_matches_the_kernel(tmp_path):
    import os
    has_pmu = os.path.isdir("/sys/bus/event_source/devices/kprobe")
    root = kernelfeatures.tracefs_root()
    has_events = bool(root) and os.path.exists(os.path.join(root, "kprobe_events"))
    assert kernelfeatures.kprobes_available() == (has_pmu or has_events)


def test_doctor_without_tracefs_does_not_crash(monkeypatch):
    monkeypatch.setattr(kernelfeatures, "TRACEFS_ROOTS", ("/nonexistent/tracing",))
    lines, status = preflight.report()
    assert status == 1
    text = "\n".join(lines)
    assert "NOT mounted" in text
    assert all(not v.runnable for v in preflight.metric_verdicts())


def test_missing_tracepoint_is_named(monkeypatch):
    monkeypatch.setattr(kernelfeatures, "tracepoint_exists", lambda c, e: c != "raw_syscalls")
    monkeypatch.setattr(kernelfeatures, "privileges", lambda: (True, "root"))
    verdict = next(v for v in preflight.metric_verdicts() if v.name == "sysnest")
    if kernelfeatures.tracefs_root() and kernelfeatures.bcc_version():
        assert not verdict.runnable
        assert "raw_syscalls:sys_enter" in verdict.reason


NOBODY_VERDICTS = """
import sys
sys.path.insert(0, sys.argv[1])
from host import elevation, preflight
verdicts = preflight.metric_verdicts()
print(len(verdicts), sum(v.reason.startswith("needs root: tracefs at") for v in verdicts),
      sum(v.runnable for v in elevation.with_elevation(verdicts, True)))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to become another user")
def test_a_user_who_cannot_read_tracefs_is_told_the_metrics_need_root_not_that_it_is_missing():
    """tracefs is mode 0700 here: the preflight, run as a user, said "tracefs is not mounted" for every
    metric, even where sudo would run them. Judged with the privileges the metric will have, each needs
    root, and runs once elevation works."""
    if os.access(kernelfeatures.tracefs_root() or "/sys/kernel/tracing", os.R_OK, effective_ids=False) and \
            os.stat("/sys/kernel/tracing").st_mode & 0o005:
        pytest.skip("tracefs is readable by everyone on this machine")
    with reachable_by_others(ROOT):
        out = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", NOBODY_VERDICTS, ROOT],
                             capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    total, hidden, runnable = map(int, out.stdout.split())
    assert total == len(config.METRICS) and hidden == total and runnable == total
