"""The stream page's chart of a profile's metric (the registry's timeline): CPU per process over time for
cpuprofile (each interval's samples of a process over the frequency and the interval's length, % of one
CPU), blocked time per process for offcpu (its stack rows' ms per second of the interval); each point
named on hover; each interval a link to the page for that range, whose flame graph holds that
interval's stacks only; and the overview's and the compare page's key figure for both."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from collector_payloads import envelope, ours
from stack_posts import post_intervals, sample

T0 = 1_750_000_000.0
KEY = "host=lab-pc-01&run_id=run-a"
HZ = 100
# samples per interval of each process: pid -> comm, counts of intervals 1..3
PROCESSES = {42: ("work", [93, 40, 7]), 43: ("idle", [2, 0, 50])}


def _interval(i: int) -> list[dict]:
    """An interval of cpuprofile: each process's samples as two stacks, and the summary."""
    records = []
    for pid, (comm, counts) in PROCESSES.items():
        n = counts[i - 1]
        for part, share in (("a", n // 2), ("b", n - n // 2)):
            if share:
                records.append(envelope("cpuprofile", T0 + i + 0.01, i, "stack", pid=pid, comm=comm, count=share,
                                        frames=[{"name": "main", "module": comm, "kind": "user"},
                                                {"name": f"{comm}_{part}", "module": comm, "kind": "user"}]))
    records.append(envelope("cpuprofile", T0 + i + 0.02, i, "summary", frequency_hz=HZ, interval_s=0.5,
                            samples=sum(c[i - 1] for _, c in PROCESSES.values())))
    return records


def _chart(page: str) -> str:
    return page.split('<svg class="chart"')[1].split("</svg>")[0]


def _tips(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<title>(\d\d:\d\d:\d\d  [^<]*)</title>", _chart(page))]


def test_cpuprofile_charts_cpu_per_process_and_an_interval_opens_its_flame_graph(collector_client):
    for i in (1, 2, 3):
        assert collector_client.post("/data", json=ours(i - 1, source="cpuprofile", records=_interval(i))).status_code == 200
    page = collector_client.get(f"/stream?{KEY}&source=cpuprofile").get_data(as_text=True)
    assert "<h2>CPU per process (%) <small>" in html.unescape(page)
    # hover: each interval's share of a CPU per process: samples / 100 Hz / 0.5 s
    tips = _tips(page)
    for pid, (comm, counts) in PROCESSES.items():
        shown = [t.split(": ")[1] for t in tips if f"  {comm} ({pid}): " in t]
        assert shown == [f"{n / HZ / 0.5 * 100:g}%" for n in counts], (comm, shown)
    # each interval a link: the page for its range, at its flame graph, which holds its stacks only
    links = [html.unescape(h) for h in re.findall(r'<a class="pick" href="([^"]+)"', _chart(page))]
    assert len(links) == 3 and all(link.endswith("#flame") for link in links)
    since, until = (float(parse_qs(urlsplit(links[1]).query)[k][0]) for k in ("since", "until"))
    assert T0 + 1.02 < since < T0 + 2 < until < T0 + 3
    second = html.unescape(collector_client.get(links[1]).get_data(as_text=True))
    status = re.search(r'<p id="flame-status">(.*?)</p>', second, re.S).group(1)
    # the interval's samples, and their time at the run's frequency beside them
    assert re.search(rf"\b{sum(c[1] for _, c in PROCESSES.values())} samples( \([^)]*\))? in all", status), status
    assert "work_a" in second and "idle_a" not in second.split('id="flame"')[1]   # idle had none in interval 2
    assert 'data-t0="' in _chart(page) and "chart_range.js" in page             # a range dragged: the script's


def test_offcpu_charts_blocked_time_per_process_from_its_stack_rows(collector_client):
    posted = post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    page = collector_client.get(f"/stream?{KEY}&source=offcpu").get_data(as_text=True)
    assert "<h2>blocked time per process (" in page
    summaries = {r["interval"]: r for r in posted if r["kind"] == "summary"}
    stacks = [r for r in posted if r["kind"] == "row" and r.get("level") == "stack"]   # not the thread rows
    names = {f"{r['comm']} ({r['pid']})" for r in stacks}
    expected: dict[str, list[float]] = {}
    for interval in sorted(summaries):        # a process blocked in no stack of an interval: 0 there
        for name in names:
            ms = sum(r["total_ms"] for r in stacks if r["interval"] == interval and f"{r['comm']} ({r['pid']})" == name)
            expected.setdefault(name, []).append(ms / summaries[interval]["interval_s"])
    tips = _tips(page)
    for name, values in expected.items():
        shown = [t.split(": ")[1] for t in tips if f"  {name}: " in t]
        assert len(shown) == len(values), (name, shown)
        for text, ms_per_s in zip(shown, values, strict=True):
            number, unit = text.split(" ")
            assert unit in ("µs/s", "ms/s", "s/s")
            assert float(number) * {"µs/s": 1e-3, "ms/s": 1, "s/s": 1000}[unit] == pytest.approx(ms_per_s, rel=5e-3, abs=1e-9)


def test_a_line_chart_names_each_point_on_hover(collector_client):
    records = [envelope("sysnest", T0 + i, i + 1, "summary", per_sec=1000.0 * (i + 1), interval_s=1.0)
               for i in range(4)]
    assert collector_client.post("/data", json=ours(0, records=records)).status_code == 200
    page = collector_client.get(f"/stream?{KEY}&source=sysnest").get_data(as_text=True)
    assert [t.split("  ", 1)[1] for t in _tips(page)] == [f"syscalls/s: {n},000/s" for n in (1, 2, 3, 4)]
    assert 'class="pick"' not in page            # a chart of one figure: no per-interval links


def test_the_overview_and_compare_show_the_profiles_key_figures(collector_client):
    for i in (1, 2, 3):
        assert collector_client.post("/data", json=ours(i - 1, source="cpuprofile", records=_interval(i))).status_code == 200
    post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    (host,) = collector_client.get("/api/overview").get_json()["hosts"]
    last = {m["source"]: m["trend"]["last"] for m in host["metrics"]}
    offcpu = [r for r in sample("offcpu") if r["kind"] == "summary"][-1]
    assert last["cpuprofile"] == f"{57 / HZ / 0.5 * 100:g}% CPU"
    number, unit = last["offcpu"].split(" ", 1)
    assert unit == "s/s blocked"
    assert float(number) == pytest.approx(offcpu["total_time_ns"] / 1e9 / offcpu["interval_s"], abs=0.05)
    page = html.unescape(collector_client.get("/compare?source=cpuprofile").get_data(as_text=True))
    assert "<h2>CPU (%) <small>" in page and f"{57 / HZ / 0.5 * 100:g}% CPU" in page


def test_a_final_partial_interval_is_not_charted_as_a_rate(collector_client):
    """A stop's last 0.3 s (summary `partial`: true) made 8,000/s after a steady 1,000/s: the line, the
    overview's trend and the profile's CPU line end at the last whole interval, and the page says why."""
    records = [envelope("sysnest", T0 + i, i + 1, "summary", per_sec=1000.0, syscalls=1000, interval_s=1.0)
               for i in range(3)]
    records.append(envelope("sysnest", T0 + 3.3, 4, "summary", per_sec=8000.0, syscalls=2400, interval_s=0.3,
                            partial=True))
    assert collector_client.post("/data", json=ours(0, records=records)).status_code == 200
    page = collector_client.get(f"/stream?{KEY}&source=sysnest").get_data(as_text=True)
    assert [t.split("  ", 1)[1] for t in _tips(page)] == ["syscalls/s: 1,000/s"] * 3
    assert 'id="chart-partial">final interval (partial, 300 ms) not drawn' in html.unescape(page)
    (host,) = collector_client.get("/api/overview").get_json()["hosts"]
    assert {m["source"]: m["trend"]["last"] for m in host["metrics"]}["sysnest"] == "1,000 syscalls/s"

    profile = [r for i in (1, 2, 3) for r in _interval(i)]
    profile[-1] = {**profile[-1], "partial": True}          # interval 3's summary: cut short
    assert collector_client.post("/data", json=ours(0, source="cpuprofile", records=profile)).status_code == 200
    page = collector_client.get(f"/stream?{KEY}&source=cpuprofile").get_data(as_text=True)
    for pid, (comm, counts) in PROCESSES.items():
        shown = [t.split(": ")[1] for t in _tips(page) if f"  {comm} ({pid}): " in t]
        assert shown == [f"{n / HZ / 0.5 * 100:g}%" for n in counts[:2]], (comm, shown)
    assert 'id="chart-partial"' in page
