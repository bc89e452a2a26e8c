"""An opened session: its headline covers the whole session (not its last, partial interval), its final
partial interval is marked and never drawn as a rate spike (live too), and the status bar names the
file, the host and the span."""

from __future__ import annotations

import json
import time

from gui_fakes import FakeController, make_window

from gui.charts import TimeSeriesChart

T0 = 1_767_000_000.0


def _meta(metric: str, host: str | None = "lab-07") -> dict:
    meta = {"metric": metric, "ts": T0, "kind": "meta", "interval": 0, "schema": 1, "pid": 4242,
            "args": {"interval": 1.0, "count": None}}
    return {**meta, "host": host} if host else meta


def sysnest_run(final: dict | None = None) -> list[dict]:
    """Three whole seconds near 1,000 syscalls/s, then the stop's 0.3 s: 21,170/s of shutdown."""
    records = [_meta("sysnest")]
    for i, per_sec in enumerate((1000.0, 1100.0, 1050.0), 1):
        records.append({"metric": "sysnest", "ts": T0 + i, "kind": "summary", "interval": i, "syscalls": int(per_sec),
                        "per_sec": per_sec, "processes": 3, "errors": 0, "interval_s": 1.0})
    records.append({"metric": "sysnest", "ts": T0 + 3.3, "kind": "summary", "interval": 4, "syscalls": 6351,
                    "per_sec": 21170.0, "processes": 40, "errors": 2, "interval_s": 0.3, **(final or {})})
    return records


def tcpconnlat_run() -> list[dict]:
    """49 connects: 24 and 24 in whole seconds, then 1 in the stop's 0.09 s."""
    records = [_meta("tcpconnlat", host=None)]
    for i, (connects, seconds) in enumerate(((24, 1.0), (24, 1.0), (1, 0.09)), 1):
        records.append({"metric": "tcpconnlat", "ts": T0 + i, "kind": "summary", "interval": i, "connects": connects,
                        "failed": 0, "avg_ms": 0.05, "max_ms": 0.1 * i, "interval_s": seconds})
    return records


def _open(qtbot, tmp_path, records: list[dict]):
    path = tmp_path / "run.ndjson"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    window = make_window(qtbot, tmp_path, FakeController(), show=True)
    window.session.open(str(path))
    qtbot.waitUntil(lambda: bool(window.session.opened), timeout=10_000)
    window.refresh()
    return window


def _drawn(tab) -> list[float]:
    (chart,) = [c for c in tab.charts if isinstance(c, TimeSeriesChart)]
    chart.redraw(force=True)
    return [y for _, ys in chart.points.values() for y in ys]


def test_an_opened_sessions_headline_covers_the_whole_session(qtbot, tmp_path):
    window = _open(qtbot, tmp_path, tcpconnlat_run())
    tab = window.tabs["tcpconnlat"]
    assert tab.summary_label.text().startswith("whole session, 3 intervals:"), tab.summary_label.text()
    what, shown = tab.headline()                           # what the line shows, before it is formatted
    assert what == "whole session, 3 intervals"
    assert shown["connects"] == 49 and abs(shown["interval_s"] - 2.09) < 1e-9
    assert abs(shown["max_ms"] - 0.3) < 1e-9               # the session's longest, not the last interval's
    assert "final interval 3 partial (0.09 s): not charted" in tab.footer.text()


def test_a_final_partial_interval_is_no_rate_spike(qtbot, tmp_path):
    window = _open(qtbot, tmp_path, sysnest_run())        # recorded before the scripts marked it
    tab = window.tabs["sysnest"]
    assert _drawn(tab) == [1000.0, 1100.0, 1050.0]
    (chart,) = [c for c in tab.charts if isinstance(c, TimeSeriesChart)]
    assert "final interval (partial, 0.3 s) not drawn" in chart.range_label.text()
    _, shown = tab.headline()
    assert shown["syscalls"] == 9501 and abs(shown["per_sec"] - 9501 / 3.3) < 0.01     # over the 3.3 s


def test_the_status_bar_names_the_file_host_and_span(qtbot, tmp_path):
    window = _open(qtbot, tmp_path, sysnest_run())
    message = window.statusBar().currentMessage()
    start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T0))
    assert message.startswith("Recorded session run.ndjson  ·  host lab-07  ·  "), message
    assert f"{start} – " in message and "(3.3 s)" in message and "1 metric (not live)" in message
    window.refresh()                                     # the refresh does not write over it
    assert window.statusBar().currentMessage() == message


def test_a_live_runs_final_partial_interval_is_marked_not_drawn(qtbot, tmp_path):
    fake = FakeController()
    window = make_window(qtbot, tmp_path, fake, show=True)
    window.set_checked(["sysnest"])
    window.start_checked()
    records = sysnest_run(final={"partial": True})       # as the script marks it now
    fake.records.emit("sysnest", records[:4])
    window.refresh()
    tab = window.tabs["sysnest"]
    assert tab.headline()[1]["per_sec"] == 1050.0
    fake.records.emit("sysnest", records[4:])
    fake.stop_all()
    window.refresh()
    assert _drawn(tab) == [1000.0, 1100.0, 1050.0]
    assert tab.headline() == ("", records[3])             # the last whole interval's, not 21,170/s
    assert "final interval 4 partial (0.3 s): not charted" in tab.footer.text()
