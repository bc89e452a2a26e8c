"""Export from a metric tab: the CSV holds exactly the rows the table shows (filtered, in its order, a
tree's groups each before its details, raw values), the PNG is the chart on screen, and the writing
happens off the GUI thread: a file that blocks on open (a FIFO nobody reads yet) leaves the window
responsive."""

import csv
import json
import os
import threading
import time

from helpers import ROOT
from PySide6.QtCore import QTimer
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog

import config
from gui.metric_tab import MetricTab
from gui.style import SERIES_COLOURS


def sample(name: str) -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", f"{name}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def tab_with(qtbot, name: str) -> tuple[MetricTab, list[dict]]:
    records = sample(name)
    tab = MetricTab(config.get(name))
    qtbot.addWidget(tab)
    tab.resize(900, 600)
    tab.show()
    tab.feed(records)
    tab.refresh()
    return tab, records


def read_csv(path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_csv_holds_the_filtered_rows_of_the_table_in_their_shown_order(qtbot, tmp_path):
    tab, records = tab_with(qtbot, "biopwise")
    last = max(r["interval"] for r in records if r["kind"] == "row")
    rows = [r for r in records if r["kind"] == "row" and r["interval"] == last]
    tab.filter_box.setText("540")                  # pids 5401, 5402... of the sample
    column = [f.name for f in tab.spec.fields].index("read_bytes")
    tab.table.sortByColumn(column, tab.table.horizontalHeader().sortIndicatorOrder().DescendingOrder)
    path = tmp_path / "rows.csv"
    with qtbot.waitSignal(tab.exporter.finished) as done:
        tab.export_csv(str(path))
    assert done.args[1] is True
    lines = read_csv(path)
    fields = tab.spec.fields
    assert lines[0][column] == "Read (bytes)" and lines[0][0] == "PID"
    wanted = sorted((r for r in rows if "540" in str(r["pid"])), key=lambda r: -r["read_bytes"])
    assert len(lines) - 1 == len(wanted) == tab.proxy.rowCount() > 0
    got_pids_bytes = [(int(line[0]), int(line[column])) for line in lines[1:]]
    assert sorted(got_pids_bytes, key=lambda p: -p[1]) == got_pids_bytes
    assert sorted(got_pids_bytes) == sorted((r["pid"], r["read_bytes"]) for r in wanted)
    by_pid = {r["pid"]: r for r in wanted}
    for line in lines[1:]:
        record = by_pid[int(line[0])]
        assert line == [str(record.get(f.name, "")) for f in fields]
    assert f"saved {len(wanted)} rows to {path}" in tab.footer.text()


def test_a_tree_exports_each_group_before_its_details(qtbot, tmp_path):
    tab, records = tab_with(qtbot, "sysnest")
    assert tab.views.currentWidget() is tab.tree
    path = tmp_path / "tree.csv"
    with qtbot.waitSignal(tab.exporter.finished):
        tab.export_csv(str(path))
    last = max(r["interval"] for r in records if r["kind"] == "row")
    rows = [r for r in records if r["kind"] == "row" and r["interval"] == last]
    lines = read_csv(path)[1:]
    assert len(lines) == len(rows)
    count = [f.name for f in tab.spec.fields].index("count")
    assert sorted(int(line[count]) for line in lines) == sorted(r["count"] for r in rows)


def test_csv_is_written_off_the_gui_thread(qtbot, tmp_path):
    """The target is a FIFO: opening it blocks until a reader comes (here 3 s later). export_csv returns
    at once and the window's timers keep firing while the write waits."""
    tab, _ = tab_with(qtbot, "biopwise")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Timer(3.0, lambda: got.append(fifo.read_text()))
    reader.start()
    started = time.monotonic()
    tab.export_csv(str(fifo))
    returned = time.monotonic() - started
    assert returned < 1.5, f"export_csv held the GUI thread {returned:.1f} s"
    ticked = []
    QTimer.singleShot(10, lambda: ticked.append(tab.exporter.thread.is_alive()))
    qtbot.waitUntil(lambda: bool(ticked), timeout=2500)
    assert ticked == [True]                    # the GUI ran a timer while the writer still waited
    with qtbot.waitSignal(tab.exporter.finished, timeout=10000) as done:
        pass
    reader.join(5)
    assert done.args[1] is True
    assert got and len(got[0].splitlines()) == tab.proxy.rowCount() + 1


def test_an_export_that_fails_says_why_in_one_line(qtbot, tmp_path):
    tab, _ = tab_with(qtbot, "biopwise")
    with qtbot.waitSignal(tab.exporter.finished) as done:
        tab.export_csv(str(tmp_path / "no such dir" / "rows.csv"))
    assert done.args[1] is False
    assert done.args[0].startswith("export failed: No such file or directory")
    assert "Traceback" not in tab.footer.text()


def test_save_png_from_the_dialog_writes_the_chart_on_screen(qtbot, tmp_path, monkeypatch):
    tab, _ = tab_with(qtbot, "biopwise")
    tab.chart_area.setCurrentIndex(1)          # read and write, drawn once it shows
    tab.refresh()
    qtbot.wait(50)
    path = tmp_path / "chart.png"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), "PNG image (*.png)"))
    shown = tab.shown_chart()                  # the chart area's page on screen, what the button saves
    assert shown is tab.chart_area.widget(1)
    with qtbot.waitSignal(tab.exporter.finished):
        tab.png_button.click()                 # the pixels are taken in the click, on the GUI thread
        at_click = shown.size()                # (the export's note may change the layout afterwards)
    image = QImage(str(path))
    assert not image.isNull()
    assert (image.width(), image.height()) == (at_click.width() * shown.devicePixelRatio(),
                                               at_click.height() * shown.devicePixelRatio())
    colours = {image.pixelColor(x, y).name() for x in range(0, image.width(), 2) for y in range(image.height())}
    assert {SERIES_COLOURS["read"], SERIES_COLOURS["write"]} <= colours     # both lines are in the picture
