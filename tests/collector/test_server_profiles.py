"""A stream's profile over a time range: /api/profile's folded, speedscope and pprof exports carry the
posted stack records' own totals (SQLite and PostgreSQL), ranges select the records they name, compmem
(a snapshot metric) shows its newest interval, the stream page draws the flame graph with zoom and
search, and a bad query is a 400 with a JSON reason, never a 5xx."""

from __future__ import annotations

import re

import pytest
from pprof_decode import decode
from stack_posts import post_intervals, sample

from profile_data import Frame, Profile, from_records, parse_folded
from profile_data.flame_svg import WIDTH, render

KEY = "host=lab-pc-01&run_id=run-a"


def stack_total_ns(records: list[dict]) -> int:
    return sum(round(r["total_ms"] * 1e6) for r in records if r.get("level") == "stack")


def folded(client, source: str, query: str = "") -> Profile:
    answer = client.get(f"/api/profile?{KEY}&source={source}&format=folded{query}")
    assert answer.status_code == 200, answer.get_json()
    return parse_folded(answer.get_data(as_text=True), "ns")


def test_folded_export_of_the_run_is_every_posted_stack(collector_client):
    posted = post_intervals(collector_client, "offcpu", sample("offcpu"), 4)
    exported = folded(collector_client, "offcpu", "&range=run")
    expected = from_records(posted, "total_ms", "ns")
    assert exported.total == stack_total_ns(posted) == expected.total
    assert {";".join(f.name for f in s): w for s, w in exported.stacks.items()} == \
        {";".join(f.name for f in s): w for s, w in expected.stacks.items()}


def test_ranges_select_their_records(collector_client):
    posted = post_intervals(collector_client, "offcpu", sample("offcpu"), 4)
    newest = max(r["ts"] for r in posted if r.get("level") == "stack")
    run = stack_total_ns(posted)
    last = [r for r in posted if r.get("interval") == max(p["interval"] for p in posted)]
    assert 0 < folded(collector_client, "offcpu", "&range=latest").total == stack_total_ns(last) < run
    assert 0 < folded(collector_client, "offcpu", "&range=15s").total == stack_total_ns(
        [r for r in posted if r["ts"] >= newest - 15]) < run
    since, until = posted[0]["ts"] + 5, posted[0]["ts"] + 25
    assert 0 < folded(collector_client, "offcpu", f"&since={since}&until={until}").total == stack_total_ns(
        [r for r in posted if since <= r["ts"] <= until]) < run


def test_pprof_and_speedscope_exports_carry_the_same_totals(collector_client, profile_pb2):  # noqa: F811
    posted = post_intervals(collector_client, "offcpu", sample("offcpu"), 3)
    answer = collector_client.get(f"/api/profile?{KEY}&source=offcpu&format=pprof")
    assert answer.status_code == 200 and answer.mimetype == "application/octet-stream"
    stacks, _strings, types = decode(profile_pb2, answer.data)
    assert types == [("time", "nanoseconds")] and sum(stacks.values()) == stack_total_ns(posted)
    document = collector_client.get(f"/api/profile?{KEY}&source=offcpu&format=speedscope").get_json()
    assert round(sum(document["profiles"][0]["weights"])) == stack_total_ns(posted)


def test_compmem_range_is_its_newest_interval_not_a_sum(collector_client):
    posted = post_intervals(collector_client, "compmem", sample("compmem"), 3)
    newest = [r for r in posted if r.get("level") == "stack" and r["interval"] == posted[-1]["interval"]]
    answer = collector_client.get(f"/api/profile?{KEY}&source=compmem&range=run")
    exported = parse_folded(answer.get_data(as_text=True), "bytes")
    assert exported.total == sum(r["outstanding_bytes"] for r in newest) > 0


