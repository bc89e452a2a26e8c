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
