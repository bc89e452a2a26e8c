"""Bad input in the window is refused where it was typed, with the reason beside it: a pid that names no
process (the script's own check, run as the value is typed), letters in a number; the status bar stays
true when a metric fails; the collector panel shows why a URL was refused and what a "Test connection"
found, which asks /healthz off the GUI thread."""

from __future__ import annotations

import os
import threading
import time

import pytest
from collector_stub import _Quiet, free_port
from gui_fakes import FakeController, make_window
from werkzeug.serving import make_server

import config
from gui.forms import ArgForm


def missing_pid() -> int:
    """A pid no process or thread has now."""
    pid = 3_999_999
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _form(qtbot, name: str = "sysnest") -> ArgForm:
    form = ArgForm(config.get(name))
    qtbot.addWidget(form)
    form.resize(520, 700)
    form.show()
    return form


def test_a_pid_that_names_no_process_is_refused_beside_its_field(qtbot):
    form = _form(qtbot)
    pid = missing_pid()
    editor, error = form.editors["pid"], form.errors["pid"]
    qtbot.keyClicks(editor, str(pid))                      # checked as it is typed ...
    assert error.isVisible() and error.text() == f"pid {pid}: no such process"
    assert abs(error.geometry().center().y() - editor.geometry().center().y()) <= 4
    values, errors = form.validate()                       # ... and again before a start
    assert errors == {"pid": f"pid {pid}: no such process"} and "pid" not in values
    editor.setText(str(os.getpid()))
    assert not error.isVisible() and form.validate()[1] == {}


def test_a_thread_is_not_a_process_but_is_a_thread(qtbot):
    started, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (started.set(), done.wait(10)))
    thread.start()
    started.wait(5)
    try:
        form = _form(qtbot)
        form.editors["pid"].setText(str(thread.native_id))
        assert form.error_text("pid") == f"pid {thread.native_id}: no such process"
        form.editors["pid"].setText("")
        form.editors["tid"].setText(str(thread.native_id))
        assert form.error_text("tid") == "" and form.validate()[1] == {}
    finally:
        done.set()
        thread.join()


def test_the_window_starts_nothing_for_a_pid_that_names_no_process(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake)
    window.set_checked(["sysnest"])
    window.forms["sysnest"].editors["pid"].setText(str(missing_pid()))
    assert window.start_checked() == [] and fake.started == []
    assert window.forms["sysnest"].error_text("pid").endswith("no such process")
    assert "fix the marked arguments of sysnest" in window.statusBar().currentMessage()


@pytest.mark.parametrize(("typed", "reason"), [("12ab", "pid must be an integer"), ("abc", "pid must be an integer"),
                                               ("1.5", "pid must be an integer"), ("0", "pid must be at least 1")])
def test_letters_in_a_number_are_kept_as_typed_and_refused(qtbot, typed, reason):
    form = _form(qtbot)
    editor = form.editors["pid"]
    qtbot.keyClicks(editor, typed)
    assert editor.text() == typed                          # not dropped by a validator
    assert form.error_text("pid") == reason and form.errors["pid"].isVisible()
    assert form.validate()[1] == {"pid": reason}


def test_the_status_bar_says_a_metric_failed_not_that_it_runs(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake)
    window.set_checked(["sysnest"])
    assert window.start_checked() == ["sysnest"]
    window.refresh()
    assert window.statusBar().currentMessage() == "1 metric running"
    fake.crash("sysnest", 2, "sysnest exited with status 2:\nusage: sysnest.py [-h]\n"
                             "sysnest.py: error: argument pid: no process 3999999")
    window.refresh()
    message = window.statusBar().currentMessage()
    assert "running" not in message
    assert message == "sysnest failed: sysnest.py: error: argument pid: no process 3999999"
    window.set_checked(["sysnest"])
    assert window.start_checked() == ["sysnest"]          # started again: the failure is over
    window.refresh()
    assert window.statusBar().currentMessage() == "1 metric running"
    window.stop_all()
    window.refresh()
    assert window.statusBar().currentMessage() == "No metric running."


