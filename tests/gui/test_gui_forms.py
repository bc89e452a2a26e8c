"""The argument forms: one builds for every registry entry, bad values are refused with the reason next to
the field before anything starts, and values survive a restart (QSettings)."""


import dataclasses
import os
import time

import pytest
from gui_fakes import FakeController, make_window
from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication, QCheckBox, QComboBox, QLineEdit

import config
from gui.forms import ArgForm
from host import preflight

WIDGET_FOR = {"int": QLineEdit, "choice": QComboBox, "flag": QCheckBox, "float": QLineEdit, "str": QLineEdit}


@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_every_registry_entry_builds_its_form(qtbot, spec):
    form = ArgForm(spec)
    qtbot.addWidget(form)
    shown = [a for a in spec.args if a.form]      # not the script-only options (offcpu --folded)
    assert list(form.editors) == [a.name for a in shown]
    for arg in shown:
        editor = form.editors[arg.name]
        assert isinstance(editor, WIDGET_FOR[arg.type]), f"{spec.name}.{arg.name}: {type(editor).__name__}"
        assert arg.help in editor.toolTip()
    values, errors = form.validate()
    assert errors == {}, f"{spec.name}: the registry defaults are refused: {errors}"
    argv = spec.command(values)                 # what the controller will run
    assert argv[1] == spec.path and argv[-1] == "--json"


def test_required_arguments_are_marked_and_refused_when_empty(qtbot):
    spec = dataclasses.replace(config.get("sysnest"), args=(
        config.Arg("target", "--target", "int", "a required number", required=True, minimum=1),
        config.Arg("mode", "--mode", "choice", "a required choice", required=True, choices=("a", "b")),
    ))
    form = ArgForm(spec)
    qtbot.addWidget(form)
    form.show()
    assert form.labels["target"].text().endswith("*") and form.labels["mode"].text().endswith("*")
    _, errors = form.validate()
    assert errors == {"target": "target is required"}
    assert form.error_text("target") == "target is required"
    form.editors["target"].setText("5")
    assert form.validate()[1] == {}
    assert form.error_text("target") == ""


@pytest.mark.parametrize("text, reason", [
    ("abc", "interval must be a number"),
    ("0", "interval must be at least 0.01"),
    ("99999", "interval must be at most 3600"),
    ("nan", "interval must be a finite number"),     # NaN compares false with both bounds
    ("inf", "interval must be a finite number"),
    ("1e400", "interval must be a finite number"),   # overflows to inf
])
def test_a_bad_value_is_refused_with_the_reason_next_to_its_field(qtbot, text, reason):
    form = ArgForm(config.get("sysnest"))
    qtbot.addWidget(form)
    form.resize(500, 600)
    form.show()
    editor = form.editors["interval"]
    editor.setText(text)                        # checked as it is typed ...
    error = form.errors["interval"]
    assert error.isVisible() and error.text() == reason
    assert abs(error.geometry().center().y() - editor.geometry().center().y()) <= 4   # on the field's row
    assert error.geometry().left() >= editor.geometry().right()                        # to its right
    values, errors = form.validate()            # ... and again before a start
    assert errors == {"interval": reason} and "interval" not in values
    editor.setText("2.5")
    assert not error.isVisible() and form.validate()[1] == {}


def test_the_window_starts_nothing_while_a_checked_form_is_invalid(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake)
    names = [s.name for s in config.METRICS][:2]
    window.set_checked(names)
    bad = names[-1]
    interval = window.forms[bad].editors.get("interval")
    assert isinstance(interval, QLineEdit), f"{bad} has no interval field"
    interval.setText("-1")
    assert window.start_checked() == []
    assert fake.started == [], "a metric started although another checked one was invalid"
    assert window.forms[bad].error_text("interval") == "interval must be at least 0.01"
    assert window.ui.arg_stack.currentWidget() is window.forms[bad], "the invalid form is not the one shown"
    assert "fix the marked arguments" in window.statusBar().currentMessage()
    interval.setText("0.5")
    assert window.start_checked() == names
    assert [n for n, _ in fake.started] == names
    assert dict(fake.started)[bad]["interval"] == 0.5


