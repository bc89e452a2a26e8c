"""The stacks panel's views under pytest-qt, on profiles worked out by hand: top functions that follow the
flame graph's zoom and search, bottom-up, the sandwich of a picked function with its butterfly table,
Python stacks without the interpreter's frames (and with them, toggled), offcpu's top functions by the
frame that blocked, and cpuprofile's samples shown as time."""

from __future__ import annotations

import json
import os

import pytest
from helpers import ROOT
from PySide6.QtCore import Qt
from stack_posts import offcpu_like

import config
from gui.profile_panel import ProfilePanel
from profile_data import Frame

# app: main calls a (60) and b (30, of which c 10); db: main calls a (10). Total 100 (ms of offcpu).
FOLDED = "app;main;a 60\napp;main;b 20\napp;main;b;c 10\ndb;main;a 10\n"


def panel_of(qtbot, name: str, records: list[dict]) -> ProfilePanel:
    panel = ProfilePanel(config.get(name))
    qtbot.addWidget(panel)
    panel.resize(1400, 700)
    panel.show()
    panel.add_records(records)
    panel.redraw(force=True)
    while panel.store.backlog:
        panel.redraw(force=True)
    return panel


def top(panel: ProfilePanel) -> dict[str, tuple]:
    return {r["function"]: (r["self"], r["total"], r["total_pct"]) for r in panel.top_model.rows}


def names_at(graph, depth: int) -> set[str]:
    return {b.node.frame.name for b in graph.boxes() if b.depth == depth}


def test_top_functions_follow_the_zoom_and_the_search(qtbot):
    panel = panel_of(qtbot, "offcpu", offcpu_like(FOLDED))
    assert top(panel)["a"] == (70.0, 70.0, 70.0)
    panel.graph.zoom_to((Frame("app", "", "process"), Frame("main"), Frame("b")))
    assert top(panel) == {"b": (20.0, 30.0, 100.0), "c": (10.0, 10.0, pytest.approx(33.33)),
                          "main": (0.0, 30.0, 100.0)}
    assert panel.tables.tabText(0) == "Top functions in b"
    panel.graph.reset_zoom()
    panel.search_box.setText("a")                              # a's stacks (70), and "main" holds an "a": all
    assert top(panel)["main"][1] == 100.0
    panel.search_box.setText("c")
    assert top(panel) == {"c": (10.0, 10.0, 100.0), "b": (0.0, 10.0, 100.0), "main": (0.0, 10.0, 100.0)}
    assert panel.tables.tabText(0) == "Top functions matching “c”"
    panel.search_box.setText("")
    assert top(panel)["a"] == (70.0, 70.0, 70.0) and panel.tables.tabText(0) == "Top functions"


def test_bottom_up_puts_the_leaves_first_and_their_callers_below(qtbot):
    panel = panel_of(qtbot, "offcpu", offcpu_like(FOLDED))
    panel.view_box.setCurrentIndex(1)
    assert panel.views.view == "bottom_up" and panel.views.bottom.isVisible() and not panel.graph.isVisible()
    bottom = panel.views.bottom
    assert names_at(bottom, 1) == {"a", "b", "c"}
    widths = {b.node.frame.name: b.width for b in bottom.boxes() if b.depth == 1}
    assert widths["a"] == pytest.approx(bottom.width() * 0.7)          # a's self weight: 70 of 100
    assert names_at(bottom, 2) == {"main", "b"} and names_at(bottom, 3) == {"app", "db", "main"}


def test_sandwich_of_the_picked_function_and_its_butterfly(qtbot):
    panel = panel_of(qtbot, "offcpu", offcpu_like(FOLDED))
    row = [r["function"] for r in panel.top_model.rows].index("b")
    panel.top_table.clicked.emit(panel.top_table.model().index(row, 0))
    assert panel.function == Frame("b")
    panel.set_view("sandwich")
    callers, callees = panel.views.callers, panel.views.callees
    assert callers.isVisible() and callees.isVisible()
    # rooted at b: its callers drawn upward (the caller's row above the function's), its callees below
    assert names_at(callers, 0) == {"b"} and names_at(callers, 1) == {"main"} and names_at(callers, 2) == {"app"}
    assert callers.row_y(1) < callers.row_y(0) and callees.row_y(1) > callees.row_y(0)
    assert names_at(callees, 0) == {"b"} and names_at(callees, 1) == {"c"}
    assert callees.describe(1).splitlines()[2] == "10.000 ms, 33.33 % of b"
    assert "30.000 ms" in panel.views.sandwich_label.text()
    assert [(r["relation"], r["function"], r["total"], r["pct"]) for r in panel.butterfly_model.rows] == [
        ("caller", "main", 30.0, 100.0), ("self", "b", 20.0, pytest.approx(66.67)),
        ("callee", "c", 10.0, pytest.approx(33.33))]


