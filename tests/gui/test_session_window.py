"""A session recorded by the window and opened in another: every metric's tab, table and chart as they
were live, record for record, with nothing started (no root, BPF or collector)."""

import json
import os

import pytest
from gui_fakes import FakeController, make_window
from helpers import ROOT
from PySide6.QtCore import Qt

import config
from gui.charts import HeatmapChart, HistogramChart, ScatterChart, TimeSeriesChart
from gui.profile_panel import ProfilePanel

NAMES = [s.name for s in config.METRICS if os.path.exists(os.path.join(ROOT, "tests", "samples", f"{s.name}.ndjson"))]


def sample(name: str) -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", f"{name}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def picture(chart):
    """What a chart holds, in plain data, to compare two windows."""
    if isinstance(chart, TimeSeriesChart):
        return {name: (list(xs), list(ys)) for name, (xs, ys) in chart.points.items()}
    if isinstance(chart, ScatterChart):
        return list(chart.events)
    if isinstance(chart, HistogramChart):
        return chart.latest
    if isinstance(chart, HeatmapChart):
        return chart.counts, chart.times
    if isinstance(chart, ProfilePanel):
        profile = chart.current().profile
        return profile.total, sorted(chart.store.whole) if hasattr(chart.store, "whole") else None
    raise AssertionError(type(chart))


def table(tab):
    model = tab.proxy
    return [[model.index(r, c).data(Qt.ItemDataRole.DisplayRole) for c in range(model.columnCount())]
            for r in range(model.rowCount())]


def test_record_in_one_window_open_in_another(qtbot, tmp_path):
    live = FakeController()
    first = make_window(qtbot, tmp_path, live, show=True)
    path = str(tmp_path / "run.ndjson")
    assert first.session.start_recording(path)
    for name in NAMES:
        first.tab_for(name)
    for name in NAMES:                       # in batches, as the controller hands them over
        records = sample(name)
        for i in range(0, len(records), 5):
            live.records.emit(name, records[i:i + 5])
    first.refresh()
    first.session.stop_recording(wait=5.0)
    with open(path) as f:
        saved = [json.loads(line) for line in f]
    assert saved == [r for name in NAMES for r in sample(name)]

    opener = FakeController()
    (tmp_path / "second").mkdir()
    second = make_window(qtbot, tmp_path / "second", opener, show=True)
    second.session.open(path)
    qtbot.waitUntil(lambda: set(second.tabs) == set(NAMES), timeout=10_000)
    assert opener.started == []
    for name in NAMES:
        was, now = first.tabs[name], second.tabs[name]
        now.refresh()
        assert now.state == "recorded" and now.records_seen == was.records_seen == len(sample(name))
        assert table(now) == table(was), name
        for a, b in zip(was.charts, now.charts, strict=True):
            a.redraw(force=True)
            b.redraw(force=True)
            assert picture(b) == picture(a), name


def test_a_bad_file_says_why_and_opens_nothing(qtbot, tmp_path):
    bad = tmp_path / "bad.ndjson"
    bad.write_text("hello\n")
    window = make_window(qtbot, tmp_path, FakeController(), show=True)
    window.session.open(str(bad))
    qtbot.waitUntil(lambda: "line 1 is not JSON" in window.statusBar().currentMessage(), timeout=5000)
    assert window.tabs == {}


@pytest.mark.parametrize("where", ["no such dir/s.ndjson"])
def test_recording_to_an_unwritable_place_is_refused(qtbot, tmp_path, where):
    window = make_window(qtbot, tmp_path, FakeController())
    assert not window.session.start_recording(str(tmp_path / where))
    assert window.session.recorder is None
