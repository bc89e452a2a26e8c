"""Fixtures the metric-harness tests share."""

from __future__ import annotations

import signal

import pytest


@pytest.fixture
def own_signals():
    """intervals() installs the tool's signal handlers; give pytest its own back afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)}
    yield
    signal.set_wakeup_fd(-1)
    for s, handler in saved.items():
        signal.signal(s, handler)
