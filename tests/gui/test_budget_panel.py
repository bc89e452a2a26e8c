"""The overhead budget in the window (gui/budget_panel.py): its setting refused when 0, negative, over 100
or not a number, and remembered; the profiler's total against it and the cost chart's budget line; each
metric's cost in the metric list (measured while it runs, the bench's figure before); and, fed synthetic
overhead samples at chosen times (no clock, no metric), the costliest metric switched to its sampling
mode or stopped as chosen, with the note in its tab, the log and the controller's records."""

from __future__ import annotations

import json

from gui_fakes import FakeController, make_window
from PySide6.QtCore import QSettings

from gui.budget_panel import KEYS
from gui.recorded_cost import recorded_costs


def window_with(qtbot, tmp_path, **saved):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    for key, value in saved.items():
        settings.setValue(KEYS[key], value)
    settings.sync()
    controller = FakeController()
    window = make_window(qtbot, tmp_path, controller)
    window.sampler.sampling.stop()      # the samples are the test's, at the test's times
    return window, controller


def rows(cpus: int, **machine_pct: float) -> list[dict]:
    """An overhead sample whose metrics cost these shares of the machine (the rows are % of one CPU)."""
    found = [{"metric": m, "id": None, "type": "subtotal", "cpu_pct": v * cpus / 2, "proc_cpu_pct": v * cpus / 2,
              "total_cpu_pct": v * cpus} for m, v in machine_pct.items() if m != "app"]
    app = machine_pct.get("app", 0.0) * cpus
    return [*found, {"metric": "(this app)", "id": None, "type": "app", "cpu_pct": None, "proc_cpu_pct": app,
                     "total_cpu_pct": app}]


def log_text(window) -> str:
    window.log_panel.flush()
    return window.ui.log_view.toPlainText()


def test_a_budget_of_0_negative_over_100_or_not_a_number_is_refused_and_a_good_one_kept(qtbot, tmp_path):
    window, _ = window_with(qtbot, tmp_path)
    ui, panel = window.ui, window.budget
    assert ui.budget_edit.text() == "5" and panel.watch.budget_pct == 5.0         # the default
    assert ui.budget_action.currentData() == "warn" and panel.watch.hold_s == 10
    assert "budget 5 % of the machine's CPU" in ui.budget_state.text()
    for bad, says in (("0", "must be above 0"), ("-3", "must be above 0"), ("101", "at most 100"),
                      ("a lot", "is not a number")):
        ui.budget_edit.setText(bad)
        ui.budget_edit.editingFinished.emit()
        assert panel.watch.budget_pct == 5.0, bad
        assert "border" in ui.budget_edit.styleSheet() and says in ui.budget_edit.toolTip()
        assert says in ui.budget_state.text() and "the budget stays 5 %" in ui.budget_state.text()
    assert "budget refused: overhead budget 'a lot' is not a number" in log_text(window)
    ui.budget_edit.setText("2.5")
    ui.budget_edit.editingFinished.emit()
    assert panel.watch.budget_pct == 2.5 and ui.budget_edit.styleSheet() == ""
    assert window.overhead.chart.budget == 2.5 * panel.cpus
    ui.budget_action.setCurrentIndex(ui.budget_action.findData("stop"))
    assert panel.watch.action == "stop"
    window.save_settings()
    assert window.settings.value(KEYS["percent"]) in (2.5, "2.5") and window.settings.value(KEYS["action"]) == "stop"


def test_saved_settings_are_used_and_a_refused_one_is_said(qtbot, tmp_path):
    window, _ = window_with(qtbot, tmp_path, percent="0", action="stop", hold_s="3")
    assert (window.budget.watch.budget_pct, window.budget.watch.action, window.budget.watch.hold_s) == (5.0, "stop", 3.0)
    assert window.ui.budget_action.currentData() == "stop" and "over it for 3 s" in window.ui.budget_over_label.text()
    assert "settings: overhead budget 0: must be above 0 and at most 100 (% of the machine's CPU); the default, 5.0, is used" in log_text(window)


def test_the_costs_in_the_list_and_the_total_against_the_budget(qtbot, tmp_path):
    window, _ = window_with(qtbot, tmp_path, percent="1")
    cpus = window.budget.cpus
    bench = recorded_costs()
    assert window.items["sysnest"].text(2) == bench["sysnest"].text                  # before it starts
    assert window.items["cpuprofile"].text(2) == bench["cpuprofile"].text
    assert "BENCHMARKS.md" in window.items["sysnest"].toolTip(2)
    window.start_metric("sysnest", window.forms["sysnest"].validate()[0])
    sample = rows(cpus, sysnest=0.6, app=0.2)
    window.overhead_sampled(sample, now=100.0)
    assert window.items["sysnest"].text(2) == "0.60 %" and "machine's CPU" in window.items["sysnest"].toolTip(2)
    assert window.items["tcpconnlat"].text(2) == bench["tcpconnlat"].text          # not running: the bench's
    assert "the profiler now 0.80 % of the machine's CPU: within the 1 % budget" in window.ui.budget_state.text()
    window.overhead.show_sample(sample, "")
    assert list(window.overhead.chart.budget_points[1]) == [1.0 * cpus]              # in % of one CPU, as the chart
    window.overhead_sampled(rows(cpus, sysnest=1.5), now=101.0)
    assert "over the 1 % budget for 0 s" in window.ui.budget_state.text()
    window.stop_metric("sysnest")
    window.overhead_sampled(rows(cpus), now=102.0)
    assert window.items["sysnest"].text(2) == bench["sysnest"].text                  # stopped: the bench's again


