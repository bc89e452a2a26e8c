"""Charts a person can work with: the wheel zooms (and the view stops following until Reset), the bar
names the point under the cursor from the data, Pause freezes the picture while records keep arriving
and resuming shows them, legends name each series with its unit; biopwise's read/write, IOPS and latency
lines and the latency heatmaps of tcpconnlat and cpuschedrun count exactly what their records say."""

import json
import os
import re
import time

import pytest
from helpers import ROOT
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

import config
from gui.charts import HeatmapChart, ScatterChart, TimeSeriesChart, make_chart
from gui.metric_tab import MetricTab
from gui.style import BAD

T0 = 1_795_460_000.0


def sample(name: str) -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", f"{name}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def summaries(n: int, start: int = 0) -> list[dict]:
    return [{"kind": "summary", "interval": i + 1, "ts": T0 + i, "per_sec": 100.0 + (i % 7) * 10} for i in range(start, start + n)]


def fed_tab(qtbot, name: str, records: list[dict]) -> MetricTab:
    """The metric's window tab, shown, with the records fed and drawn."""
    tab = MetricTab(config.get(name))
    qtbot.addWidget(tab)
    tab.show()
    tab.feed(records)
    tab.refresh()
    return tab


def shown_chart(qtbot, chart):
    qtbot.addWidget(chart)
    chart.resize(800, 400)
    chart.show()
    qtbot.waitExposed(chart)
    return chart


def drawn(qtbot, chart, force: bool = False) -> None:
    """Redraw and let the plot paint once: its view follows its data when it is laid out for a paint."""
    chart.redraw(force=force)
    chart.plot.viewport().repaint()
    qtbot.wait(20)


def viewport_point(chart, x: float, y: float) -> QPoint:
    scene = chart.view_box.mapViewToScene(QPointF(x, y))
    return chart.plot.mapFromScene(scene)


