"""Overlays and heatmaps through the app: /compare draws one line per host from the values each posted
(the hosts chosen, each one's newest run, the range picked), refuses a bad query by name; a stream of a
metric whose records carry latency histograms gets a time x bucket heatmap whose cells hold the posted
counts, adjacent intervals summed when there are too many to draw."""

from __future__ import annotations

import html
import re

import pytest
from collector_payloads import envelope, ours

from collector import heatmap

T0 = 1_750_000_000.0


def _post(client, host: str, source: str, records: list[dict], run_id: str = "run-a") -> None:
    for start in range(0, len(records), 50):
        reply = client.post("/data", json=ours(start // 50, host=host, run_id=run_id, source=source,
                                               records=records[start:start + 50]))
        assert reply.status_code == 200, reply.get_json()


def _summaries(client, host: str, values: list[float], step: float = 10.0, run_id: str = "run-a") -> None:
    _post(client, host, "sysnest", [envelope("sysnest", T0 + i * step, i + 1, "summary", syscalls=int(v), per_sec=v,
                                             processes=1, errors=0, interval_s=step) for i, v in enumerate(values)],
          run_id=run_id)


def _lines(page: str) -> dict[str, list[tuple[float, float]]]:
    """{host: [(x, y) of its polyline]} from a compare page's chart."""
    svg = page.split('<svg class="chart"')[1].split("</svg>")[0]
    found = re.findall(r'<polyline class="series"[^>]*points="([^"]*)"><title>([^<]*)</title>', svg)
    return {html.unescape(name): [tuple(map(float, p.split(","))) for p in pts.split()] for pts, name in found}


def test_compare_overlays_every_hosts_newest_run(collector_client):
    hosts = {"pc-a": [100.0] * 30, "pc-b": [200.0 + i for i in range(30)], "pc-c": [50.0] * 20}
    _summaries(collector_client, "pc-a", [9.0] * 5, run_id="run-0")  # an older run: not drawn
    for host, values in hosts.items():
        _summaries(collector_client, host, values)
    reply = collector_client.get("/compare?source=sysnest&range=run")
    assert reply.status_code == 200
    page = reply.get_data(as_text=True)
    lines = _lines(page)
    assert {h: len(pts) for h, pts in lines.items()} == {h: len(v) for h, v in hosts.items()}
    # one y scale for all: pc-b's line lies above pc-a's, pc-a's above pc-c's (SVG y grows downwards)
    assert max(y for _x, y in lines["pc-b"]) < min(y for _x, y in lines["pc-a"]) < min(y for _x, y in lines["pc-c"])
    legend = page.split('<table id="legend"')[1].split("</table>")[0]
    assert re.findall(r'<tr data-host="([^"]+)">', legend) == ["pc-a", "pc-b", "pc-c"]
    assert "run-a" in legend and "run-0" not in legend and "229/s" in legend       # pc-b's newest value


def test_compare_chosen_hosts_and_range(collector_client):
    for host in ("pc-a", "pc-b", "pc-c"):
        _summaries(collector_client, host, [float(i) for i in range(60)])   # 10 minutes, one every 10 s
    page = collector_client.get("/compare?source=sysnest&host=pc-c&host=pc-a&host=pc-zz&range=5m").get_data(as_text=True)
    lines = _lines(page)
    assert sorted(lines) == ["pc-a", "pc-c"]
    assert all(len(pts) == 31 for pts in lines.values())     # the newest record and the 5 minutes before it
    assert "No sysnest stream from: pc-zz" in page
    assert re.search(r'value="pc-b"(?! checked)>', page) and 'value="pc-a" checked' in page


def test_compare_histogram_metric_draws_its_event_counts(collector_client):
    for h, host in enumerate(("pc-a", "pc-b")):
        _post(collector_client, host, "cpuschedrun", [_hist(T0 + i, i + 1, "run_time", [i + h, 1]) for i in range(4)])
    lines = _lines(collector_client.get("/compare?source=cpuschedrun").get_data(as_text=True))
    assert {h: len(p) for h, p in lines.items()} == {"pc-a": 4, "pc-b": 4}


@pytest.mark.parametrize(("url", "status", "says"), [
    ("/compare", 400, "source is required"), ("/compare?source=sysnest&range=2h", 400, "range must be one of"),
    ("/compare?source=sysnest&hots=pc-a", 400, "hots"), ("/compare?source=nothing", 404, "No stream of 'nothing'")])
def test_compare_refuses_bad_queries(collector_client, url, status, says):
    _summaries(collector_client, "pc-a", [1.0, 2.0])
    reply = collector_client.get(url)
    assert reply.status_code == status and says in html.unescape(reply.get_data(as_text=True))


