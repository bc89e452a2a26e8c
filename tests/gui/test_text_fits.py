"""Text the window shows whole, or elided with the whole in a tooltip, never cut at a widget's edge:
the top functions' numbers ("Total" was past the pane's edge), the offcpu summary line, the reason
beside a PID, the overhead table, the cost chart's legend. Measured with each widget's font, at the
window's default size (1400x900), offscreen."""

from __future__ import annotations

import os
import re

import pytest
from gui_fakes import FakeController, make_window
from helpers import ROOT
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QStyle, QStyleOptionViewItem, QTableView

from gui.fitting import elided_cell
from gui.profile_panel import ProfilePanel


def settle(window) -> None:
    window.refresh()
    for _ in range(5):
        QApplication.processEvents()


def shown_text(label: QLabel) -> str:
    return label.shown_text() if hasattr(label, "shown_text") else label.text()


def label_fits(label: QLabel) -> None:
    """A label's text is all on show: one line within its width, or wrapped within its height with no
    word wider than the label."""
    assert label.isVisible(), label.objectName()
    width = label.contentsRect().width()
    metrics = label.fontMetrics()
    if label.wordWrap():
        assert label.heightForWidth(label.width()) <= label.height(), f"{label.text()!r} wraps past its height"
        longest = max(label.text().split(), key=metrics.horizontalAdvance)
        assert metrics.horizontalAdvance(longest) <= width, f"{longest!r} is wider than {width}px"
    else:
        text = shown_text(label)
        assert metrics.horizontalAdvance(text) <= width, f"{text!r} is {metrics.horizontalAdvance(text)}px in {width}px"
        if text != label.text():           # elided: every part of the whole text is in the tooltip
            tip = label.toolTip()
            parts = re.split(r"  ·  |:  ", label.text())
            assert text.endswith("…") and all(part in tip for part in parts), tip


def table_fits(view: QTableView, numeric: list[int]) -> None:
    """Every column within the view's width; each header line within its section; every number whole;
    a cell of the other columns whole or elided with the whole text as its tooltip."""
    header, model = view.horizontalHeader(), view.model()
    assert header.length() <= view.viewport().width(), (
        f"columns need {header.length()}px, the view shows {view.viewport().width()}px")
    margin = view.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin)
    for column in range(model.columnCount()):
        room = header.sectionSize(column) - 2 * margin
        text = model.headerData(column, Qt.Orientation.Horizontal)
        if header.isSortIndicatorShown() and column == header.sortIndicatorSection():
            room -= header.fontMetrics().height() * len(text.splitlines()) + margin
        for line in text.splitlines():
            assert header.fontMetrics().horizontalAdvance(line) <= room, f"header {line!r} in {room}px"
    option = QStyleOptionViewItem()
    for row in range(model.rowCount()):
        for column in range(model.columnCount()):
            index = model.index(row, column)
            option.rect = view.visualRect(index)
            whole = elided_cell(view, option, index)
            if column in numeric:
                assert whole is None, f"{index.data()!r} cut in column {model.headerData(column, Qt.Orientation.Horizontal)!r}"


@pytest.fixture
def offcpu_window(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path, FakeController(), show=True)
    window.session.open(os.path.join(ROOT, "tests", "samples", "offcpu.ndjson"))
    qtbot.waitUntil(lambda: bool(window.session.opened), timeout=10_000)
    qtbot.waitExposed(window)
    settle(window)
    return window


def test_the_top_functions_numbers_are_whole(offcpu_window):
    (panel,) = [c for c in offcpu_window.tabs["offcpu"].charts if isinstance(c, ProfilePanel)]
    panel.redraw(force=True)
    settle(offcpu_window)
    view = panel.top_table
    headers = [view.model().headerData(c, Qt.Orientation.Horizontal) for c in range(view.model().columnCount())]
    assert view.model().rowCount() > 10 and any(h.startswith("Total") for h in headers)
    table_fits(view, numeric=[i for i, h in enumerate(headers) if h.split()[0] in ("Self", "Total")])
    # the function names are elided where they must be, each with its whole name to hover
    option = QStyleOptionViewItem()
    names = [view.model().index(r, 0) for r in range(view.model().rowCount())]
    elided = []
    for index in names:
        option.rect = view.visualRect(index)
        elided += [elided_cell(view, option, index)] if elided_cell(view, option, index) else []
    assert all(name in {i.data() for i in names} for name in elided)
    assert view.columnWidth(0) >= 120, "the function column squeezed to nothing"