def test_over_the_budget_the_costliest_metric_is_switched_to_its_sampling_mode(qtbot, tmp_path):
    window, controller = window_with(qtbot, tmp_path, percent="1", action="sample", hold_s="2")
    cpus = window.budget.cpus
    values = window.forms["sysnest"].validate()[0]
    for name in ("sysnest", "tcpconnlat"):
        window.start_metric(name, window.forms[name].validate()[0])
    for now in (10.0, 11.0):
        window.overhead_sampled(rows(cpus, sysnest=3.0, tcpconnlat=0.5, app=0.5), now=now)
    assert controller.notes == [] and controller.restarted == []                     # 1 s over: not yet
    window.overhead_sampled(rows(cpus, sysnest=3.0, tcpconnlat=0.5, app=0.5), now=12.0)
    [(name, note)] = controller.notes
    assert name == "sysnest" and (note["action"], note["args"], note["total_pct"]) == ("sample", {"sample": 8}, 4.0)
    assert controller.restarted == [("sysnest", {**values, "sample": 8})]
    window.refresh()
    tab = window.tab_for("sysnest")
    assert not tab.note_label.isHidden() and "switched to its sampling mode (sample 8)" in tab.note_label.text()
    assert note["text"] in log_text(window) and tab.state == "running"
    # tcpconnlat has no cheaper mode: 2 s later, still over, it is named in a warning instead
    for now in (13.0, 14.0):
        window.overhead_sampled(rows(cpus, sysnest=1.0, tcpconnlat=0.5, app=0.5), now=now)
    [_, (name, note)] = controller.notes
    assert name == "tcpconnlat" and (note["action"], note["asked"]) == ("warn", "sample")
    assert note["reason"] == "tcpconnlat has no cheaper mode" and len(controller.restarted) == 1
    window.refresh()
    assert "tcpconnlat has no cheaper mode" in window.tab_for("tcpconnlat").note_label.text()


def test_over_the_budget_the_costliest_metric_is_stopped_when_so_chosen(qtbot, tmp_path):
    window, controller = window_with(qtbot, tmp_path, percent="2", action="stop", hold_s="1")
    cpus = window.budget.cpus
    window.start_metric("offcpu", window.forms["offcpu"].validate()[0])
    window.overhead_sampled(rows(cpus, offcpu=1.0, app=1.5), now=0.0)
    window.overhead_sampled(rows(cpus, offcpu=0.4, app=1.5), now=0.5)       # a dip: the wait starts again
    for now in (1.0, 1.5):
        window.overhead_sampled(rows(cpus, offcpu=1.0, app=1.5), now=now)
    assert controller.stopped == []
    window.overhead_sampled(rows(cpus, offcpu=1.0, app=1.5), now=2.0)
    assert controller.stopped == ["offcpu"] and controller.notes[0][1]["action"] == "stop"
    window.refresh()
    tab = window.tab_for("offcpu")
    assert tab.state == "stopped" and tab.note_label.text().endswith("offcpu costs most (1.00 %): stopped")


def test_the_recorded_figures_come_from_the_bench_results(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"benchmarks": {
        "metric_overhead": {"date": "2026-11-22 03:57 UTC", "quick": True, "rows": [
            {"config": "bare", "kind": "bare", "slowdown_pct": {"median": 0.0}},
            {"config": "sysnest", "kind": "metric", "slowdown_pct": {"median": 18.7, "min": 16.1, "max": 24.8, "n": 5}},
            {"config": "all metrics", "kind": "all metrics", "slowdown_pct": {"median": 40.4}}]},
        "cpuprofile_overhead": {"date": "2026-11-24 10:05 UTC", "rows": [
            {"config": "cpuprofile -F 99", "cpu_cost_ms_per_s": 10.34},
            {"config": "cpuprofile -F 49", "cpu_cost_ms_per_s": 7.42}]}}}))
    found = recorded_costs(str(results))
    assert {name: cost.text for name, cost in found.items()} == {"sysnest": "bench +18.7 %", "cpuprofile": "bench 0.74 % CPU"}
    assert "+16.1 to +24.8" in found["sysnest"].tip and "a quick run: not a recorded figure" in found["sysnest"].tip
    assert "7.42 ms/s" in found["cpuprofile"].tip and "section 9, 2026-11-24 10:05 UTC" in found["cpuprofile"].tip
    assert recorded_costs(str(tmp_path / "none.json")) == {}
    results.write_text("{not json")
    assert recorded_costs(str(results)) == {}