def wheel(chart, at: QPoint, steps: int) -> None:
    event = QWheelEvent(QPointF(at), QPointF(chart.plot.viewport().mapToGlobal(at)), QPoint(0, 0), QPoint(0, 120 * steps),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(chart.plot.viewport(), event)


def test_the_wheel_zooms_in_the_view_stays_while_data_arrives_and_reset_follows_again(qtbot):
    chart = shown_chart(qtbot, TimeSeriesChart(config.get("sysnest")))
    chart.add_records(summaries(100))
    drawn(qtbot, chart)
    (x0, x1), _ = chart.view_box.viewRange()
    assert x0 <= T0 and x1 >= T0 + 99 and not chart.zoomed
    wheel(chart, viewport_point(chart, T0 + 50, 130.0), 3)
    (z0, z1), _ = chart.view_box.viewRange()
    assert chart.zoomed
    assert z1 - z0 < 0.8 * (x1 - x0), (z0, z1, x0, x1)
    assert z0 < T0 + 50 < z1                                   # around the cursor
    assert chart.range_label.text().startswith("zoomed: ")
    chart.add_records(summaries(20, start=100))                # live data does not move a zoomed view
    drawn(qtbot, chart)
    assert chart.view_box.viewRange()[0] == pytest.approx([z0, z1])
    chart.reset_button.click()
    drawn(qtbot, chart, force=True)
    (r0, r1), _ = chart.view_box.viewRange()
    assert not chart.zoomed and r0 <= T0 and r1 >= T0 + 119
    first, last = time.strftime("%H:%M:%S", time.localtime(T0)), time.strftime("%H:%M:%S", time.localtime(T0 + 119))
    assert chart.range_label.text() == f"{first} – {last}"


def test_hovering_a_point_names_its_time_series_and_value(qtbot):
    chart = shown_chart(qtbot, TimeSeriesChart(config.get("sysnest")))
    records = summaries(30)
    chart.add_records(records)
    drawn(qtbot, chart)
    target = records[17]
    QTest.mouseMove(chart.plot.viewport(), viewport_point(chart, target["ts"], target["per_sec"]))
    qtbot.waitUntil(lambda: chart.hover_label.text() != "")
    clock = time.strftime("%H:%M:%S", time.localtime(target["ts"]))
    assert chart.hover_label.text() == f"{clock}  syscalls/s: {target['per_sec']:.0f}/s"
    assert list(chart.marker.getData()[0]) == [target["ts"]]


def test_a_paused_chart_does_not_change_while_records_arrive_and_catches_up_on_resume(qtbot):
    spec = config.get("sysnest")
    tab = MetricTab(spec)
    qtbot.addWidget(tab)
    tab.resize(900, 600)
    tab.show()
    tab.feed(summaries(10))
    tab.refresh()
    line = tab.chart.lines["syscalls/s"]
    before = [list(a) for a in line.getData()]
    tab.chart.pause_button.click()
    assert tab.chart.paused and tab.chart.pause_button.text() == "Resume"
    for i in range(10, 15):
        tab.feed(summaries(1, start=i))
        tab.refresh()
    assert [list(a) for a in line.getData()] == before
    assert "paused, 5 new records held" in tab.chart.range_label.text()
    tab.chart.pause_button.click()
    xs, ys = line.getData()
    assert list(xs) == [r["ts"] for r in summaries(15)]
    assert list(ys) == [r["per_sec"] for r in summaries(15)]
    assert "paused" not in tab.chart.range_label.text()


def test_biopwise_charts_read_and_write_rates_iops_and_latency_with_units_in_the_legend(qtbot):
    records = sample("biopwise")
    tab = fed_tab(qtbot, "biopwise", records)
    labels = [tab.chart_area.tabText(i) for i in range(tab.chart_area.count())]
    assert labels == ["block I/O", "read and write", "IOPS", "average latency", "latency over time"]
    by_label = dict(zip(labels, tab.charts, strict=True))
    summaries_ = [r for r in records if r["kind"] == "summary"]
    for label, fields, axis in (("read and write", ("read_bytes", "write_bytes"), r"read and write \(\w?i?B/s\)"),
                                ("IOPS", ("read_ios", "write_ios"), r"IOPS \(/s\)")):
        chart = by_label[label]
        chart.redraw(force=True)
        legend = [item[1].text for item in chart.legend.items]
        assert legend == ["read", "write"]                     # the unit is the axis's, scaled to its range
        assert re.fullmatch(axis, chart.value_axis.labelText), chart.value_axis.labelText
        for name, field in zip(("read", "write"), fields, strict=True):
            xs, ys = chart.lines[name].getData()
            assert list(ys) == pytest.approx([r[field] / r["interval_s"] for r in summaries_])
            assert list(xs) == [r["ts"] for r in summaries_]
    latency = by_label["average latency"]
    latency.redraw(force=True)
    assert list(latency.lines["average latency"].getData()[1]) == [r["avg_lat_us"] for r in summaries_]
    assert [item[1].text for item in latency.legend.items] == ["average latency"]
    assert latency.value_axis.labelText == "average latency (µs)"
    heat = by_label["latency over time"]
    heat.redraw(force=True)
    for hist in (r for r in records if r["kind"] == "hist" and r["name"] == "latency"):
        got = {0 if row == 0 else 1 << row: n for row, n in heat.counts[hist["interval"]].items()}
        assert got == {b["lo"]: b["count"] for b in hist["buckets"] if b["count"]}


def test_tcpconnlat_draws_failed_connects_in_their_own_colour(qtbot):
    spec = config.get("tcpconnlat")
    chart = shown_chart(qtbot, make_chart(spec))
    assert isinstance(chart, ScatterChart)
    events = [{"kind": "event", "interval": 1, "ts": T0 + i / 10, "latency_ms": 0.05 * (i + 1),
               "status": "failed" if i % 3 == 0 else "ok"} for i in range(9)]
    chart.add_records(events)
    drawn(qtbot, chart)
    assert set(chart.items) == {"ok", "failed"}
    assert chart.items["failed"].opts["symbolBrush"] == BAD
    assert chart.items["ok"].opts["symbolBrush"] != BAD
    assert list(chart.items["failed"].getData()[1]) == [e["latency_ms"] for e in events if e["status"] == "failed"]
    assert sorted(item[1].text for item in chart.legend.items) == ["failed", "ok"]
    # the hovered dot is the nearest event, to the millisecond
    e = events[4]
    QTest.mouseMove(chart.plot.viewport(), viewport_point(chart, e["ts"], e["latency_ms"]))
    qtbot.waitUntil(lambda: chart.hover_label.text() != "")
    stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"])) + f".{int(e['ts'] * 1000) % 1000:03d}"
    assert chart.hover_label.text() == f"{stamp}  ok: 250 µs"


def log2_bucket(us: int) -> int:
    """The bucket's lower bound by counting, not by bit tricks: 0 for 0-1, else the largest 2^k <= us."""
    if us < 2:
        return 0
    lo = 2
    while lo * 2 <= us:
        lo *= 2
    return lo


def test_tcpconnlat_heatmap_counts_each_intervals_connects_per_log2_bucket(qtbot):
    spec = config.get("tcpconnlat")
    heat = shown_chart(qtbot, make_chart(spec, chart=spec.more_charts[0]))
    assert isinstance(heat, HeatmapChart)
    latencies = {1: [0.003, 0.05, 0.06, 1.5], 2: [0.07], 4: [12.0, 13.0, 0.05]}     # ms; interval 3 has none
    records = []
    for interval, values in latencies.items():
        records += [{"kind": "event", "interval": interval, "ts": T0 + interval - 0.5, "latency_ms": v} for v in values]
        records.append({"kind": "summary", "interval": interval, "ts": T0 + interval})
    records.append({"kind": "summary", "interval": 3, "ts": T0 + 3})
    heat.add_records(records)
    drawn(qtbot, heat)
    expected: dict[tuple[int, int], int] = {}
    for interval, values in latencies.items():
        for v in values:
            key = (interval, log2_bucket(int(v * 1000)))
            expected[key] = expected.get(key, 0) + 1
    seen = {}
    for interval, row, lo in ((i, r, lo) for i in range(1, 5) for r in range(0, 16) for lo in [0 if r == 0 else 1 << r]):
        count = heat.counts.get(interval, {}).get(row, 0)
        if count:
            seen[(interval, lo)] = count
    assert seen == expected
    assert heat.image.image.shape[0] == 4                     # one column per interval, the empty one too
    assert heat.plot.getPlotItem().titleLabel.text.endswith("darkest 2")      # interval 4's 8-16 ms bucket
    # hover over the cell of interval 4's two 12-13 ms connects (bucket 8192-16383 us)
    x = T0 + 4 - 0.5
    import math
    row = int(math.log2(8192))
    QTest.mouseMove(heat.plot.viewport(), viewport_point(heat, x, row + 0.5))
    qtbot.waitUntil(lambda: heat.hover_label.text() != "")
    assert heat.hover_label.text().endswith("8K–16K µs: 2")


def test_cpuschedrun_heatmaps_hold_each_hist_record_bucket_for_bucket(qtbot):
    records = sample("cpuschedrun")
    tab = fed_tab(qtbot, "cpuschedrun", records)
    heatmaps = [c for c in tab.charts if isinstance(c, HeatmapChart)]
    assert [h.chart.series for h in heatmaps] == ["runq_latency", "run_time"]
    for heat in heatmaps:
        heat.redraw(force=True)
        hists = [r for r in records if r["kind"] == "hist" and r["name"] == heat.chart.series]
        assert hists
        for hist in hists:
            got = {lo: n for lo, n in ((0 if r == 0 else 1 << r, n) for r, n in heat.counts[hist["interval"]].items())}
            want = {b["lo"]: b["count"] for b in hist["buckets"] if b["count"]}
            assert got == want
        assert heat.image.image.shape[0] == len({h["interval"] for h in hists})


def test_drilling_into_a_process_filters_an_event_chart_and_says_when_a_chart_cannot(qtbot):
    events = [{"kind": "event", "interval": 1, "ts": T0 + i, "latency_ms": 0.1 * (i + 1), "status": "ok",
               "pid": 111 if i % 2 else 222} for i in range(10)]
    tab = fed_tab(qtbot, "tcpconnlat", events)
    scatter = tab.chart
    assert len(scatter.items["ok"].getData()[1]) == 10
    tab.show_process(111)
    assert list(scatter.items["ok"].getData()[1]) == [e["latency_ms"] for e in events if e["pid"] == 111]
    assert "process 111 only" in scatter.range_label.text()
    heat = tab.charts[1]
    assert "all processes (its records name none)" in heat.range_label.text()
    tab.show_process(None)
    assert len(scatter.items["ok"].getData()[1]) == 10
    assert "process" not in scatter.range_label.text()
