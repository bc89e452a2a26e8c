"""A flame graph's baseline from outside the live session: a saved session file (all of it, or a span),
written by the app's own recorder, and a collector's profile fetched over HTTP from the project's
collector on a local port — each compared with the live profile by shares per side, so the change of
every function is exact for synthetic stacks of known shares; the fetch runs off the GUI thread; a
collector that refuses, or a file that holds no such profile, says why in one line in the dialog."""

from __future__ import annotations

import json
import threading

import pytest
from collector_payloads import ours
from collector_stub import free_port
from gui_fakes import make_window
from werkzeug.serving import make_server

import config
import gui.baseline
from client.profile_fetch import profile_query
from gui.profile_panel import ProfilePanel
from monitor.session import SessionWriter

T0 = 1_750_000_000.0


def stacks(interval: int, ts: float, a: int, b: int) -> list[dict]:
    """cpuprofile's stack records of one interval: work() calls hot_a for `a` samples, hot_b for `b`."""
    def frames(leaf: str) -> list[dict]:
        return [{"name": n, "module": "work", "kind": "user"} for n in ("main", "work", leaf)]

    return [{"metric": "cpuprofile", "ts": ts, "kind": "stack", "interval": interval, "pid": 42, "comm": "work",
             "count": count, "frames": frames(leaf)} for leaf, count in (("hot_a", a), ("hot_b", b)) if count]


def meta(ts: float) -> dict:
    return {"metric": "cpuprofile", "ts": ts, "kind": "meta", "interval": 0, "frequency_hz": 100, "host": "lab-pc-01"}


def record_session(path, *intervals: tuple[int, int]) -> str:
    """A session as the window's Record… writes it: the meta line, then each interval's stacks, 1 s apart."""
    writer = SessionWriter(str(path))
    writer.write([meta(T0)])
    for n, (a, b) in enumerate(intervals, 1):
        writer.write(stacks(n, T0 + n, a, b))
    writer.close()
    assert not writer.error
    return str(path)


@pytest.fixture
def panel(qtbot) -> ProfilePanel:
    """cpuprofile's flame graph with a live profile of hot_a 30 %, hot_b 70 % (in 10 samples: a shorter run)."""
    panel = ProfilePanel(config.get("cpuprofile"))
    qtbot.addWidget(panel)
    panel.resize(1200, 500)
    panel.show()
    panel.add_records(stacks(1, 500.0, 3, 7))
    panel.redraw(force=True)
    return panel


def loaded(qtbot, panel: ProfilePanel, dialog) -> None:
    """Load, and let the window's timer work (the store takes the baseline within its budget) until Compare draws."""
    dialog.load()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10_000)         # read, handed over, closed
    qtbot.waitUntil(lambda: panel.redraw(force=True) is not None and panel.comparing(), timeout=5000)


def changes(panel: ProfilePanel) -> dict[str, float]:
    return {r["function"]: r["change_pct"] for r in panel.change_model.rows}


def test_baseline_from_a_saved_session_gives_each_functions_change(qtbot, panel, tmp_path):
    # 2 s recorded: 80/20 then 60/40 samples, 70/30 in all (200 samples against the live 10)
    path = record_session(tmp_path / "monday.ndjson", (80, 20), (60, 40))
    dialog = panel.ask_baseline("file")
    dialog.path.setText(path)
    loaded(qtbot, panel, dialog)
    assert changes(panel) == {"hot_a": -40.0, "hot_b": 40.0, "main": 0.0, "work": 0.0}
    assert panel.store.baseline.profile.total == 200 and not dialog.isVisible()
    assert "baseline: file monday.ndjson, 2.0 s" in panel.status.text()
    assert panel.tables.isTabEnabled(1) and panel.legend.isVisible()
    # a span of it: its first second only, 80/20
    dialog = panel.ask_baseline("file")
    dialog.path.setText(path)
    dialog.to_s.setValue(1.5)
    loaded(qtbot, panel, dialog)
    assert changes(panel) == {"hot_a": -50.0, "hot_b": 50.0, "main": 0.0, "work": 0.0}
    assert "baseline: file monday.ndjson, 1.5 s (from 0 s of 2.0 s)" in panel.status.text()
    # a new run (a metric started, a session opened) keeps it: it is not of the run cleared
    panel.clear()
    panel.add_records(stacks(1, 900.0, 1, 1))
    qtbot.waitUntil(lambda: panel.redraw(force=True) is not None and panel.comparing() and not panel.store.backlog,
                    timeout=5000)
    assert changes(panel) == {"hot_a": -30.0, "hot_b": 30.0, "main": 0.0, "work": 0.0}
    assert "baseline: file monday.ndjson, 1.5 s" in panel.status.text()