def test_the_offcpu_summary_line_fits_or_ends_in_an_ellipsis(offcpu_window):
    label = offcpu_window.tabs["offcpu"].summary_label
    assert len(label.text()) > 60
    label_fits(label)
    offcpu_window.resize(900, 700)                   # narrower: still no character cut at the edge
    settle(offcpu_window)
    label_fits(label)
    assert shown_text(label).endswith("…")


def test_the_reason_beside_a_pid_fits(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path, FakeController(), show=True)
    qtbot.waitExposed(window)
    window.select_metric("sysnest")
    form = window.forms["sysnest"]
    form.editors["pid"].setText("3999999")        # refused as typed (no such process) or, on a machine
    settle(window)                                # that has one, accepted: then the metric's own failure
    form.mark_named_argument("sysnest exited with status 2:\nusage: sysnest.py [-h] [-p PID] [interval]\n"
                             "sysnest.py: error: argument -p/--pid: no process 3999999")
    settle(window)
    label = form.errors["pid"]
    assert "no process 3999999" in label.text()
    label_fits(label)
    assert "usage:" in label.toolTip()              # the whole failure, a hover away


def test_the_overhead_table_and_the_cost_legend_fit(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path, FakeController(), show=True)
    rows = []
    for metric in ("sysnest", "cpuschedrun", "offcpu"):
        rows.append({"metric": metric, "id": 1234, "name": "sys_enter_raw", "type": "raw_tracepoint",
                     "run_cnt": 12_345_678, "runs_per_s": 123_456.7, "avg_ns": 1234.5, "cpu_pct": 12.34,
                     "proc_cpu_pct": None, "total_cpu_pct": 12.34, "pss_bytes": None})
        rows.append({"metric": metric, "id": None, "name": "2 programs and the process", "type": "subtotal",
                     "run_cnt": None, "avg_ns": None, "runs_per_s": 123_456.7, "cpu_pct": 12.34,
                     "proc_cpu_pct": 3.21, "pss_bytes": 123_456_789, "total_cpu_pct": 15.55})
    rows.append({"metric": "(this app)", "id": None, "name": "the window's process", "type": "app", "run_cnt": None,
                 "avg_ns": None, "runs_per_s": None, "cpu_pct": None, "proc_cpu_pct": 15.6, "pss_bytes": 234_567_890,
                 "total_cpu_pct": 15.6})
    for _ in range(3):
        window.overhead.show_sample(rows, "3 programs, 370,370 runs/s, 37.02% of one CPU; processes 25.2% of one "
                                          "CPU, PSS 590.1 MiB (the metrics and this window)")
    tabs = window.ui.bottom_tabs
    tabs.setCurrentWidget(window.ui.overhead_table.parentWidget())
    qtbot.waitExposed(window)
    settle(window)
    view = window.ui.overhead_table
    headers = [view.model().headerData(c, Qt.Orientation.Horizontal) for c in range(view.model().columnCount())]
    text_columns = [i for i, h in enumerate(headers) if h in ("Metric", "Program", "Type")]
    table_fits(view, numeric=[i for i in range(len(headers)) if i not in text_columns])
    label_fits(window.ui.overhead_status)
    tabs.setCurrentWidget(window.ui.overhead_chart_host)
    settle(window)
    chart = window.overhead.chart
    legend = chart.findChild(QLabel, "cost_legend")
    assert legend is not None, "the legend is drawn on the plot, over its lines"
    label_fits(legend)
    assert not legend.geometry().intersects(chart.plot.geometry())
    for entry in ("total (% of one CPU)", "BPF programs", "metric processes and window"):
        assert legend.fontMetrics().horizontalAdvance(entry) <= legend.contentsRect().width()
        assert entry.replace(" ", "\u00a0") in legend.text().replace("&nbsp;", "\u00a0")