PROCESS = "python3"
STARTUP = [("_start", "python3.11"), ("__libc_start_main", "libc.so.6"), ("Py_BytesMain", "python3.11"),
           ("Py_RunMain", "python3.11"), ("_PyRun_SimpleFileObject", "python3.11"), ("python3.11+0x65176f", "python3.11"),
           ("PyEval_EvalCode", "python3.11"), ("_PyEval_EvalFrameDefault", "python3.11")]


def cpu_stack(count: int, *tail: tuple[str, str, str], interval: int = 1) -> dict:
    frames = [{"name": n, "module": m, "kind": "user"} for n, m in STARTUP]
    frames += [{"name": n, "module": m, "kind": k} for n, m, k in tail]
    return {"kind": "stack", "interval": interval, "ts": 100.0, "pid": 7, "comm": PROCESS, "count": count,
            "frames": frames}


def test_python_stacks_open_with_the_program_and_a_toggle_shows_the_interpreter(qtbot):
    module = ("<module> (hot.py:13)", "/tmp/hot.py", "python")
    inner = ("inner (hot.py:5)", "/tmp/hot.py", "python")
    records = [cpu_stack(30, module, inner), cpu_stack(10, module, inner, ("long_mul", "python3.11", "user"))]
    panel = panel_of(qtbot, "cpuprofile", records)
    assert names_at(panel.graph, 2) == {"<module> (hot.py:13)"}
    assert names_at(panel.graph, 4) == {"long_mul"}                    # the native leaf stays
    assert "_start" not in top(panel) and top(panel)["inner (hot.py:5)"][:2] == (30, 40)
    panel.interpreter_box.setChecked(True)
    while panel.store.backlog:
        panel.redraw(force=True)
    assert names_at(panel.graph, 2) == {"_start"}
    assert names_at(panel.graph, 2 + len(STARTUP)) == {"<module> (hot.py:13)"}
    assert top(panel)["_start"][1] == 40


def test_offcpu_top_functions_are_where_threads_blocked(qtbot):
    """The real offcpu sample: every stack ends in __schedule; its top functions are the frames that
    called into the scheduler (do_epoll_wait, worker_thread, ...), each with the time blocked there."""
    with open(os.path.join(ROOT, "tests", "samples", "offcpu.ndjson")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in records if r.get("level") == "stack"]
    panel = panel_of(qtbot, "offcpu", records)
    scheduler = {"__schedule", "schedule", "schedule_timeout", "schedule_hrtimeout_range_clock"}
    assert not scheduler & {r["function"] for r in panel.top_model.rows}
    expected: dict[str, float] = {}
    for r in rows:
        site = next(f for f in r["kernel_frames"] if f not in scheduler)
        expected[site] = expected.get(site, 0.0) + r["total_ms"]
    best = max(expected, key=expected.get)
    assert panel.top_model.rows[0]["function"] == best
    assert panel.top_model.rows[0]["self"] == pytest.approx(expected[best], abs=0.01)
    panel.scheduler_box.setChecked(True)
    while panel.store.backlog:
        panel.redraw(force=True)
    assert panel.top_model.rows[0]["function"] == "__schedule"
    assert panel.top_model.rows[0]["self_pct"] == 100.0


def test_cpuprofile_samples_are_also_time(qtbot):
    frames = [("main", "hot", "user"), ("hot_a", "hot", "user")]
    records = [{"kind": "summary", "interval": 1, "ts": 100.0, "samples": 98, "frequency_hz": 49},
               {"kind": "stack", "interval": 1, "ts": 100.0, "pid": 5, "comm": "hot", "count": 98,
                "frames": [{"name": n, "module": m, "kind": k} for n, m, k in frames]}]
    panel = panel_of(qtbot, "cpuprofile", records)
    assert panel.store.period_ns == pytest.approx(1e9 / 49)
    row = panel.top_model.rows[0]
    assert (row["function"], row["self"], row["self_time"], row["total_time"]) == ("hot_a", 98, 2000.0, 2000.0)
    headers = [panel.top_model.headerData(i, Qt.Orientation.Horizontal) for i in range(panel.top_model.columnCount())]
    assert [h.split(" (")[0] for h in headers if "time" in h] == ["Self time", "Total time"]
    box = next(i for i, b in enumerate(panel.graph.boxes()) if b.node.frame.name == "hot_a")
    assert panel.graph.describe(box).splitlines()[2] == "98 samples (2,000.000 ms), 100.00 % of all"
    assert "98 samples (2,000.000 ms) in all" in panel.status.text()
