"""Tables, charts and the window's handling of what the controller reports, with recorded samples and a
fake controller: every registry entry gets the chart it declares and it draws the sample; tables show
the latest interval and sort numerically; updates are batched and bounded; a failure shows in place."""

import dataclasses
import json
import os
import time

import pytest
from gui_fakes import FakeController, make_window
from helpers import ROOT
from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QLabel

import config
from gui.charts import CHARTS, HistogramChart, ScatterChart, TimeSeriesChart, make_chart
from gui.forms import ArgForm
from gui.metric_tab import MetricTab
from gui.models import SORT_ROLE, RecordTableModel, format_value, header_label
from gui.profile_panel import ProfilePanel


def sample(name: str) -> list[dict]:
    path = os.path.join(ROOT, "tests", "samples", f"{name}.ndjson")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def chart_points(chart) -> int:
    if isinstance(chart, TimeSeriesChart):
        return sum(len(xs) for xs, _ in chart.points.values())
    if isinstance(chart, HistogramChart):
        return len((chart.latest or {}).get("buckets", []))
    if isinstance(chart, ScatterChart):
        return len(chart.events)
    if isinstance(chart, ProfilePanel):
        return len(chart.store.whole)
    raise AssertionError(type(chart))


@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_each_metric_gets_its_declared_chart_and_table_from_its_sample(qtbot, spec):
    records = sample(spec.name)
    tab = MetricTab(spec)
    qtbot.addWidget(tab)
    tab.resize(900, 600)
    tab.show()
    assert isinstance(tab.chart, CHARTS[spec.chart.kind])
    tab.feed(records)
    tab.refresh()
    charted = [r for r in records if tab.chart.wants(r)]
    assert not records or charted, f"{spec.name}: its sample has no {spec.chart.record_kind} records to chart"
    assert chart_points(tab.chart) > 0, f"{spec.name}: chart drew nothing from {len(charted)} records"
    assert tab.chart.redraws == 1
    headers = [tab.model.headerData(i, Qt.Orientation.Horizontal) for i in range(tab.model.columnCount())]
    assert len(headers) == len(spec.fields)
    table_records = [r for r in records if r["kind"] == spec.table_kind]
    if table_records:
        assert tab.model.rowCount() > 0
        present = set().union(*(set(r) for r in tab.model.rows))
        assert {f.name for f in spec.fields} <= present, f"{spec.name}: a declared field is in no row"


def test_a_row_table_shows_the_latest_interval_and_sorts_by_number(qtbot):
    spec = config.get("sysnest")
    records = sample("sysnest")
    model = RecordTableModel(spec)
    model.add_records(records)
    last = max(r["interval"] for r in records if r["kind"] == "row")
    expected = [r for r in records if r["kind"] == "row" and r["interval"] == last]
    assert model.rows == expected and model.interval == last
    proxy = QSortFilterProxyModel()
    proxy.setSourceModel(model)
    proxy.setSortRole(SORT_ROLE)
    column = [f.name for f in spec.fields].index("count")
    proxy.sort(column, Qt.SortOrder.DescendingOrder)
    shown = [proxy.data(proxy.index(row, column), SORT_ROLE) for row in range(proxy.rowCount())]
    assert shown == sorted((r["count"] for r in expected), reverse=True)
    text = proxy.data(proxy.index(0, column), Qt.ItemDataRole.DisplayRole)
    assert text == f"{max(shown):,}"


def test_an_event_table_keeps_the_newest_events_first_and_is_bounded():
    spec = dataclasses.replace(config.get("sysnest"), table_kind="event")
    model = RecordTableModel(spec, max_rows=100)
    model.add_records([{"kind": "event", "interval": 1, "count": i} for i in range(250)])
    assert model.rowCount() == 100
    assert [r["count"] for r in model.rows[:3]] == [249, 248, 247]


def test_charts_keep_a_bounded_history(qtbot):
    spec = config.get("sysnest")
    chart = TimeSeriesChart(spec, history=50)
    qtbot.addWidget(chart)
    chart.add_records([{"kind": "summary", "ts": 1000.0 + i, "per_sec": float(i)} for i in range(500)])
    chart.redraw(force=True)
    xs, ys = chart.points[spec.chart.label]
    assert len(xs) == 50 and list(ys)[-1] == 499.0
    line = chart.lines[spec.chart.label]
    assert len(line.getData()[0]) == 50


