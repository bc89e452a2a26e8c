"""One time range across the window (issue 19): a wheel zoom or a drag on one chart over time shows the
same range on every chart over time in every metric tab, Reset zoom on one makes all follow live data
again, a histogram (x in buckets, not time) never moves, and a range set by the link is not spread again."""

import pytest
from gui_fakes import make_window
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from test_chart_interaction import T0, drawn, sample, summaries, viewport_point, wheel

import config
from gui.charts import HeatmapChart, HistogramChart, ScatterChart, TimeSeriesChart
from gui.metric_tab import MetricTab
from gui.time_link import TimeLink


def connects(n: int) -> list[dict]:
    records = []
    for i in range(n):
        records.append({"kind": "event", "interval": i + 1, "ts": T0 + i + 0.5, "latency_ms": 0.1 * (1 + i % 5),
                        "status": "ok", "pid": 100})
        records.append({"kind": "summary", "interval": i + 1, "ts": T0 + i + 1})
    return records


def shown_tab(qtbot, name: str, link: TimeLink, records: list[dict]) -> MetricTab:
    tab = MetricTab(config.get(name), time_link=link)
    qtbot.addWidget(tab)
    tab.resize(900, 600)
    tab.show()
    qtbot.waitExposed(tab)
    tab.feed(records)
    tab.refresh()
    for chart in tab.live_charts():
        chart.redraw(force=True)
    drawn(qtbot, tab.chart, force=True)
    return tab


@pytest.fixture
def tabs(qtbot):
    link = TimeLink()
    sysnest = shown_tab(qtbot, "sysnest", link, summaries(100))
    tcp = shown_tab(qtbot, "tcpconnlat", link, connects(100))
    sched = shown_tab(qtbot, "cpuschedrun", link, sample("cpuschedrun"))
    return link, sysnest, tcp, sched


def x_range(chart) -> list[float]:
    return list(chart.view_box.viewRange()[0])


def test_a_wheel_zoom_on_one_chart_shows_the_same_time_range_on_every_chart_over_time(qtbot, tabs):
    link, sysnest, tcp, sched = tabs
    series, scatter, heat = sysnest.chart, tcp.charts[0], tcp.charts[1]
    assert isinstance(series, TimeSeriesChart) and isinstance(scatter, ScatterChart) and isinstance(heat, HeatmapChart)
    histogram = sched.chart
    assert isinstance(histogram, HistogramChart) and histogram not in link.charts
    sched_heatmaps = [c for c in sched.charts if isinstance(c, HeatmapChart)]
    assert len(sched_heatmaps) == 2 and all(h in link.charts for h in sched_heatmaps)
    histogram_before = x_range(histogram)
    full = x_range(scatter)
    assert not scatter.zoomed and full[0] <= T0 + 0.5 and full[1] >= T0 + 99.5

    calls = []
    spread = link.zoomed
    link.zoomed = lambda *a: (calls.append(a), spread(*a))
    wheel(series, viewport_point(series, T0 + 50, 130.0), 3)
    zoomed = x_range(series)
    assert series.zoomed and zoomed[1] - zoomed[0] < 0.8 * (full[1] - full[0])
    assert len(calls) == 1                     # the charts the link moved did not spread it again
    for chart in [scatter, heat, *sched_heatmaps]:
        assert chart.zoomed
        assert x_range(chart) == pytest.approx(zoomed, abs=1e-6)
    assert scatter.range_label.text().startswith("zoomed: ")
    assert x_range(histogram) == histogram_before and not histogram.zoomed

    tcp.feed(connects(120)[200:])                 # live data does not move the shared range
    tcp.refresh()
    drawn(qtbot, scatter)
    assert x_range(scatter) == pytest.approx(zoomed, abs=1e-6)

    scatter.reset_button.click()                  # reset on another chart than the zoomed one
    for chart in [series, scatter, heat, *sched_heatmaps]:
        assert not chart.zoomed
    drawn(qtbot, scatter, force=True)
    drawn(qtbot, series, force=True)
    s0, s1 = x_range(scatter)
    assert s0 <= T0 + 0.5 and s1 >= T0 + 119.5    # following its data again, the new connects too
    r0, r1 = x_range(series)
    assert r0 <= T0 and r1 >= T0 + 99
    assert x_range(histogram) == histogram_before and not histogram.zoomed
    assert link.range is None


def test_a_drag_along_time_pans_every_chart_over_time(qtbot, tabs):
    link, sysnest, tcp, _ = tabs
    series, scatter = sysnest.chart, tcp.charts[0]
    wheel(scatter, viewport_point(scatter, T0 + 50, 0.3), 3)
    before = x_range(series)
    assert before == pytest.approx(x_range(scatter), abs=1e-6)
    start = viewport_point(series, T0 + 50, 130.0)
    QTest.mousePress(series.plot.viewport(), Qt.MouseButton.LeftButton, pos=start)
    for dx in range(10, 110, 10):
        QTest.mouseMove(series.plot.viewport(), start + QPoint(dx, 0))
    QTest.mouseRelease(series.plot.viewport(), Qt.MouseButton.LeftButton, pos=start + QPoint(100, 0))
    after = x_range(series)
    assert after[0] < before[0]                    # dragged right: earlier times come into view
    assert after[1] - after[0] == pytest.approx(before[1] - before[0], rel=1e-6)
    assert x_range(scatter) == pytest.approx(after, abs=1e-6)
    assert link.range == pytest.approx(after, abs=1e-6)


def test_unlinked_charts_zoom_alone_and_a_chart_that_joins_later_takes_the_shared_range(qtbot, tabs):
    link, sysnest, tcp, _ = tabs
    series, scatter = sysnest.chart, tcp.charts[0]
    link.set_enabled(False)
    wheel(series, viewport_point(series, T0 + 50, 130.0), 3)
    assert series.zoomed and not scatter.zoomed
    series.reset_button.click()
    link.set_enabled(True)
    wheel(series, viewport_point(series, T0 + 50, 130.0), 3)
    late = MetricTab(config.get("biopwise"), time_link=link)
    qtbot.addWidget(late)
    assert late.time_charts() and all(c.zoomed for c in late.time_charts())
    assert x_range(late.chart) == pytest.approx(x_range(series), abs=1e-6)


def test_the_window_links_its_tabs_time_charts_behind_a_checkbox(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path)
    assert window.link_box.text() == "Link time axes" and window.link_box.isChecked()
    sysnest, tcp = window.tab_for("sysnest"), window.tab_for("tcpconnlat")
    assert set(window.time_link.charts) == {sysnest.chart, *tcp.time_charts()}
    window.link_box.setChecked(False)
    assert not window.time_link.enabled
    window.link_box.setChecked(True)
    window.close_tab(window.ui.metric_tabs.indexOf(tcp))
    assert window.time_link.charts == [sysnest.chart]
