"""Shared fixtures (helpers, fakes and fixtures live in tests/support/, on pytest's pythonpath). BPF tests
need root and bcc; where the machine cannot run them they skip, except
under CI (CI set), where a BPF test that cannot run fails the run instead."""

from __future__ import annotations

import os

import pytest

# Qt tests run without a display (CI has none); a developer can still ask for a real one.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from helpers import bpf_unavailable_reason  # noqa: E402
from server_fixtures import collector_app, collector_client, db_url, make_collector, pg_cluster  # noqa: E402,F401

IN_CI = bool(os.environ.get("CI"))
# fixtures some test packages share: a real browser and the collector it drives, and pprof's own proto
pytest_plugins = ["browser", "cgroup_fixtures", "pprof_decode"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bpf: loads real BPF programs (root, bcc); never skipped in CI")
    config.addinivalue_line("markers", "slow: no BPF, but seconds or more (servers, subprocesses, many examples); "
                            "`make test-quick` leaves these and the BPF tests out")


@pytest.fixture(autouse=True)
def _bpf_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("bpf") is None:
        return
    reason = bpf_unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"BPF test cannot run in CI: {reason}")
        pytest.skip(reason)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped BPF test is a failure, whatever skipped it."""
    if not IN_CI:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    bpf_skips = [r for r in skipped if "bpf" in getattr(r, "keywords", {})]
    if bpf_skips:
        reporter.write_line(f"CI: {len(bpf_skips)} BPF test(s) skipped; failing the run", red=True)
        session.exitstatus = 1