def test_a_value_the_controller_refuses_is_shown_in_place(qtbot, tmp_path):
    fake = FakeController(refuse={"sysnest": "pid 77 does not exist"})
    window = make_window(qtbot, tmp_path, fake)
    window.set_checked(["sysnest"])
    assert window.start_checked() == []
    form = window.forms["sysnest"]
    assert form.message.text() == "not started: pid 77 does not exist"
    assert window.tabs["sysnest"].state == "failed"
    assert window.items["sysnest"].text(1) == "failed"


def test_values_server_and_checked_metrics_are_remembered(qtbot, tmp_path):
    first = make_window(qtbot, tmp_path)
    form = first.forms["sysnest"]
    form.editors["interval"].setText("2.5")
    form.editors["top"].setText("25")
    form.editors["pid"].setText(str(os.getpid()))       # a process that exists (a pid that does not is refused)
    form.editors["group_by"].setCurrentText("syscall")
    form.editors["milliseconds"].setChecked(True)
    first.ui.server_url.setText("http://127.0.0.1:5999")
    first.ui.server_token.setText("s3cret")
    first.set_checked(["sysnest"])
    first.close()

    second = make_window(qtbot, tmp_path)
    values = second.forms["sysnest"].validate()[0]
    assert values["interval"] == 2.5 and values["top"] == 25 and values["pid"] == os.getpid()
    assert values["group_by"] == "syscall" and values["milliseconds"] is True
    assert values["count"] is None, "an unset optional value came back set"
    assert second.ui.server_url.text() == "http://127.0.0.1:5999"
    assert second.ui.server_token.text() == "s3cret"
    assert second.checked() == ["sysnest"]


def test_a_metric_the_preflight_rejects_is_disabled_with_the_reason(qtbot, tmp_path):
    verdicts = preflight.metric_verdicts()
    rejected = dataclasses.replace(verdicts[0], runnable=False, reason="missing tracepoints: raw_syscalls:sys_enter")
    window = make_window(qtbot, tmp_path, None, verdicts=[rejected, *verdicts[1:]])
    item = window.items[rejected.name]
    assert not item.flags() & Qt.ItemFlag.ItemIsEnabled
    assert not item.flags() & Qt.ItemFlag.ItemIsUserCheckable
    assert "missing tracepoints: raw_syscalls:sys_enter" in item.toolTip(0)
    assert item.text(1) == "unavailable"
    window.set_checked([rejected.name])       # even if forced, it is not started
    assert window.start_checked() == []
    others = [v.name for v in verdicts[1:] if v.runnable]
    for name in others:
        assert window.items[name].flags() & Qt.ItemFlag.ItemIsEnabled


def test_a_metric_held_back_only_by_privileges_runs_through_sudo_when_that_works():
    from host.elevation import with_elevation

    base = preflight.metric_verdicts()[0]
    user = dataclasses.replace(base, runnable=False, reason="needs root or CAP_BPF+CAP_PERFMON (uid 1000)")
    broken = dataclasses.replace(base, runnable=False, reason="missing tracepoints: raw_syscalls:sys_enter")
    ok_user, ok_broken = with_elevation([user, broken], elevation_ok=True)
    assert ok_user.runnable and ok_user.reason == ""
    assert not ok_broken.runnable and ok_broken.reason == broken.reason
    (refused,) = with_elevation([user], elevation_ok=False)
    assert not refused.runnable and "sudo -n" in refused.reason


