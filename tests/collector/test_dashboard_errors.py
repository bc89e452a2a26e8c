"""A bad query on one of the dashboard's pages: a browser (Accept: text/html first) gets an HTML page
with the reason and the 4xx; curl, scripts and API clients get the JSON reason, as before."""

from __future__ import annotations

import html

import pytest
from collector_payloads import envelope, ours

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
STREAM = "/stream?host=lab-pc-01&run_id=run-a&source=sysnest"
BAD_QUERIES = [
    ("/compare", "source is required"),
    ("/compare?source=sysnest&range=bogus", "range"),
    (f"{STREAM}&range=bogus", "range"),
    (f"{STREAM}&page=0", "page must be an integer from 1 to"),
    (f"{STREAM}&since=20&until=10", "since is after until"),
    ("/?sorce=sysnest", "unknown parameter(s): sorce"),
]


@pytest.fixture
def client(collector_client):
    records = [envelope("sysnest", 1_750_000_000.0 + i, i + 1, "summary", syscalls=10, per_sec=10.0, processes=1,
                        errors=0, interval_s=1.0) for i in range(3)]
    assert collector_client.post("/data", json=ours(0, records=records)).status_code == 200
    return collector_client


@pytest.mark.parametrize(("url", "reason"), BAD_QUERIES)
def test_a_browser_gets_an_html_page_with_the_reason(client, url, reason):
    reply = client.get(url, headers=BROWSER)
    assert reply.status_code == 400
    assert reply.mimetype == "text/html"
    page = reply.get_data(as_text=True)
    assert '<h1 id="error">400' in page
    detail = html.unescape(page.split('<p id="error-detail">', 1)[1].split("</p>", 1)[0])
    assert reason in detail
    assert "Back to the lab overview" in page
    assert reply.headers["Content-Security-Policy"]          # the pages' own headers, as every page


@pytest.mark.parametrize(("url", "reason"), BAD_QUERIES)
def test_other_clients_still_get_the_json_reason(client, url, reason):
    for accept in (None, "*/*", "application/json", "application/json,text/html;q=0.5"):
        reply = client.get(url, headers={"Accept": accept} if accept else {})
        assert reply.status_code == 400 and reply.mimetype == "application/json", accept
        body = reply.get_json()
        assert body["status"] == "error" and body["reason"] == "bad_query" and reason in body["detail"]


def test_the_json_paths_answer_json_whatever_the_browser_asks(client):
    reply = client.get("/api/records?limit=x", headers=BROWSER)
    assert reply.status_code == 400 and reply.get_json()["reason"] == "bad_query"