def test_overview_offers_the_comparison(collector_client):
    _summaries(collector_client, "pc-a", [1.0, 2.0])
    _summaries(collector_client, "pc-b", [1.0, 2.0])
    page = collector_client.get("/").get_data(as_text=True)
    form = page.split('<form method="get" action="/compare" id="compare-form"')[1].split("</form>")[0]
    assert '<option value="sysnest">' in form and 'value="pc-a"' in form and 'value="pc-b"' in form
    assert 'class="compare" href="/compare?source=sysnest"' in page


def _hist(t: float, i: int, name: str, counts: list[int]) -> dict:
    buckets = [{"lo": 0 if b == 0 else 2 ** b, "hi": 2 ** (b + 1) - 1, "count": c} for b, c in enumerate(counts)]
    return envelope("cpuschedrun", t, i, "hist", name=name, unit="us", total=sum(counts), buckets=buckets)


def _cells(page: str, name: str) -> list[tuple[float, int, int]]:
    """(x, bucket lo, count) of each drawn cell of the named heatmap."""
    svg = page.split(f'<svg class="heatmap" data-hist="{name}"')[1].split("</svg>")[0]
    return [(float(x), int(lo), int(n)) for x, lo, n in
            re.findall(r'<rect class="cell" x="([\d.]+)"[^>]*data-lo="(\d+)" data-count="(\d+)"/>', svg)]


KEY = "host=pc-h&run_id=run-a&source=cpuschedrun"


def test_histogram_heatmap_holds_the_posted_counts(collector_client):
    runs = [[0, 5, 40, 3], [1, 9, 30, 0], [0, 0, 70, 12]]   # per interval, buckets 0, 2, 4, 8 us
    records = []
    for i, counts in enumerate(runs):
        records += [_hist(T0 + i, i + 1, "run_time", counts), _hist(T0 + i, i + 1, "runq_latency", [100, 0, 0, 0, 1]),
                    envelope("cpuschedrun", T0 + i, i + 1, "row", pid=1, comm="x", runs=3, run_ms=1.0)]
    _post(collector_client, "pc-h", "cpuschedrun", records)
    page = collector_client.get(f"/stream?{KEY}").get_data(as_text=True)
    cells = _cells(page, "run_time")
    columns = sorted({x for x, _lo, _n in cells})
    assert len(columns) == len(runs)
    lows = [0, 2, 4, 8]
    posted = {(c, lows[b]): n for c, counts in enumerate(runs) for b, n in enumerate(counts) if n}
    assert {(columns.index(x), lo): n for x, lo, n in cells} == posted        # empty buckets left blank
    # the most events, the darkest cell (the colours run from light to dark)
    svg = page.split('data-hist="run_time"')[1].split("</svg>")[0]
    fills = re.findall(r'fill="#([0-9a-f]{6})" data-lo="\d+" data-count="(\d+)"', svg)
    assert min(fills, key=lambda fc: sum(int(fc[0][i:i + 2], 16) for i in (0, 2, 4)))[1] == "70"
    assert _cells(page, "runq_latency") and page.index('data-hist="run_time"') < page.index('data-hist="runq_latency"')
    assert "ms" not in re.findall(r'<text class="ytick"[^>]*>([^<]*)</text>', page.split('data-hist="run_time"')[1])[0]


def test_heatmap_sums_adjacent_intervals_past_its_width(collector_client, monkeypatch):
    monkeypatch.setattr(heatmap, "MAX_COLUMNS", 3)
    runs = [[i, 2 * i, 1] for i in range(10)]
    _post(collector_client, "pc-h", "cpuschedrun", [_hist(T0 + i, i + 1, "run_time", c) for i, c in enumerate(runs)])
    cells = _cells(collector_client.get(f"/stream?{KEY}").get_data(as_text=True), "run_time")
    assert len({x for x, _lo, _n in cells}) == 3     # 4 + 4 + 2 intervals
    totals: dict[int, int] = {}
    for _x, lo, n in cells:
        totals[lo] = totals.get(lo, 0) + n
    assert totals == {0: sum(c[0] for c in runs), 2: sum(c[1] for c in runs), 4: len(runs)}


def test_no_heatmap_without_histograms(collector_client):
    _summaries(collector_client, "pc-a", [1.0, 2.0])
    page = collector_client.get("/stream?host=pc-a&run_id=run-a&source=sysnest").get_data(as_text=True)
    assert 'class="heatmap"' not in page and 'class="chart"' in page