@pytest.mark.parametrize(("content", "reason"), [
    (None, "cannot open"),
    ('{"metric": "offcpu", "kind": "meta", "ts": 1}\n', "no records of any known metric"),
    (json.dumps(meta(T0)) + "\n", "no stacks of cpuprofile"),
])
def test_a_file_without_the_metrics_profile_says_why_in_the_dialog(qtbot, panel, tmp_path, content, reason):
    path = tmp_path / "other.ndjson"
    if content is not None:
        path.write_text(content)
    dialog = panel.ask_baseline("file")
    dialog.path.setText(str(path))
    dialog.load()
    qtbot.waitUntil(lambda: dialog.load_button.isEnabled(), timeout=5000)
    assert reason in dialog.status.text() and "\n" not in dialog.status.text() and "Traceback" not in dialog.status.text()
    assert dialog.isVisible() and panel.store.baseline is None


@pytest.fixture
def collector(tmp_path):
    """The project's collector (create_app) on SQLite, served over HTTP on a local port, with cpuprofile's
    run run-a of lab-pc-01 posted: 2 intervals, 70/30 in all."""
    from collector import create_app
    from collector.state import EXTENSION

    app = create_app({"db_url": f"sqlite:///{tmp_path}/collector.db"})
    client = app.test_client()
    for seq, (a, b) in enumerate(((80, 20), (60, 40))):
        payload = ours(seq, source="cpuprofile", records=[meta(T0)] * (seq == 0) + stacks(seq + 1, T0 + seq + 1, a, b))
        answer = client.post("/data", data=json.dumps(payload), content_type="application/json")
        assert answer.status_code == 200, answer.get_json()
    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(5)
    app.extensions[EXTENSION].store.close()


def test_baseline_from_a_collector_gives_the_same_change_fetched_off_the_gui_thread(qtbot, panel, collector,
                                                                                     monkeypatch):
    fetched_on = []
    fetch = gui.baseline.fetch_folded

    def fetch_and_note(*args, **kwargs):
        fetched_on.append(threading.current_thread())
        return fetch(*args, **kwargs)

    monkeypatch.setattr(gui.baseline, "fetch_folded", fetch_and_note)
    dialog = panel.ask_baseline("collector")
    dialog.url.setText(collector)
    dialog.host.setText("lab-pc-01")
    dialog.run_id.setText("run-a")
    assert dialog.metric_box.currentText() == "cpuprofile" and dialog.range_box.currentText() == "run"
    loaded(qtbot, panel, dialog)
    assert fetched_on and threading.main_thread() not in fetched_on
    assert changes(panel) == {"hot_a": -40.0, "hot_b": 40.0, "main": 0.0, "work": 0.0}
    assert "baseline: collector host lab-pc-01 run run-a, range run" in panel.status.text()


@pytest.mark.parametrize(("host", "url", "reason"), [
    ("nowhere", None, "collector answered HTTP 404: not_found: no stream of 'cpuprofile' matches the selection"),
    ("h" * 256, None, "collector answered HTTP 400: bad_query: host must be 1..255 printable characters"),
    ("lab-pc-01", "http://127.0.0.1:{free}", "collector unreachable: connection refused"),
])
def test_a_collector_that_refuses_says_why_in_the_dialog(qtbot, panel, collector, host, url, reason):
    dialog = panel.ask_baseline("collector")
    dialog.url.setText(url.format(free=free_port()) if url else collector)
    dialog.host.setText(host)
    dialog.run_id.setText("run-a")
    dialog.load()
    assert dialog.status.text() == "loading…" and not dialog.load_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.load_button.isEnabled(), timeout=10_000)
    assert dialog.status.text().startswith(reason) and "\n" not in dialog.status.text()
    assert dialog.isVisible() and panel.store.baseline is None and "baseline" not in panel.status.text()


def test_a_bad_url_is_refused_before_anything_is_fetched(qtbot, panel):
    dialog = panel.ask_baseline("collector")
    for text, reason in (("", "no collector URL"), ("ftp://x", "must start with http:// or https://")):
        dialog.url.setText(text)
        dialog.load()
        assert reason in dialog.status.text() and dialog.load_button.isEnabled() and dialog.loader.thread is None


def test_a_selection_is_repeated_parameters():
    assert profile_query({"source": ["cpuprofile"], "host": ["a", "b c"], "run_id": [], "range": ["5m"]}) == \
        "format=folded&source=cpuprofile&host=a&host=b+c&range=5m"


def test_the_collector_dialog_starts_from_the_windows_collector(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path, server_url="http://lab:5000", token="secret")
    dialog = window.tab_for("cpuprofile").chart.ask_baseline("collector")
    assert (dialog.url.text(), dialog.token.text(), dialog.metric_box.currentText()) == \
        ("http://lab:5000", "secret", "cpuprofile")


def test_a_pinned_baseline_goes_with_the_run_it_was_of(qtbot, panel):
    panel.pin_baseline()
    qtbot.waitUntil(lambda: panel.redraw(force=True) is not None and panel.store.baseline_ready, timeout=5000)
    assert "pinned at" in panel.status_text(panel.current())
    panel.clear()
    panel.redraw(force=True)
    assert panel.store.baseline is None and "baseline" not in panel.status_text(panel.current())
