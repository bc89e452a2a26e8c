"""The window's "Include the profiler's own processes" check box (a system-wide metric's form): it is
there and visible, unchecked by default, and what it says reaches the metric the controller launches —
unchecked, the app's pid to leave out (--app-pid, the tree of this process); checked, --include-self."""

import os

import pytest
from gui_fakes import make_window
from PySide6.QtWidgets import QCheckBox

import config
from monitor import controller as controller_module
from registry.args import APP_PID_ENV

LABEL = "Include the profiler's own processes"
OWN_AWARE = [s.name for s in config.METRICS if any(a.name == "include_self" for a in s.args)]


@pytest.fixture
def launched(monkeypatch):
    """The argv of each metric the real controller starts; no process is started."""
    argvs: dict[str, list[str]] = {}

    def start(worker):
        argvs[worker.name] = worker.argv

    monkeypatch.setattr(controller_module.MetricWorker, "start", start)
    monkeypatch.delenv(APP_PID_ENV, raising=False)
    return argvs


def test_system_wide_views_have_the_toggle():
    assert set(OWN_AWARE) == {s.name for s in config.METRICS}   # every metric traces processes system-wide


@pytest.mark.parametrize("name", ["cpuprofile", "sysnest", "netpack"])   # netpack: rows per device, no -p
@pytest.mark.parametrize("checked", [False, True], ids=["unchecked", "checked"])
def test_the_toggle_is_visible_and_changes_what_the_metric_is_told(qtbot, tmp_path, launched, name, checked):
    from gui.thread_relay import GuiThreadRelay

    controller = controller_module.MonitorController(state_dir=str(tmp_path / "state"), elevate=[],
                                                     relay=GuiThreadRelay())
    window = make_window(qtbot, tmp_path, controller, show=True)
    window.set_checked([name])
    window.ui.arg_stack.setCurrentWidget(window.forms[name])
    form = window.forms[name]
    box = form.editors["include_self"]
    assert isinstance(box, QCheckBox) and form.labels["include_self"].text() == LABEL
    qtbot.waitUntil(box.isVisible, timeout=5_000)
    assert form.labels["include_self"].isVisible() and not box.isChecked()      # left out by default

    box.setChecked(checked)
    assert window.start_checked() == [name]
    argv = launched[name]
    assert ("--include-self" in argv) is checked
    assert argv[argv.index("--app-pid") + 1] == str(os.getpid())    # the tree left out unless included


def test_the_launcher_names_its_own_tree_as_the_app(monkeypatch):
    """Started by launcher.py, the app leaves out the launcher's tree: the collector beside it too."""
    monkeypatch.setenv(APP_PID_ENV, str(os.getppid()))
    assert controller_module.app_pid() == os.getppid()
    monkeypatch.setenv(APP_PID_ENV, "not a pid")
    assert controller_module.app_pid() == os.getpid()
