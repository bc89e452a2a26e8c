"""What a POST's 200 promises a reader: its records are in /api/records at once (from any server process,
however the batch was grouped into a transaction and however its JSON was spaced and escaped), and
paging with next_cursor over records with equal timestamps yields each record once, with and without
the cgroup filter, on SQLite and on a real PostgreSQL (server_fixtures.py).

Seen: a PostgreSQL benchmark's /api/records?cgroup=PATH found 299 of 300 records that direct SQL found.
A body that orjson does not take (a 19-digit integer) was stored with the records' text as sent, so a
record sent as `"cgroup": "/x"` (spaces, or `\\/` escapes) escaped the query's `"cgroup":"/x"` text match."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from collector_payloads import envelope, ours
from server_fixtures import ServerProcess

from collector import api, store

T0 = 1_770_000_000.0
LONG = 1_770_000_000_123_456_789  # a nanosecond clock: 19 digits, past what orjson's parse is trusted with
STYLES = ("compact", "spaced", "spaced_long", "escaped_long")


def body(payload: dict, style: str) -> str:
    """The payload as a client may well write it: compact, json's default spacing, and, with a long
    integer in each record (the other parser's path), spaced or with every '/' and non-ASCII escaped
    (`\\/`, upper-case `\\u00FC`)."""
    if style.endswith("_long"):
        payload = {**payload, "records": [{**r, "ns": LONG} for r in payload["records"]]}
    if style == "compact":
        return json.dumps(payload, separators=(",", ":"))
    text = json.dumps(payload)
    if style == "escaped_long":
        text = re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), text.replace("/", "\\/"))
    return text


def marks(items: list[dict]) -> list[str]:
    return [item["record"]["mark"] for item in items]


def test_every_acknowledged_record_is_readable_at_once(db_url):
    """Six threads post 10 batches each (three streams, two threads a stream, 4 ways of writing the
    JSON) to two server processes; right after each 200, the other process must give all the batch's
    records, by its cgroup and by its stream and time."""
    servers = [ServerProcess("--db", db_url, "--threads", "8") for _ in range(2)]
    try:
        def run(thread: int) -> list[str]:
            problems = []
            session = requests.Session()
            host = f"pc{thread % 3}"
            for k in range(10):
                seq = thread // 3 * 100 + k
                group = f"/vis/t{thread}/b{k}/ünï"
                ts = T0 + k  # the two threads of a stream post the same times: ties across batches
                records = [envelope("sysnest", ts, seq, "row", mark=f"{thread}.{k}.{i}", cgroup=group, pid=i)
                           for i in range(10)]
                style = STYLES[(thread + k) % len(STYLES)]
                writer, reader = servers[k % 2], servers[1 - k % 2]
                reply = session.post(writer.url + "/data", data=body(ours(seq, host=host, records=records), style),
                                     headers={"Content-Type": "application/json"}, timeout=60)
                if reply.status_code != 200:
                    problems.append(f"{group} {style}: POST {reply.status_code} {reply.text[:200]}")
                    continue
                want = sorted(r["mark"] for r in records)
                for query in ({"cgroup": group}, {"cgroup": f"/vis/t{thread}", "cgroup_match": "tree",
                                                   "since": ts, "until": ts},
                              {"host": host, "run_id": "run-a", "source": "sysnest", "since": ts, "until": ts}):
                    items = session.get(reader.url + "/api/records", params=query, timeout=60).json()["records"]
                    got = sorted(m for m in marks(items) if m.startswith(f"{thread}.{k}."))
                    if got != want:
                        problems.append(f"{group} {style} {query}: {len(got)} of {len(want)} readable after the 200")
            return problems

        with ThreadPoolExecutor(6) as pool:
            problems = [p for found in pool.map(run, range(6)) for p in found]
        assert problems == []
        everything = {f"{t}.{k}.{i}" for t in range(6) for k in range(10) for i in range(10)}
        for query in ({}, {"cgroup": "/vis", "cgroup_match": "tree"}):
            got = page_through(lambda q: _text(requests.get(servers[0].url + "/api/records", params=q, timeout=60)),
                               {**query, "limit": 7})
            assert sorted(got) == sorted(everything), query
    finally:
        for server in servers:
            server.stop()


def _text(reply) -> tuple[int, str, str | None]:
    """(status, body, X-Next-Cursor) of a requests or a Flask test client's response."""
    text = reply.get_data(as_text=True) if hasattr(reply, "get_data") else reply.text
    return reply.status_code, text, reply.headers.get("X-Next-Cursor")


def page_through(get, query: dict) -> list[str]:
    """Every mark the pages give, following next_cursor (JSON) or X-Next-Cursor (NDJSON); each record
    after the one before in (ts, id) order. get(query) -> _text's triple."""
    seen, last, cursor = [], None, None
    for _ in range(10_000):
        status, text, header = get({**query, **({"cursor": cursor} if cursor else {})})
        assert status == 200, text[:300]
        if query.get("format") == "ndjson":
            items, cursor = [json.loads(line) for line in text.splitlines()], header
        else:
            page = json.loads(text)
            items, cursor = page["records"], page["next_cursor"]
            assert cursor == header
        for item in items:
            assert last is None or (item["ts"], item["id"]) > last, (item["ts"], item["id"], last)
            last = (item["ts"], item["id"])
        seen += marks(items)
        if cursor is None:
            return seen
    raise AssertionError("paging did not end")


GROUPS = ("/tie/a", "/tie/a/sub", "/tie/b", "/tie/ab")


@pytest.fixture
def ties(collector_client):
    """60 records on 5 timestamps (12 each), posted in batches of mixed times and streams, so that ids
    do not follow ts, and of varied lengths; in 4 cgroups (some none), over every way of writing JSON."""
    records = []
    for n in range(60):
        ts = T0 + [3, 1, 4, 1.5, 2][n % 5]
        fields = {"mark": f"m{n}", "pad": "x" * (n * 37 % 300)}
        if n % 9:
            fields["cgroup"] = GROUPS[n // 12 % len(GROUPS)]  # every batch (n % 12) holds every group
        records.append(envelope("sysnest", ts, n, "row", **fields))
    for b in range(12):
        host = f"pc{b % 3}"
        reply = collector_client.post("/data", data=body(ours(b, host=host, records=records[b::12]), STYLES[b % 4]),
                                      content_type="application/json")
        assert reply.status_code == 200, reply.get_json()
    for b, record in enumerate(records):
        record["host"] = f"pc{b % 12 % 3}"
    return collector_client, records


@pytest.mark.parametrize("query", [{}, {"cgroup": "/tie/a"}, {"cgroup": "/tie/a", "cgroup_match": "tree"},
                                   {"cgroup": "/tie", "cgroup_match": "tree", "host": "pc1"}, {"host": "pc2"}])
def test_paging_over_equal_timestamps_gives_each_record_once(ties, monkeypatch, query):
    """Pages of 1, 5, 11, 12, 13 and 1000 records as JSON, of 2 and 12 as NDJSON, and pages cut by their
    size (about three records' text) and read in chunks of 3: every record the filter takes comes once."""
    client, records = ties

    def wanted(record: dict) -> bool:
        group, path = record.get("cgroup"), query.get("cgroup")
        if query.get("host") not in (None, record["host"]):
            return False
        if path is None:
            return True
        return group == path or (query.get("cgroup_match") == "tree" and group is not None
                                 and group.startswith(path + "/"))

    expected = sorted(r["mark"] for r in records if wanted(r))
    assert expected

    def get(q):
        return _text(client.get("/api/records", query_string=q))

    for limit, fmt in [(1, "json"), (5, "json"), (11, "json"), (12, "json"), (13, "json"), (1000, "json"),
                       (2, "ndjson"), (12, "ndjson")]:
        got = page_through(get, {**query, "limit": limit, "format": fmt})
        assert sorted(got) == expected, (limit, fmt)
    monkeypatch.setattr(api, "PAGE_BYTES", 600)
    monkeypatch.setattr(store, "READ_CHUNK", 3)
    monkeypatch.setattr(store, "CHUNK_BYTES", 400)
    for limit in (4, 1000):
        got = page_through(get, {**query, "limit": limit})
        assert sorted(got) == expected, ("by size", limit)


def test_a_cgroup_is_found_however_its_record_was_encoded(collector_client):
    """A path with DEL in it: orjson leaves it as it is in an ASCII record, json escapes it (\\u007f) in a
    record that also holds non-ASCII text; the query finds both."""
    path = "/odd/a\x7fb"
    records = [envelope("sysnest", T0, 0, "row", mark="ascii", cgroup=path),
               envelope("sysnest", T0, 0, "row", mark="unicode", cgroup=path, comm="ünï")]
    reply = collector_client.post("/data", data=json.dumps(ours(0, records=records), ensure_ascii=False).encode(),
                                  content_type="application/json")
    assert reply.status_code == 200, reply.get_json()
    for query in ({"cgroup": path}, {"cgroup": "/odd", "cgroup_match": "tree"}):
        items = collector_client.get("/api/records", query_string=query).get_json()["records"]
        assert sorted(marks(items)) == ["ascii", "unicode"], query
