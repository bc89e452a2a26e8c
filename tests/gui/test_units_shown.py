"""The window's numbers in units a person reads (registry/units.py): a table column of times in the one
unit that suits its largest value, named in its header, every cell of it in that unit; a chart's value
axis in the unit that suits the range it shows, its title saying which; a hovered value scaled."""

from __future__ import annotations

import json
import os

import pytest
from helpers import SAMPLES
from PySide6.QtCore import Qt

import config
from gui.charts import ScatterChart, TimeSeriesChart, make_chart
from gui.models import RecordTableModel

T0 = 1_795_460_000.0


def _sample(name: str) -> list[dict]:
    with open(os.path.join(SAMPLES, f"{name}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _column(model: RecordTableModel, name: str) -> tuple[str, list[str]]:
    i = [key for key, _, _ in model.columns].index(name)
    return (model.headerData(i, Qt.Orientation.Horizontal),
            [model.index(r, i).data(Qt.ItemDataRole.DisplayRole) for r in range(model.rowCount())])


def test_a_column_of_times_is_in_the_unit_its_header_names():
    """sysnest's total_us of up to 3,170,922 µs: the column is in ms (3,171), not 3,170,923 µs, and
    each of its cells in ms; offcpu's Blocked (declared ms) and Avg (declared µs) side by side in ms."""
    model = RecordTableModel(config.get("sysnest"))
    model.add_records(_sample("sysnest"))
    header, cells = _column(model, "total_us")
    values = [r["total_us"] for r in model.rows]
    assert header == "Total (ms)" and max(values) > 1e6
    assert [float(c.replace(",", "")) for c in cells] == pytest.approx([v / 1000 for v in values], rel=2e-3, abs=2e-3)
    model = RecordTableModel(config.get("offcpu"))
    model.add_records([{"kind": "row", "interval": 1, "level": "thread", "pid": 1, "tid": 1, "comm": "a",
                        "total_ms": 1031.0, "count": 2, "min_us": 10.0, "avg_us": 500_608.0, "max_us": 1_001_206.0}])
    assert _column(model, "total_ms") == ("Blocked (ms)", ["1,031"])
    assert _column(model, "avg_us") == ("Avg (ms)", ["500.6"])
    assert _column(model, "min_us") == ("Min (µs)", ["10.0"])
    assert _column(model, "count")[0] == "Count"


def test_sizes_carry_their_unit_and_declared_counts_their_separators():
    """pagefault's minor and major are declared counts: 31,862, though a device's minor is a name (no
    separators); a size carries its own unit in its cell; a pid is written as it is."""
    model = RecordTableModel(config.get("pagefault"))
    model.add_records([{"kind": "row", "interval": 1, "pid": 22140, "comm": "mixed", "minor": 31_862, "major": 1_204}])
    assert _column(model, "minor") == ("Minor", ["31,862"]) and _column(model, "major") == ("Major", ["1,204"])
    assert _column(model, "pid") == ("PID", ["22140"])
    model = RecordTableModel(config.get("biopwise"))
    model.add_records([{"kind": "row", "interval": 1, "pid": 7, "comm": "dd", "read_bytes": 61_997_056,
                        "write_bytes": 512, "read_ios": 15_136}])
    assert _column(model, "read_bytes") == ("Read", ["59.1 MiB"]) and _column(model, "write_bytes") == ("Write", ["512 B"])


def test_a_latency_axis_is_in_the_unit_of_its_range(qtbot):
    """tcpconnlat's latencies are declared in ms; connects of 50-250 µs draw an axis in µs, titled so."""
    chart = make_chart(config.get("tcpconnlat"))
    qtbot.addWidget(chart)
    chart.resize(800, 400)
    chart.show()
    assert isinstance(chart, ScatterChart)
    chart.add_records([{"kind": "event", "interval": 1, "ts": T0 + i, "latency_ms": 0.05 * (i + 1), "status": "ok"}
                       for i in range(5)])
    chart.redraw(force=True)
    chart.plot.viewport().repaint()
    qtbot.wait(20)
    axis = chart.value_axis
    assert axis.labelText == "connect latency (µs)"
    assert axis.tickStrings([0.1, 0.2], 1.0, 0.1) == ["100", "200"]


def test_a_rate_of_bytes_is_in_mib_per_second(qtbot):
    chart = TimeSeriesChart(config.get("biopwise"))
    qtbot.addWidget(chart)
    chart.resize(800, 400)
    chart.show()
    chart.add_records([{"kind": "summary", "interval": i, "ts": T0 + i, "bytes_per_s": 150e6 + i} for i in range(3)])
    chart.redraw(force=True)
    chart.plot.viewport().repaint()
    qtbot.wait(20)
    assert chart.value_axis.labelText == "block I/O (MiB/s)"
    assert chart.point_at(T0 + 1, 150e6)[2].endswith("block I/O: 143.1 MiB/s")