def test_a_histogram_draws_the_latest_interval_of_its_named_histogram(qtbot):
    spec = dataclasses.replace(config.get("sysnest"), chart=config.Chart("histogram", y="count", record_kind="hist",
                                                                         series="run_time", unit="us"))
    chart = make_chart(spec)
    qtbot.addWidget(chart)
    buckets = [{"lo": 1 << i, "hi": (2 << i) - 1, "count": c} for i, c in enumerate([3, 9, 27, 5])]
    chart.add_records([
        {"kind": "hist", "interval": 1, "name": "run_time", "unit": "us", "buckets": buckets[:2]},
        {"kind": "hist", "interval": 2, "name": "run_time", "unit": "us", "buckets": buckets},
        {"kind": "hist", "interval": 2, "name": "wait_time", "unit": "us", "buckets": buckets[:1]},
    ])
    chart.redraw(force=True)
    assert list(chart.bars.opts["height"]) == [3, 9, 27, 5]
    ticks = chart.plot.getAxis("bottom")._tickLevels[0]
    assert [t[1] for t in ticks] == ["1", "2", "4", "8"]


def test_values_are_formatted_by_unit():

    assert format_value(1234567) == "1,234,567"
    assert format_value(3 * 1024 * 1024, "bytes") == "3.0 MiB" and format_value(512, "bytes") == "512 B"
    # identifiers are names, not quantities: no separators
    assert format_value(26712, "", "pid") == "26712" and format_value(5999, "", "lport") == "5999"
    assert format_value(26712, "count", "runs") == "26,712"
    # each unit once: in the header, or in the cell for bytes, never both
    assert header_label("CPU%", "pct") == "CPU%" and header_label("Share", "pct") == "Share (%)"
    assert header_label("Read", "bytes") == "Read" and header_label("Run", "ms") == "Run (ms)"
    assert format_value(2.345) == "2.345" and format_value(12.34) == "12.3" and format_value(12345.6) == "12,346"
    assert format_value(None) == "" and format_value(True) == "yes"


