"""The dashboard's numbers in units a person reads (registry/units.py): a chart's title names the unit
its ticks are in (a latency chart of sub-millisecond connects is in µs, not titled "(ms)" over µs
ticks), bytes per second in MiB/s, and the records table's cells in their column's unit with the raw
value kept for sorting."""

from __future__ import annotations

import html
import re

from collector_payloads import envelope, ours

T0 = 1_750_000_000.0
STREAM = "/stream?host=lab-pc-01&run_id=run-a&source="


def _ticks(page: str) -> list[str]:
    chart = page.split('<svg class="chart"')[1].split("</svg>")[0]
    return [html.unescape(t) for t in re.findall(r'<text class="ytick"[^>]*>([^<]*)</text>', chart)]


def test_a_latency_chart_is_titled_in_the_unit_of_its_ticks(collector_client):
    events = [envelope("tcpconnlat", T0 + i, 1, "event", pid=9, comm="curl", latency_ms=0.05 * (i + 1), status="ok")
              for i in range(5)]
    assert collector_client.post("/data", json=ours(0, source="tcpconnlat", records=events)).status_code == 200
    page = collector_client.get(STREAM + "tcpconnlat").get_data(as_text=True)
    assert "<h2>connect latency (µs) <small>" in html.unescape(page)
    ticks = _ticks(page)
    assert ticks[0] == "0" and float(ticks[-1]) >= 250 and all(re.fullmatch(r"[\d.]+", t) for t in ticks), ticks
    assert "connect latency (µs) over time" in html.unescape(page)
    # the table: each latency in µs under a heading saying so, its raw ms kept for the sort
    body = page.split('<table id="records"')[1].split("</table>")[0]
    assert "Latency (µs)</th>" in html.unescape(body)
    assert re.search(r'<td class="num" data-value="0\.05">50\.0</td>', body)


def test_bytes_per_second_in_mib_per_second_and_the_overview_says_per_second(collector_client):
    records = [envelope("biopwise", T0 + i, i + 1, "summary", bytes_per_s=150e6 + i * 1e6, read_bytes=61_997_056,
                        interval_s=1.0) for i in range(3)]
    assert collector_client.post("/data", json=ours(0, source="biopwise", records=records)).status_code == 200
    page = html.unescape(collector_client.get(STREAM + "biopwise").get_data(as_text=True))
    assert "<h2>block I/O (MiB/s) <small>" in page
    ticks = _ticks(page)
    assert float(ticks[-1]) >= 145 and all(re.fullmatch(r"[\d.]+", t) for t in ticks), ticks
    assert re.search(r'data-value="61997056">59\.1 MiB</td>', page)
    (host,) = collector_client.get("/api/overview").get_json()["hosts"]
    assert host["metrics"][0]["trend"]["last"] == "145.0 MiB/s of block I/O"   # the key figure, per second
