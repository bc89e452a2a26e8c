"""Unit tests of the metric-script harness's pure parts."""

import argparse

import bcctool
import pytest


def test_log2_buckets_follow_bpf_log2l():
    # bpf_log2l(0) = bpf_log2l(1) = 1, values 2..3 -> 2, 4..7 -> 3
    buckets = bcctool.log2_buckets({1: 5, 3: 2})
    assert buckets == [{"lo": 0, "hi": 1, "count": 5}, {"lo": 2, "hi": 3, "count": 0},
                       {"lo": 4, "hi": 7, "count": 2}]
    assert bcctool.log2_buckets({}) == []


@pytest.mark.parametrize("text", ["0", "-1", "x", ""])
def test_positive_int_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bcctool.positive_int(text)


@pytest.mark.parametrize("text", ["0", "nan", "inf", "-2"])
def test_positive_float_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bcctool.positive_float(text)


def test_comm_limit():
    assert bcctool.comm_name("python3") == "python3"
    with pytest.raises(argparse.ArgumentTypeError):
        bcctool.comm_name("x" * 16)


def test_table_alignment():
    text = bcctool.table([("PID", 5), ("COMM", -8)], [[1, "a"], [22, "bb"]])
    assert text.splitlines() == ["  PID COMM", "    1 a", "   22 bb"]


@pytest.fixture
def own_signals():
    """intervals() installs the tool's signal handlers; give pytest its own back afterwards."""
    import signal
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)}
    yield
    signal.set_wakeup_fd(-1)
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_stop_while_an_interval_is_processed_leaves_one_more_read(own_signals):
    """A stop signal that lands while an interval is being printed must not drop what the probes
    counted since that interval's read: the loop reads once more, at once, then ends."""
    tool = bcctool.Tool("t", "test", [], interval=0.01)
    tool.parse_args(["0.01"])
    seen = []
    for index in tool.intervals():
        seen.append(index)
        if index == 2:
            tool.stopping = True  # as the SIGINT handler does
        assert index <= 3, "the loop went on after the final read"
    assert seen == [1, 2, 3]


def test_stop_during_the_wait_makes_that_interval_the_last(own_signals):
    tool = bcctool.Tool("t", "test", [], interval=0.01)
    tool.parse_args(["0.01"])
    seen = []
    for index in tool.intervals():
        seen.append(index)
        if index == 2:
            # the handler fires while the loop waits for the next interval
            tool.wait = lambda seconds: (setattr(tool, "stopping", True), False)[1]
    assert seen == [1, 2, 3]