def test_records_are_applied_in_batches_not_per_signal(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.set_checked(["sysnest"])
    assert window.start_checked() == ["sysnest"]
    tab = window.tabs["sysnest"]
    resets = []
    tab.model.modelReset.connect(lambda: resets.append(1))
    window.refresh_timer.stop()                    # drive refresh by hand
    start = time.monotonic()
    for i in range(200):                           # 20,000 records in 200 signals
        fake.records.emit("sysnest", [{"metric": "sysnest", "kind": "row", "interval": i, "ts": 1.0 * i, "count": j,
                                        "pid": j, "comm": "x"} for j in range(100)])
    emitted = time.monotonic() - start
    assert resets == [], "the table changed before the timer applied the batch"
    start = time.monotonic()
    window.refresh()
    applied = time.monotonic() - start
    assert len(resets) == 1
    assert tab.model.interval == 199 and tab.model.rowCount() == 100
    assert tab.records_seen == 20_000
    # the GUI thread's cost of 20,000 records: queueing plus one refresh, far below a frame budget per record
    assert emitted + applied < 2.0, f"{emitted:.3f}s to queue, {applied:.3f}s to apply"


def test_a_failed_metric_shows_its_error_in_place_and_the_others_keep_running(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    names = [s.name for s in config.METRICS][:2]
    window.set_checked(names)
    assert window.start_checked() == names
    failed, other = names
    fake.crash(failed, 1, f"{failed}: error: could not load {failed}.c")
    tab = window.tabs[failed]
    assert tab.state == "failed"
    assert tab.error_label.isVisible() and f"could not load {failed}.c" in tab.error_label.text()
    assert window.items[failed].text(1) == "failed"
    assert window.tabs[other].state == "running" and window.items[other].text(1) == "running"
    assert window.running == {other}
    window.refresh()
    assert f"{failed}: FAILED (exit status 1)" in window.ui.log_view.toPlainText()
    window.tabs[other].stop_button.click()
    assert fake.stopped == [other] and window.tabs[other].state == "stopped"


def test_the_transport_panel_shows_the_controllers_status(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    fake.transport_status.emit({"buffered": 12, "sent_batches": 1234, "sent_records": 56789, "pending_outbox": 3,
                                "dropped": 7, "last_error": "connection refused", "reachable": False,
                                "url": "http://127.0.0.1:9"})
    labels = window.ui.transport_labels
    assert labels["reachable"].text() == "● unreachable"
    assert labels["sent"].text() == "1,234 batches, 56,789 records"
    assert labels["pending_outbox"].text() == "3 batches" and labels["buffered"].text() == "12 records"
    assert labels["dropped"].text() == "7" and labels["last_error"].text() == "connection refused"
    window.ui.server_url.setText("http://127.0.0.1:5001")
    window.ui.server_token.setText("tok")
    window.ui.apply_server_button.click()
    assert fake.server == ("http://127.0.0.1:5001", "tok")


def test_remote_text_is_plain_and_the_saved_token_private(qtbot, tmp_path):
    """The collector's reason is the collector's text: shown as it is, never as markup; the settings
    file that keeps the token is the user's alone."""
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    reason = 'HTTP 400 <img src="http://attacker/x"><b>bold</b>'
    fake.transport_status.emit({"last_error": reason, "reachable": True, "url": "http://127.0.0.1:9"})
    label = window.ui.transport_labels["last_error"]
    assert label.textFormat() == Qt.TextFormat.PlainText and label.text() == reason
    settings = tmp_path / "settings.ini"
    settings.write_text("")
    os.chmod(settings, 0o644)  # as an earlier version left it
    window.ui.server_token.setText("s3cret-token")
    window.save_settings()
    assert "s3cret-token" in settings.read_text() and os.stat(settings).st_mode & 0o777 == 0o600


def test_the_log_is_bounded_and_timestamped(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.refresh_timer.stop()
    for i in range(3000):
        fake.log.emit("sysnest", f"line {i}")
    window.refresh()
    text = window.ui.log_view.toPlainText().splitlines()
    assert "log lines skipped" in text[0]
    assert text[-1].endswith("line 2999") and time.strftime("%H:") in text[-1]
    for i in range(3):
        for j in range(1000):
            fake.log.emit("", f"more {i} {j}")
        window.refresh()
    assert window.ui.log_view.document().blockCount() <= 5000


def test_closing_the_window_stops_everything_and_restores_bpf_stats(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.set_checked(["sysnest"])
    window.start_checked()
    window.close()
    assert fake.shut_down and fake.running() == []
    assert window.stats_switch.state == "off"
    assert not window.sampler.sampling.running


def test_a_collector_url_without_a_scheme_is_fixed_and_another_refused_in_the_form(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.ui.server_url.setText("127.0.0.1:5055")
    window.ui.apply_server_button.click()
    assert fake.server == ("http://127.0.0.1:5055", None)
    assert window.ui.server_url.text() == "http://127.0.0.1:5055"
    # the transport's one line, then cleared once delivery works again
    label = window.ui.transport_labels["last_error"]
    fake.transport_status.emit({"last_error": "collector unreachable: connection refused (127.0.0.1:5055)",
                                "reachable": False, "url": "http://127.0.0.1:5055"})
    assert label.text() == "collector unreachable: connection refused (127.0.0.1:5055)"
    fake.transport_status.emit({"last_error": "", "reachable": True, "url": "http://127.0.0.1:5055"})
    assert label.text() == "none"
    window.ui.server_url.setText("ftp://127.0.0.1:5055")
    window.ui.apply_server_button.click()
    assert fake.server == ("http://127.0.0.1:5055", None)          # refused: not applied
    assert "http://" in window.ui.server_url.toolTip() and window.ui.server_url.styleSheet()
    assert label.text() == "collector URL must start with http:// or https://, not ftp://"   # in the panel too


def test_form_labels_are_written_for_people(qtbot):
    form = ArgForm(config.get("sysnest"))
    qtbot.addWidget(form)
    texts = {name: label.text() for name, label in form.labels.items()}
    assert texts["details_top"] == "Members per group" and texts["pid"] == "PID"
    assert all("_" not in t for t in texts.values()), texts


def test_every_tab_has_a_filter_box_over_its_table(qtbot):
    for spec in config.METRICS:
        tab = MetricTab(spec)
        qtbot.addWidget(tab)
        assert tab.filter_box.placeholderText().startswith("Filter rows")
    tab = MetricTab(config.get("sysnest"))
    qtbot.addWidget(tab)
    records = sample("sysnest")
    tab.feed(records)
    tab.refresh()
    rows = tab.model.rows
    assert len(rows) > 1
    comm = rows[-1]["comm"]
    qtbot.keyClicks(tab.filter_box, comm.upper())           # any column, any case
    fields = config.get("sysnest").fields
    wanted = [r for r in rows
              if any(comm.lower() in format_value(r.get(f.name), f.unit, f.name).lower() for f in fields)]
    assert tab.proxy.rowCount() == len(wanted) < len(rows)
    column = [f.name for f in config.get("sysnest").fields].index("comm")
    shown = {tab.proxy.data(tab.proxy.index(i, column)) for i in range(tab.proxy.rowCount())}
    assert comm in shown
    tab.filter_box.clear()
    assert tab.proxy.rowCount() == len(rows)


def test_a_failed_metric_shows_its_reason_once_marks_the_field_it_names_and_offers_retry(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.set_checked(["tcpconnlat"])
    assert window.start_checked() == ["tcpconnlat"]
    reason = "tcpconnlat: error: argument --lport: no socket listens on 5999"
    fake.crash("tcpconnlat", 2, reason)
    tab = window.tabs["tcpconnlat"]
    window.log_panel.flush()
    shown = [w.text() for w in tab.findChildren(QLabel) if w.isVisible()]
    assert sum(reason in text for text in shown) == 1                        # once, in the tab
    assert reason not in window.log_panel.view.toPlainText()                   # the log points to the tab
    assert window.forms["tcpconnlat"].error_text("lport") == reason          # the field it names
    assert tab.retry_button.isVisible()
    started = len(fake.started)
    tab.retry_button.click()
    assert len(fake.started) == started + 1 and tab.state != "failed" and not tab.retry_button.isVisible()


def test_group_and_detail_rows_are_a_tree_sorted_within_levels(qtbot):
    tab = MetricTab(config.get("sysnest"))
    qtbot.addWidget(tab)
    tab.feed(sample("sysnest"))
    tab.refresh()
    assert tab.views.currentWidget() is tab.tree
    rows = tab.model.rows
    groups = [r for r in rows if r["level"] == "group"]
    column = [f.name for f in config.get("sysnest").fields].index("count")
    tab.tree.sortByColumn(column, Qt.SortOrder.DescendingOrder)
    proxy = tab.tree_proxy
    assert proxy.rowCount() == len(groups)
    top = [proxy.index(i, column).data(SORT_ROLE) for i in range(proxy.rowCount())]
    assert top == sorted((g["count"] for g in groups), reverse=True)
    pid_col = [f.name for f in config.get("sysnest").fields].index("pid")
    for i in range(proxy.rowCount()):
        parent = proxy.index(i, 0)
        pid = proxy.index(i, pid_col).data(SORT_ROLE)
        children = [proxy.index(j, column, parent).data(SORT_ROLE) for j in range(proxy.rowCount(parent))]
        assert children == sorted(children, reverse=True)                     # sorted within its group
        assert {proxy.index(j, pid_col, parent).data(SORT_ROLE) for j in range(proxy.rowCount(parent))} <= {pid}
    assert sum(proxy.rowCount(proxy.index(i, 0)) for i in range(proxy.rowCount())) == len(rows) - len(groups)


def test_a_process_drilled_into_in_one_tab_filters_every_tab(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.set_checked(["sysnest", "pagefault"])
    assert window.start_checked() == ["sysnest", "pagefault"]
    for name in ("sysnest", "pagefault"):
        fake.records.emit(name, sample(name))
    window.refresh()
    sysnest, pagefault = window.tabs["sysnest"], window.tabs["pagefault"]
    pid = sysnest.model.rows[-1]["pid"]        # the samples were recorded apart: pagefault may have none
    column = [key for key, _, _ in sysnest.model.columns].index("pid")
    row = next(i for i in range(sysnest.proxy.rowCount()) if sysnest.proxy.index(i, column).data(SORT_ROLE) == pid)
    sysnest._drill(sysnest.proxy.index(row, column))            # as a double-click on that row
    for tab in (sysnest, pagefault):
        pid_col = [key for key, _, _ in tab.model.columns].index("pid")
        shown = {tab.proxy.index(i, pid_col).data(SORT_ROLE) for i in range(tab.proxy.rowCount())}
        assert shown <= {pid} and not tab.drill_button.isHidden()
        assert tab.proxy.rowCount() == sum(r["pid"] == pid for r in tab.model.rows) < len(tab.model.rows)
    assert sysnest.proxy.rowCount() > 0
    pagefault.drill_button.click()                              # every tab back to every row
    assert sysnest.proxy.rowCount() == len(sysnest.model.rows) and sysnest.drill_button.isHidden()


def test_a_summary_line_reads_labels_and_scaled_units():
    """The headline: the key figure, then each summary field by its declared label, times scaled to
    their size (23,232,972,638 ns is 23.2 s), identifiers as they are."""
    text = config.get("offcpu").summary_text({"kind": "summary", "total_time_ns": 23232972638, "total_events": 1583,
                                              "interval_s": 1.005, "pid": 26712})
    assert text == "23.1 s/s blocked  ·  Blocked 23.2 s  ·  Blocks 1,583  ·  Interval length 1.005 s  ·  PID 26712"
