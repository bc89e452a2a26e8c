"""The stream page's profile views through the Flask test client (SQLite and PostgreSQL): top functions
beside the flame graph that follow its zoom and search, offcpu's top functions where threads blocked,
bottom-up, the sandwich of a function with its butterfly table, Python stacks without the interpreter's
frames (a toggle shows them), cpuprofile's samples also as time, and bad view parameters refused."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from collector_payloads import ours
from stack_posts import post_intervals, sample

KEY = "host=lab-pc-01&run_id=run-a"
FRAME = re.compile(r'<g class="frame" data-name="([^"]*)" data-kind="[^"]*"><title>([^<]*)</title>'
                   r'<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)"')


def page(client, query: str) -> str:
    answer = client.get(f"/stream?{KEY}&{query}")
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    return answer.get_data(as_text=True)


def top_functions(text: str) -> list[str]:
    table = text.split('<table id="top-functions">', 1)[1].split("</table>", 1)[0]
    return [unescape(n) for n in re.findall(r'<tr><td><a href="[^"]*" title="[^"]*" data-kind="[^"]*">([^<]*)</a>', table)]


def svgs(text: str) -> list[list[tuple[str, str, float, float, float]]]:
    """Each drawn graph's frames: (name, tooltip, x, y, width)."""
    return [[(unescape(n), unescape(t), float(x), float(y), float(w)) for n, t, x, y, w in FRAME.findall(svg)]
            for svg in text.split('<svg class="flamegraph"')[1:]]


def test_offcpu_top_functions_are_blocking_sites_and_follow_zoom_and_search(collector_client):
    posted = post_intervals(collector_client, "offcpu", sample("offcpu"), 2)
    rows = [r for r in posted if r.get("level") == "stack"]
    scheduler = {"__schedule", "schedule", "schedule_timeout", "schedule_hrtimeout_range_clock"}
    blocked: dict[str, float] = {}
    for r in rows:
        site = next(f for f in r["kernel_frames"] if f not in scheduler)
        blocked[site] = blocked.get(site, 0.0) + r["total_ms"]
    text = page(collector_client, "source=offcpu&range=run")
    listed = top_functions(text)
    assert listed[:len(blocked)] == sorted(blocked, key=blocked.get, reverse=True)
    assert not scheduler & set(listed)
    # zoomed on the python process: only its stacks' functions
    zoomed = page(collector_client, "source=offcpu&range=run&focus=python")
    assert top_functions(zoomed)[0] == "do_epoll_wait" and "rcu_gp_fqs_loop" not in top_functions(zoomed)
    assert "top functions of python" in zoomed
    searched = page(collector_client, "source=offcpu&range=run&search=futex")
    assert top_functions(searched)[0] == "futex_do_wait" and "do_epoll_wait" not in top_functions(searched)
    assert "top functions matching “futex”" in searched
    with_scheduler = page(collector_client, "source=offcpu&range=run&scheduler=on")
    assert top_functions(with_scheduler)[0] == "__schedule"


def test_bottom_up_draws_where_time_ends_on_top(collector_client):
    post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    text = page(collector_client, "source=offcpu&range=run&view=bottom_up")
    (graph,) = svgs(text)
    top_row = min(y for _n, _t, _x, y, _w in graph)
    assert {n for n, _t, _x, y, _w in graph if y == top_row} == {
        "do_epoll_wait", "smpboot_thread_fn", "worker_thread", "rcu_gp_fqs_loop", "futex_do_wait"}
    assert '<b data-view="bottom_up">' in text and 'data-view="flame"' in text


def test_sandwich_of_a_function_and_its_butterfly(collector_client):
    post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    text = page(collector_client, "source=offcpu&range=run")
    link = re.search(r'<a href="([^"]*view=sandwich[^"]*)" title="[^"]*" data-kind="kernel">do_epoll_wait<', text)
    assert link, "each top function links to its sandwich"
    sandwiched = collector_client.get(unescape(link.group(1))).get_data(as_text=True)
    callers, callees = svgs(sandwiched)
    # callers: the function at the bottom, its callers upward; callees: the function at the top
    base = max(y for _n, _t, _x, y, _w in callers)
    assert {n for n, _t, _x, y, _w in callers if y == base} == {"do_epoll_wait"}
    assert [n for n, _t, _x, y, _w in sorted(callers, key=lambda f: -f[3])][:3] == [
        "do_epoll_wait", "__x64_sys_epoll_wait", "do_syscall_64"]
    assert [n for n, *_ in callees] == ["do_epoll_wait"]              # a blocking site: nothing below it
    butterfly = sandwiched.split('<table id="butterfly">', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r'<tr class="(\w+)"><td>\w+</td><td><a href="[^"]*" title="[^"]*">([^<]*)</a>', butterfly)
    assert cells == [("caller", "__x64_sys_epoll_wait"), ("self", "do_epoll_wait")]
    assert "100.0 %" in butterfly


def python_stack(ts: float, count: int, *tail: tuple[str, str, str]) -> dict:
    startup = [("_start", "python3.11", "user"), ("Py_RunMain", "python3.11", "user"),
               ("_PyEval_EvalFrameDefault", "python3.11", "user")]
    return {"metric": "cpuprofile", "ts": ts, "kind": "stack", "interval": 1, "pid": 9, "comm": "python3",
            "count": count, "frames": [{"name": n, "module": m, "kind": k} for n, m, k in (*startup, *tail)]}


def test_cpuprofile_python_stacks_and_samples_as_time(collector_client):
    ts = 1_795_307_001.0
    module, inner = ("<module> (hot.py:13)", "/tmp/hot.py", "python"), ("inner (hot.py:5)", "/tmp/hot.py", "python")
    records = [{"metric": "cpuprofile", "ts": ts, "kind": "summary", "interval": 1, "samples": 98, "frequency_hz": 49},
               python_stack(ts, 49, module, inner), python_stack(ts, 49, module, inner, ("long_mul", "python3.11", "user"))]
    answer = collector_client.post("/data", data=json.dumps(ours(0, source="cpuprofile", records=records)),
                                   content_type="application/json")
    assert answer.status_code == 200
    text = page(collector_client, "source=cpuprofile&range=run")
    (graph,) = svgs(text)
    names = {n for n, *_ in graph}
    assert {"python3", "<module> (hot.py:13)", "inner (hot.py:5)", "long_mul"} <= names and "_start" not in names
    assert top_functions(text)[:2] == ["inner (hot.py:5)", "long_mul"]
    assert "<th>self time</th>" in text and "1,000.000 ms" in text          # 49 samples at 49 Hz
    tip = next(t for n, t, *_ in graph if n == "inner (hot.py:5)")
    assert "98 samples (2,000.000 ms)" in tip
    assert "98 samples (2,000.000 ms) in all" in text
    raw = page(collector_client, "source=cpuprofile&range=run&interpreter=on")
    assert "_start" in {n for n, *_ in svgs(raw)[0]}
    assert 'id="toggle-interpreter"' in raw and 'id="toggle-scheduler"' not in raw


@pytest.mark.parametrize("query", ["view=icicle", "interpreter=yes", "scheduler=1"])
def test_bad_view_parameters_are_400_with_a_reason(collector_client, query):
    post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    answer = collector_client.get(f"/stream?{KEY}&source=offcpu&range=run&{query}",
                                  headers={"Accept": "application/json"})
    assert answer.status_code == 400
    assert answer.get_json()["reason"] == "bad_query" and query.split("=")[0] in answer.get_json()["detail"]