def test_a_refused_collector_url_is_the_panels_last_error(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    labels = window.ui.transport_labels
    fake.transport_status.emit({"reachable": None, "last_error": "", "url": None})
    window.ui.server_url.setText("ftp://127.0.0.1:5055")
    window.ui.apply_server_button.click()
    assert fake.server is None                              # not applied
    assert labels["reachable"].text() == "● URL refused"
    assert labels["last_error"].text() == "collector URL must start with http:// or https://, not ftp://"
    fake.transport_status.emit({"reachable": None, "last_error": "", "url": None})   # the next second's status
    assert labels["last_error"].text() == "collector URL must start with http:// or https://, not ftp://"
    window.ui.server_url.setText("")
    window.ui.apply_server_button.click()                   # none: records stay local
    assert fake.server == (None, None)
    assert labels["last_error"].text() == "none" and labels["reachable"].text() == "● none set: records stay local"


class SlowHealthz:
    """The real collector app behind a WSGI wrapper that answers /healthz `delay` seconds late."""

    def __init__(self, app, delay: float) -> None:
        self.app, self.delay = app, delay

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == "/healthz":
            time.sleep(self.delay)
        return self.app(environ, start_response)


@pytest.fixture
def live_collector(tmp_path):
    from collector import create_app
    from collector.state import EXTENSION

    app = create_app({"db_url": f"sqlite:///{tmp_path / 'collector.db'}"})
    port = free_port()
    server = make_server("127.0.0.1", port, SlowHealthz(app, 0.8), threaded=True, request_handler=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    app.extensions[EXTENSION].store.close()


def test_test_connection_asks_healthz_off_the_gui_thread(qtbot, tmp_path, live_collector):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    labels = window.ui.transport_labels
    window.ui.server_url.setText(live_collector + "/data")
    began = time.monotonic()
    window.ui.test_server_button.click()
    assert time.monotonic() - began < 0.3, "the click waited for the collector's answer"
    assert labels["test"].text() == "checking…"
    qtbot.waitUntil(lambda: labels["test"].text() != "checking…", timeout=5000)
    assert labels["test"].text().startswith("collector answered in "), labels["test"].text()
    assert "database sqlite" in labels["test"].text()
    # the URL applied: the transport has not looked yet, the test has
    fake.transport_status.emit({"reachable": None, "last_error": "", "url": live_collector})
    assert labels["reachable"].text() == "● reachable"


def test_test_connection_names_why_nothing_answered(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    labels = window.ui.transport_labels
    closed = f"127.0.0.1:{free_port()}"
    window.ui.server_url.setText(closed)
    window.ui.apply_server_button.click()                   # Apply tests the URL too
    assert fake.server == (f"http://{closed}", None)
    fake.transport_status.emit({"reachable": None, "last_error": "", "url": f"http://{closed}"})
    qtbot.waitUntil(lambda: labels["test"].text() != "checking…", timeout=5000)
    reason = f"collector unreachable: connection refused ({closed})"
    assert labels["test"].text() == reason
    assert labels["reachable"].text() == "● unreachable" and labels["last_error"].text() == reason
    window.refresh()
    assert f"collector test: http://{closed}: {reason}" in window.ui.log_view.toPlainText()


def test_a_failure_already_said_does_not_write_over_a_later_message(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake)
    assert window.statusBar().currentMessage() == "Check metrics and press Start."
    window.refresh()
    assert window.statusBar().currentMessage() == "Check metrics and press Start."   # nothing ran yet
    window.set_checked(["sysnest"])
    window.start_checked()
    fake.crash("sysnest", 1, "sysnest exited with status 1:\nno BPF")
    window.refresh()
    assert window.statusBar().currentMessage() == "sysnest failed: no BPF"
    window.show_status("Recorded session run.ndjson  ·  host lab-07", 0)
    window.refresh()
    assert window.statusBar().currentMessage() == "Recorded session run.ndjson  ·  host lab-07"