def test_an_integer_out_of_bounds_is_kept_as_typed_and_refused(qtbot):
    spec = next(s for s in config.METRICS if any(a.name == "lport" for a in s.args))
    form = ArgForm(spec)
    qtbot.addWidget(form)
    form.show()
    box = form.editors["lport"]
    box.setText("7000")
    box.selectAll()
    qtbot.keyClicks(box, "70000")       # as a person types it: not clipped, not dropped
    assert box.text() == "70000"
    assert form.error_text("lport") == "lport must be at most 65535"
    assert form.validate()[1] == {"lport": "lport must be at most 65535"}
    box.selectAll()
    qtbot.keyClicks(box, "5999")
    assert form.error_text("lport") == "" and form.validate()[0]["lport"] == 5999


def test_start_checked_starts_every_metric_before_building_any_tab(qtbot, tmp_path):
    """A tab's charts take ~30 ms of the GUI thread: built before each start, they put the tenth
    metric's subprocess 1.3 s after the click (BENCHMARKS.md 5b)."""
    tabs_at_start = []

    class Counting(FakeController):
        def start_metric(self, name: str, values: dict) -> None:
            tabs_at_start.append(len(window.tabs))
            super().start_metric(name, values)

    names = [s.name for s in config.METRICS]
    refused = names[1]
    fake = Counting(refuse={refused: "no such thing"})
    window = make_window(qtbot, tmp_path, fake)
    window.set_checked(names)
    assert window.start_checked() == [n for n in names if n != refused]
    assert tabs_at_start == [0] * len(names)
    window.build_pending_tabs()   # the others are built one per turn of the event loop
    assert sorted(window.tabs) == sorted(names)
    assert window.tabs[refused].state == "failed"
    assert window.forms[refused].message.text() == "not started: no such thing"
    assert {window.tabs[n].state for n in names if n != refused} == {"running"}   # the fake reports at once
    assert window.running == set(names) - {refused}


def test_start_checked_lets_the_window_paint_between_tabs(qtbot, tmp_path):
    """Ten tabs' charts took the GUI thread 2.5 s while ten compilers held both CPUs: the first tab
    is built at once, the others one per turn of the event loop, with paints between them; a record
    that comes before its tab builds the tab."""
    records_sent = {}

    class Reporting(FakeController):
        def start_metric(self, name: str, values: dict) -> None:
            super().start_metric(name, values)
            # as a worker thread's signal: queued, delivered by a later turn of the event loop
            meta = [{"metric": name, "ts": time.time(), "kind": "meta", "interval": 0, "pid": 4242}]
            if name == "cacheraw":
                QTimer.singleShot(0, lambda: (records_sent.setdefault(name, len(window.tabs)),
                                              self.records.emit(name, meta)))

    names = [s.name for s in config.METRICS]
    window = make_window(qtbot, tmp_path, Reporting())
    window.show()
    qtbot.waitExposed(window)
    window.set_checked(names)
    tabs_at_paint = []

    class Paints(QObject):
        def eventFilter(self, obj, event) -> bool:
            if event.type() == QEvent.Type.Paint:
                tabs_at_paint.append(len(window.tabs))
            return False

    paints = Paints()
    QApplication.instance().installEventFilter(paints)
    try:
        assert window.start_checked() == names
        assert len(window.tabs) == 1 and window.ui.metric_tabs.currentWidget() is window.tabs[names[0]]
        qtbot.waitUntil(lambda: len(window.tabs) == len(names))
    finally:
        QApplication.instance().removeEventFilter(paints)
    # the window painted between the tabs, not once at the end
    assert len(set(tabs_at_paint) & set(range(1, len(names)))) >= len(names) // 2, tabs_at_paint
    # the last metric's record came before its tab (the first turn): it built the tab, which shows it
    assert records_sent["cacheraw"] < len(names)
    shown = [window.ui.metric_tabs.tabText(i) for i in range(window.ui.metric_tabs.count())]
    assert shown == names                             # in the order they were started, cacheraw's built second
    window.refresh()
    assert window.tabs["cacheraw"].pid == 4242
    assert {window.tabs[n].state for n in names} == {"running"}