def test_stream_page_draws_the_flame_graph_zooms_and_searches(collector_client):
    post_intervals(collector_client, "offcpu", sample("offcpu"), 2)
    page = collector_client.get(f"/stream?{KEY}&source=offcpu&range=run").get_data(as_text=True)
    names = set(re.findall(r'<g class="frame" data-name="([^"]*)"', page))
    assert {"python", "epoll_wait", "do_epoll_wait"} <= names and "__schedule" not in names   # ends where it blocked
    with_scheduler = collector_client.get(f"/stream?{KEY}&source=offcpu&range=run&scheduler=on").get_data(as_text=True)
    assert "__schedule" in set(re.findall(r'<g class="frame" data-name="([^"]*)"', with_scheduler))
    zoom = re.search(r'<a href="([^"]*focus=python#flame)">', page)
    assert zoom, "the python process frame links to its zoom"
    zoomed = collector_client.get(zoom.group(1).replace("&amp;", "&")).get_data(as_text=True)
    assert 'id="flame-reset"' in zoomed
    assert re.search(r'data-name="python"[^>]*><title>[^<]*</title><rect x="0.0" y="\d+" width="1199.5"', zoomed)
    searched = collector_client.get(f"/stream?{KEY}&source=offcpu&range=run&search=EPOLL").get_data(as_text=True)
    share = re.search(r'id="flame-match">[^<]*, ([0-9.]+) %', searched)
    assert share and 0 < float(share.group(1)) < 100
    assert "rgb(230,0,230)" in searched


def test_page_of_a_stream_without_stacks_has_no_flame_graph(collector_client):
    post_intervals(collector_client, "sysnest", [], 1)
    assert collector_client.post("/data", json={"schema": 2, "timestamp": 1.0e9, "metric": "sysnest",
                                                "batch_id": "x", "sequence": 1, "host": "lab-pc-01",
                                                "run_id": "run-a", "records": []}).status_code == 200
    page = collector_client.get(f"/stream?{KEY}&source=sysnest").get_data(as_text=True)
    assert 'id="flame"' not in page


@pytest.mark.parametrize("query", ["&range=5x", "&range=0s", "&range=", "&range=99999999h", "&format=svg",
                                   "&since=now", "&until=inf", "&since=5&until=4", "&focus=a", "&sourc=offcpu",
                                   "&since=-1", "&range=" + "9" * 400])
def test_bad_profile_query_is_400_with_a_reason(collector_client, query):
    post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    answer = collector_client.get(f"/api/profile?{KEY}&source=offcpu{query}")
    if query == "&range=":  # empty: the default, the whole run
        assert answer.status_code == 200
        return
    assert answer.status_code == 400, answer.data[:200]
    assert answer.get_json()["reason"] == "bad_query" and answer.get_json()["detail"]


def test_profile_of_no_stream_is_404_and_page_range_errors_are_400(collector_client):
    post_intervals(collector_client, "offcpu", sample("offcpu"), 1)
    assert collector_client.get(f"/api/profile?{KEY}&source=nope").status_code == 404
    assert collector_client.get("/api/profile?source=offcpu").status_code == 200  # a selection: every stream
    assert collector_client.get("/api/profile?host=lab-pc-01&run_id=run-a").status_code == 400  # no metric
    answer = collector_client.get(f"/stream?{KEY}&source=offcpu&range=soon")
    assert answer.status_code == 400 and answer.get_json()["reason"] == "bad_query"
    assert collector_client.get(f"/stream?{KEY}&source=offcpu&focus=no;such;path&search=%00").status_code in (200, 400)


def test_flame_svg_widths_are_shares_and_narrow_frames_are_counted_not_drawn():
    proc = Frame("p", "", "process")
    wide = [((proc, Frame("a")), 600.0), ((proc, Frame("b")), 399.0)]
    profile = Profile("samples", wide + [((proc, Frame(f"tiny{i}")), 0.0001) for i in range(20)])
    graph = render(profile)
    widths = {name: float(w) for name, w in re.findall(r'data-name="([^"]*)"[^>]*><title>[^<]*</title>'
                                                         r'<rect x="[^"]*" y="[^"]*" width="([^"]*)"', graph.svg)}
    assert abs(widths["a"] + 0.5 - 600 / profile.total * WIDTH) < 0.2
    assert abs(widths["b"] + 0.5 - 399 / profile.total * WIDTH) < 0.2
    assert graph.hidden == 20 and not any(n.startswith("tiny") for n in widths)
    assert render(profile, search="A").matched == 600.0
