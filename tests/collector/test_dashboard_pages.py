"""The dashboard's pages through the app: axis labels whole with SI units and enough ticks (the
1.034e+05 case), the records table newest first, numbers marked for right alignment, paged; a clear 404
page; an unknown query parameter refused with a 400 naming it; a favicon; the overview's JSON."""

from __future__ import annotations

import html
import itertools
import re

import pytest
from collector_payloads import envelope, ours
from sqlalchemy import text

from collector import chart, dashboard

KEY = "host=lab-pc-01&run_id=run-a&source=sysnest"


@pytest.mark.parametrize(("value", "unit", "text"), [
    (103400, "/s", "103k/s"), (1.034e5, "", "103k"), (0, "/s", "0/s"), (1536, "bytes", "1.5 KiB"),
    (2.5e6, "", "2.5M"), (12, "pct", "12%"), (1.5, "ms", "1.5 ms"), (250, "us", "250 µs"), (-2000, "", "-2k"),
    (0.1, "ms", "100 µs"), (150e6, "bytes/s", "143 MiB/s"), (2.5e9, "ns", "2.5 s")])
def test_si_labels(value, unit, text):
    assert chart.si(value, unit) == text


def test_ticks_cover_the_range_on_round_steps():
    ticks = chart.nice_ticks(0, 103400)
    assert ticks[0] == 0 and ticks[-1] >= 103400 and len(ticks) >= 4
    steps = {round(b - a, 6) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1
    times = chart.time_ticks(1000.0, 1300.0)
    assert len(times) >= 4 and all(t % 60 == 0 for t in times)


def _summaries(client, values: list[float], host: str = "lab-pc-01", t0: float = 1_750_000_000.0) -> None:
    for i, v in enumerate(values):
        records = [envelope("sysnest", t0 + i, i + 1, "summary", syscalls=int(v), per_sec=v, processes=1,
                            errors=0, interval_s=1.0)]
        assert client.post("/data", json=ours(i, host=host, records=records)).status_code == 200


def test_the_1034e05_case_is_labelled_whole(collector_client):
    _summaries(collector_client, [98_000.0, 103_400.0, 101_000.0])
    page = collector_client.get(f"/stream?{KEY}").get_data(as_text=True)
    labels = re.findall(r'<text class="ytick"[^>]*>([^<]*)</text>', page)
    assert len(labels) >= 4 and all(re.fullmatch(r"-?[0-9.]+[kMGT]?", label) for label in labels), labels
    assert "<h2>syscalls/s <small>" in page          # the unit once, in the title, as the ticks are in it
    top = float(labels[-1][:-1]) * 1000
    assert top >= 103_400 and "e+" not in page.split('<svg class="chart"')[1].split("</svg>")[0]
    assert len(re.findall(r'class="xtick"', page)) >= 3


def test_event_scatter_draws_each_posted_event_with_failed_ones_apart(collector_client):
    t0 = 1_750_000_000.0
    events = [envelope("tcpconnlat", t0 + i * 0.25, 0, "event", pid=100 + i, comm="curl", daddr="127.0.0.1",
                       dport=80 + i, latency_ms=0.05 * (i + 1), status="failed" if i % 4 == 3 else "ok")
              for i in range(24)]
    reply = collector_client.post("/data", json=ours(0, source="tcpconnlat", records=events))
    assert reply.status_code == 200
    page = collector_client.get("/stream?host=lab-pc-01&run_id=run-a&source=tcpconnlat").get_data(as_text=True)
    svg = page.split('<svg class="chart"')[1].split("</svg>")[0]
    assert "<polyline" not in svg                                     # points, not a line
    drawn: dict[str, tuple[str, set]] = {}
    for name, marker, body in re.findall(r'<g class="series" data-series="([^"]+)" data-marker="([^"]+)"[^>]*>(.*?)</g>',
                                         svg):
        pts = {(float(t), float(v)) for t, v in re.findall(r'class="point"[^>]*data-t="([^"]+)" data-v="([^"]+)"', body)}
        drawn[name] = (marker, pts)
    posted = {status: {(e["ts"], e["latency_ms"]) for e in events if e["status"] == status} for status in ("ok", "failed")}
    assert drawn == {"ok": ("circle", posted["ok"]), "failed": ("cross", posted["failed"])}
    assert list(drawn) == ["ok", "failed"]                            # the failed ones drawn over the rest
    legend = re.findall(r'<g class="legend" data-series="([^"]+)"[^>]*>.*?<text[^>]*>([^<]*)</text></g>', svg)
    assert legend == [("ok", "ok (18)"), ("failed", "failed (6)")]


def test_records_newest_first_numbers_right_aligned_paged(collector_client):
    _summaries(collector_client, [float(i) for i in range(dashboard.PAGE_ROWS + 20)])
    page = collector_client.get(f"/stream?{KEY}&kind=summary").get_data(as_text=True)
    body = page.split('<table id="records"')[1].split("</table>")[0]
    seqs = [int(s) for s in re.findall(r'<tr><td class="time"[^>]*>[^<]*</td><td class="num">(\d+)</td>', body)]
    assert len(seqs) == dashboard.PAGE_ROWS and seqs == sorted(seqs, reverse=True) and seqs[0] == dashboard.PAGE_ROWS + 19
    assert '<td class="num" data-value="119.0">119.0</td>' in body      # per_sec, a number: right-aligned
    older = re.search(r'<a href="([^"]+)" id="older">', page).group(1).replace("&amp;", "&")
    second = collector_client.get(older).get_data(as_text=True)
    body = second.split('<table id="records"')[1].split("</table>")[0]
    seqs2 = [int(s) for s in re.findall(r'<tr><td class="time"[^>]*>[^<]*</td><td class="num">(\d+)</td>', body)]
    assert seqs2 == list(range(19, -1, -1)) and 'id="older"' not in second and 'id="newer"' in second


def test_missing_stream_gets_a_clear_404_page(collector_client):
    reply = collector_client.get("/stream?host=nobody&run_id=r&source=sysnest")
    assert reply.status_code == 404 and reply.mimetype == "text/html"
    text = html.unescape(reply.get_data(as_text=True))
    assert "No stream of 'sysnest' from host 'nobody'" in text and 'href="/"' in text
    reply = collector_client.get("/no/such/page")
    assert reply.status_code == 404 and 'id="error"' in reply.get_data(as_text=True)
    assert collector_client.get("/api/nothing").get_json()["reason"] == "not_found"   # JSON paths stay JSON


@pytest.mark.parametrize("url", [f"/stream?{KEY}&sourc=x", "/?refresh=1", "/api/streams?hots=a",
                                 "/api/records?sorce=sysnest", "/metrics?x=1", "/api/overview?y=2"])
def test_unknown_query_parameters_are_refused_by_name(collector_client, url):
    _summaries(collector_client, [1.0])
    reply = collector_client.get(url)
    assert reply.status_code == 400
    body = reply.get_json()
    assert body["reason"] == "bad_query" and url.rsplit("&", 1)[-1].split("?")[-1].split("=")[0] in body["detail"]


def test_favicon(collector_client):
    reply = collector_client.get("/favicon.ico")
    assert reply.status_code == 200 and reply.mimetype == "image/svg+xml"
    assert collector_client.get("/static/favicon.svg").status_code == 200


def test_overview_json_lists_hosts_with_trends(collector_client):
    _summaries(collector_client, [10.0, 20.0, 30.0], host="pc-a")
    _summaries(collector_client, [5.0], host="pc-b")
    hosts = {h["host"]: h for h in collector_client.get("/api/overview").get_json()["hosts"]}
    assert set(hosts) == {"pc-a", "pc-b"}
    (metric,) = hosts["pc-a"]["metrics"]
    assert metric["source"] == "sysnest" and metric["records"] == 3 and metric["dropped"] == 0
    assert metric["trend"]["values"] == [10.0, 20.0, 30.0] and metric["trend"]["last"] == "30 syscalls/s"
    assert metric["running"] and not hosts["pc-a"]["quiet"]


def _post(client, host: str, source: str, records: list[dict], run_id: str = "run-a") -> None:
    for start in range(0, len(records), 50):
        reply = client.post("/data", json=ours(start // 50, host=host, run_id=run_id, source=source,
                                               records=records[start:start + 50]))
        assert reply.status_code == 200, reply.get_json()


def _hist(t: float, i: int, name: str, counts: list[int]) -> dict:
    buckets = [{"lo": 2 ** b, "hi": 2 ** (b + 1) - 1, "count": c} for b, c in enumerate(counts)]
    return envelope("cpuschedrun", t, i, "hist", name=name, unit="us", total=sum(counts), buckets=buckets)


def test_overview_trends_are_each_streams_newest_key_figures(collector_client):
    """Each stream's trend: the newest TREND_POINTS values of its registry key figure, read from its
    summary records (kept in the stream's row as batches arrive), in time order, other kinds left out,
    a summary lacking a field skipped: syscalls/s as recorded, cpuschedrun's run time as a share of a CPU,
    tcpconnlat's connects per second, cpuprofile's samples as a share of a CPU (a flame graph's metric
    has one too); the same read from the records when the row holds none (a database stored before
    0005) or holds another figure's untagged points (an older collector's, of the chart's field)."""
    t0, n = 1_750_000_000.0, dashboard.TREND_POINTS + 15
    expected: dict[tuple[str, str], list[float]] = {}
    for h, host in enumerate(("pc-a", "pc-b", "pc-c")):
        sysnest, sched, connects, profile = [], [], [], []
        for i in range(n):
            per_sec = 1000.0 * h + i * 1.5
            sysnest += [envelope("sysnest", t0 + i, i + 1, "row", pid=7, comm="x", syscall="read", count=99,
                                 total_us=5.0, per_sec=-1.0),
                        envelope("sysnest", t0 + i, i + 1, "summary", syscalls=int(per_sec), per_sec=per_sec,
                                 processes=1, errors=0, interval_s=1.0)]
            sched += [_hist(t0 + i, i + 1, "run_time", [i, h, 3]),
                      envelope("cpuschedrun", t0 + i, i + 1, "summary", run_ms=10.0 * (i + h), interval_s=2.0)]
            connects += [envelope("tcpconnlat", t0 + i, i + 1, "event", latency_ms=0.25, pid=1, comm="c"),
                         envelope("tcpconnlat", t0 + i, i + 1, "summary",
                                  connects="many" if i == n - 1 else i + h, interval_s=0.5)]   # no number: skipped
            profile += [envelope("cpuprofile", t0 + i, i + 1, "stack", pid=1, comm="c", count=5,
                                 frames=[{"name": "main"}]),
                        envelope("cpuprofile", t0 + i, i + 1, "summary", samples=i + h, frequency_hz=50, interval_s=1.0)]
        for source, records in (("sysnest", sysnest), ("cpuschedrun", sched), ("tcpconnlat", connects),
                                ("cpuprofile", profile)):
            _post(collector_client, host, source, records)
        newest = range(n - dashboard.TREND_POINTS, n)
        expected[(host, "sysnest")] = [1000.0 * h + i * 1.5 for i in newest]
        expected[(host, "cpuschedrun")] = [pytest.approx(10.0 * (i + h) / 2.0 / 10) for i in newest]   # % of a CPU
        expected[(host, "tcpconnlat")] = [(i + h) / 0.5 for i in range(n - 1 - dashboard.TREND_POINTS, n - 1)]
        expected[(host, "cpuprofile")] = [pytest.approx((i + h) / 50 * 100) for i in newest]
    # an older run of pc-a's sysnest: the overview shows the newest run's only
    _post(collector_client, "pc-a", "sysnest", [envelope("sysnest", t0 - 9000, 1, "summary", per_sec=7.0)],
          run_id="run-0")
    _post(collector_client, "pc-a", "sysnest", [envelope("sysnest", t0 + n, n + 1, "summary", per_sec=99999.0)])
    expected[("pc-a", "sysnest")] = expected[("pc-a", "sysnest")][1:] + [99999.0]

    def trends() -> dict:
        hosts = {h["host"]: h for h in collector_client.get("/api/overview").get_json()["hosts"]}
        return {(host, m["source"]): m["trend"]["values"] for host, h in hosts.items() for m in h["metrics"]}

    assert trends() == expected
    hosts = {h["host"]: h for h in collector_client.get("/api/overview").get_json()["hosts"]}
    assert {m["run_id"] for m in hosts["pc-a"]["metrics"]} == {"run-a"}
    last = {m["source"]: m["trend"]["last"] for m in hosts["pc-b"]["metrics"]}
    assert last["cpuprofile"] == f"{(n - 1 + 1) / 50 * 100:g}% CPU" and last["sysnest"].endswith(" syscalls/s")
    assert last["tcpconnlat"] == f"{(n - 2 + 1) / 0.5:g} connects/s" and last["cpuschedrun"].endswith("% CPU")
    store = collector_client.application.extensions["collector"].store
    # read from the records: the newest TREND_POINTS summaries, the one without a number among them
    from_records = {**expected, **{(host, "tcpconnlat"): [(i + h) / 0.5 for i in range(n - dashboard.TREND_POINTS, n - 1)]
                                   for h, host in enumerate(("pc-a", "pc-b", "pc-c"))}}
    for stored in ("NULL", "'[[1750000000.0, 5.0]]'"):   # none, or an older collector's untagged points
        with store.engine.begin() as conn:
            conn.execute(text(f"UPDATE streams SET trend = {stored}"))
        assert trends() == from_records


def test_a_late_batch_falls_into_the_trend_by_time(collector_client):
    t0 = 1_750_000_000.0
    late = [envelope("sysnest", t0 + i, i + 1, "summary", per_sec=float(i)) for i in range(0, 60, 2)]
    on_time = [envelope("sysnest", t0 + i, i + 1, "summary", per_sec=float(i)) for i in range(1, 60, 2)]
    for seq, records in ((1, on_time), (0, late)):   # the even seconds arrive after the odd ones
        assert collector_client.post("/data", json=ours(seq, host="pc-l", records=records)).status_code == 200
    (host,) = collector_client.get("/api/overview").get_json()["hosts"]
    assert host["metrics"][0]["trend"]["values"] == [float(i) for i in range(60 - dashboard.TREND_POINTS, 60)]


def test_overview_trend_of_an_unregistered_metric_or_field(collector_client):
    """A metric the registry does not know, or whose records lack the declared field: the first numeric
    field of its newest records, as the stream page charts it."""
    t0 = 1_750_000_000.0
    _post(collector_client, "pc-x", "homemade", [envelope("homemade", t0 + i, i + 1, "row", label="a", depth=2.0 * i)
                                                 for i in range(5)])
    _post(collector_client, "pc-x", "sysnest", [envelope("sysnest", t0 + i, i + 1, "summary", calls=3 * i)
                                                for i in range(4)])
    (host,) = collector_client.get("/api/overview").get_json()["hosts"]
    trends = {m["source"]: m["trend"] for m in host["metrics"]}
    assert trends["homemade"]["values"] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert trends["sysnest"]["values"] == [0.0, 3.0, 6.0, 9.0]
