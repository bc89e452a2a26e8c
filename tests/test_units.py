"""registry/units.py, the one formatting layer the window, the dashboard and the terminal share: times
scaled to their size (one unit for a whole column), sizes in KiB/MiB/GiB, rates with /s, axes whose
ticks read 0-999 in the unit their title names, and labels in words for fields no entry declares."""

from __future__ import annotations

import pytest

import config
from registry import units
from registry.spec import Figure, field_of


@pytest.mark.parametrize(("value", "unit", "text"), [
    (12_692_078, "us", "12.7 s"), (894.1, "us", "894.1 µs"), (0.053059, "ms", "53.1 µs"), (1031, "ms", "1.031 s"),
    (23_232_972_638, "ns", "23.2 s"), (61_997_056, "bytes", "59.1 MiB"), (512, "bytes", "512 B"),
    (150e6, "bytes/s", "143.1 MiB/s"), (741.0, "/s", "741/s"), (42.5, "pct", "42.5%"), (49, "hz", "49 Hz"),
    (1_234_567, "count", "1,234,567"), (0.05, "s/s", "50 ms/s"), (0, "us", "0 µs")])
def test_a_value_reads_with_its_unit_scaled_to_its_size(value, unit, text):
    assert units.quantity(value, unit) == text


def test_a_column_of_times_is_in_one_unit_its_heading_names():
    """The column's largest decides: the smallest unit it is under 10,000 in. 12,692,078 µs is 12,692
    ms, so the column is in s, and so is every cell of it, 3 µs too."""
    values = [12_692_078.0, 500_608.0, 3.0]
    shown = units.column_unit("us", values)
    assert shown == "s" and units.heading("Total", shown) == "Total (s)"
    assert [units.cell(v, "us", "total_us", shown) for v in values] == ["12.7", "0.501", "0.000003"]
    # 1,031 ms beside 500,608 µs: both columns in ms when their largest is under 10,000 ms
    assert units.column_unit("ms", [1031.0]) == "ms" and units.column_unit("us", [500_608.0]) == "ms"
    assert units.column_unit("us", [894.1, 12.0]) == "us" and units.column_unit("us", []) == "us"
    assert units.column_unit("bytes", [1 << 30]) == "bytes"           # sizes carry their own unit per cell
    assert units.cell(61_997_056, "bytes", "read_bytes") == "59.1 MiB" and units.heading("Read", "bytes") == "Read"


def test_identifiers_counts_and_other_cells():
    assert units.cell(26712, "", "pid") == "26712" and units.cell(41747, "", "dport") == "41747"
    assert units.cell(31862, "count", "minor") == "31,862"           # a declared count, though "minor" names devices
    assert units.cell(True) == "yes" and units.cell(None) == "" and units.cell(["a", "b"]) == "a;b"
    assert units.number(0.00041) == "0.00041" and units.number(12.34) == "12.3" and units.number(2.345) == "2.345"
    assert units.heading("CPU%", "pct") == "CPU%" and units.heading("Share", "pct") == "Share (%)"
    assert units.heading("Minor/s", "/s") == "Minor/s" and units.heading("Run", "ms") == "Run (ms)"


@pytest.mark.parametrize(("unit", "largest", "factor", "shown"), [
    ("ms", 0.1, 1000, "µs"), ("ms", 800, 1, "ms"), ("us", 2e6, 1e-6, "s"), ("bytes/s", 150e6, 2 ** -20, "MiB/s"),
    ("bytes", 900, 1, "B"), ("/s", 1e5, 1, "/s"), ("pct", 50, 1, "%"), ("count", 5, 1, "")])
def test_an_axis_is_in_the_unit_its_largest_tick_reads_best_in(unit, largest, factor, shown):
    got_factor, got_shown = units.axis(unit, largest)
    assert got_factor == pytest.approx(factor) and got_shown == shown


@pytest.mark.parametrize(("name", "label", "unit"), [
    ("avg_lat_us", "Avg latency", "us"), ("bytes_per_s", "Bytes", "bytes/s"), ("per_sec", "Rate", "/s"),
    ("wall_s", "Wall", "s"), ("frequency_hz", "Frequency", "hz"), ("total_time_ns", "Total time", "ns"),
    ("cgroup_id", "Cgroup ID", "id"), ("read_hits_per_s", "Read hits", "/s"), ("runq_latency", "Run-queue latency", "")])
def test_an_undeclared_field_gets_words_and_a_unit_from_its_name(name, label, unit):
    assert units.guess(name) == (label, unit)
    assert field_of(name).label == label                              # what a heading shows for it


def test_declared_labels_win_and_common_fields_are_declared_once():
    assert config.get("offcpu").field("total_ms").label == "Blocked"
    assert config.get("offcpu").field("total_time_ns", "summary").unit == "ns"
    assert field_of("interval_s").label == "Interval length" and field_of("rank").unit == "id"


def test_a_key_figure_is_a_rate_with_its_unit():
    """The overview's and headless progress's one number: with its unit, /s for a rate, and for the
    profiles a share of CPU (samples / frequency / interval) or blocked time per second."""
    assert Figure("per_sec", "/s", "syscalls").text(33374.0) == "33,374 syscalls/s"
    cpu = config.get("cpuprofile").key_figure
    assert cpu.value({"samples": 96, "frequency_hz": 99, "interval_s": 1.002}) == pytest.approx(96.77, abs=0.01)
    assert config.get("cpuprofile").key_figure_text({"samples": 96, "frequency_hz": 99, "interval_s": 1.002}) \
        == "96.8% CPU"
    assert config.get("offcpu").key_figure_text({"total_time_ns": 23_232_972_638, "interval_s": 1.005}) \
        == "23.1 s/s blocked"
    assert config.get("biopwise").key_figure_text({"bytes_per_s": 150e6}) == "143.1 MiB/s of block I/O"
    assert config.get("offcpu").key_figure_text({"total_time_ns": 5, "interval_s": 0}) == ""   # no division by 0
