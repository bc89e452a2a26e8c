"""Contract tests of the collector (server.py) through app.test_client(), each on SQLite and on a
real PostgreSQL (a private cluster, see server_fixtures.py)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import time

import pytest
from collector_payloads import ORIGINAL_LINES, as_schema_1, envelope, original, ours, prometheus_samples, stored
from stack_posts import cpuprofile_stacks


def post(client, payload, **kw):
    return client.post("/data", data=json.dumps(payload), content_type="application/json", **kw)


def stream_of(client, **key) -> dict:
    found = [s for s in client.get("/api/streams").get_json()["streams"]
             if all(s[k] == v for k, v in key.items())]
    assert len(found) == 1, found
    return found[0]


# --- the payloads: ours (schema 2, and 1 before it) and the original client's ---------------------------
def test_our_payload_is_stored_with_its_fields(collector_client):
    payload = ours(0, dropped=7)
    reply = post(collector_client, payload)
    assert reply.status_code == 200
    body = reply.get_json()
    assert body == {**body, "status": "ok", "duplicate": False, "missing": [], "missing_count": 0,
                    "host": "lab-pc-01", "run_id": "run-a", "source": "sysnest", "sequence": 0,
                    "stored_records": 2, "batch_id": payload["batch_id"]}  # the client's proof of delivery
    assert reply.headers["Accept-Encoding"] == "gzip"
    records = collector_client.get("/api/records").get_json()["records"]
    assert [r["record"] for r in records] == payload["records"]
    assert {(r["host"], r["run_id"], r["source"], r["sequence"], r["kind"], r["batch_id"]) for r in records} == {
        ("lab-pc-01", "run-a", "sysnest", 0, "row", payload["batch_id"]),
        ("lab-pc-01", "run-a", "sysnest", 0, "summary", payload["batch_id"])}
    assert [r["ts"] for r in records] == [m["ts"] for m in payload["records"]]
    assert stream_of(collector_client, host="lab-pc-01")["dropped"] == 7


def test_a_note_record_is_stored_and_read_by_its_kind(collector_client):
    """The app's `note` (the overhead budget switched or stopped the metric, docs/ndjson.md) is kept in the
    metric's stream beside its records, and found by kind, so a reader knows where the data changed."""
    note = envelope("sysnest", 1_750_000_000.5, 1, "note", source="overhead budget", action="sample",
                    asked="sample", budget_pct=5.0, total_pct=6.2, cost_pct=4.1, over_s=10.0, args={"sample": 8},
                    text="over the overhead budget for 10 s: switched to its sampling mode (sample 8)")
    payload = ours(0)
    payload["records"].append(note)
    assert post(collector_client, payload).status_code == 200
    found = collector_client.get("/api/records?kind=note").get_json()["records"]
    assert [(r["kind"], r["source"], r["record"]) for r in found] == [("note", "sysnest", note)]
    assert len(collector_client.get("/api/records").get_json()["records"]) == 3


def test_a_batch_of_schema_1_lands_as_the_same_batch_of_schema_2(collector_client):
    """Schema 2 renamed source_script to metric and metrics to records; an outbox written before holds
    schema 1 batches, and those store exactly what their schema 2 twins do: records (a stack's frames
    and a long integer, the body parser's slower path, among them), stream totals, trend, answer."""
    stacks = [{**r, "ts": 1_750_000_000.5} for r in cpuprofile_stacks(0)]
    batches = [ours(0), ours(1, records=[envelope("sysnest", 1_750_000_001.0, 2, ns=2**70)]),
               ours(0, source="cpuprofile", records=stacks)]
    answers = {}
    for host, convert in (("pc-new", dict), ("pc-old", as_schema_1)):
        for batch in batches:
            body = convert({**batch, "host": host, "batch_id": f"{host}-{batch['metric']}-{batch['sequence']}"})
            assert ("source_script" in body) == (host == "pc-old")
            reply = collector_client.post("/data", data=json.dumps(body), content_type="application/json")
            assert reply.status_code == 200, reply.get_json()
            answers.setdefault(host, []).append(reply.get_json())

    def landed(host: str) -> list:
        records = collector_client.get(f"/api/records?host={host}").get_json()["records"]
        streams = collector_client.get(f"/api/streams?host={host}").get_json()["streams"]
        (overview,) = [h for h in collector_client.get("/api/overview").get_json()["hosts"] if h["host"] == host]
        # what names the host or the batch, and what depends on the time of arrival
        drop = ("host", "batch_id", "id", "url", "first_seen", "last_seen", "records_per_s")
        return [[{k: v for k, v in item.items() if k not in drop} for item in items]
                for items in (answers[host], records, streams, overview["metrics"])]

    new, old = landed("pc-new"), landed("pc-old")
    assert new == old
    assert [r["record"] for r in collector_client.get("/api/records?host=pc-old").get_json()["records"]] == sorted(
        (r for b in batches for r in b["records"]), key=lambda r: r["ts"])    # as the API lists them


def test_original_client_payloads_are_stored_and_shown(collector_client):
    t0 = time.time() - 60
    payloads = [original(seq, t0 + 2 * seq) for seq in range(3)]
    for p in payloads:
        reply = post(collector_client, p)
        assert reply.status_code == 200, reply.get_json()
        assert reply.get_json()["duplicate"] is False
    runs = {r["run_id"] for r in collector_client.get("/api/records").get_json()["records"]}
    assert len(runs) == 1 and runs.pop().startswith("legacy-")
    stream = stream_of(collector_client, source="sysnest")
    # the test client's remote address stands in for the host the original client never sent
    assert (stream["host"], stream["batches"], stream["records"], stream["missing"], stream["legacy"]) == (
        "127.0.0.1", 3, 3 * len(ORIGINAL_LINES), [], True)
    records = collector_client.get("/api/records?source=sysnest").get_json()["records"]
    assert [r["record"] for r in records] == [m for p in payloads for m in p["metrics"]]
    assert {r["kind"] for r in records} == {"legacy"}
    page = collector_client.get("/").get_data(as_text=True)
    assert "127.0.0.1" in page and stream["run_id"] in page and "original client" in page
    detail = collector_client.get("/stream", query_string={"host": "127.0.0.1", "run_id": stream["run_id"],
                                                           "source": "sysnest"}).get_data(as_text=True)
    assert "futex\t\t20299\t258074820.348" in detail and "epoll_wait" in detail


def test_original_record_without_data_key_is_stored(collector_client):
    """The original server answered 500 to this; any object is a record of the original client."""
    payload = original(0)
    payload["metrics"] = [{"type": "raw_output"}, {"something": 1}]
    assert post(collector_client, payload).status_code == 200
    assert stored(collector_client) == (1, 2)


def test_restarted_original_client_starts_a_new_run(collector_client):
    t0 = time.time() - 600
    for seq in range(4):
        assert post(collector_client, original(seq, t0 + 2 * seq)).status_code == 200
    first_run = stream_of(collector_client)["run_id"]
    # restarted a minute later: sequence 0 again, new batch ids
    replies = [post(collector_client, original(seq, t0 + 60 + 2 * seq)).get_json() for seq in range(2)]
    assert replies[0]["run_id"] != first_run and replies[1]["run_id"] == replies[0]["run_id"]
    assert all(r["duplicate"] is False and r["missing"] == [] for r in replies)
    runs = {s["run_id"]: s for s in collector_client.get("/api/streams").get_json()["streams"]}
    assert {k: (v["batches"], v["missing_count"]) for k, v in runs.items()} == {first_run: (4, 0),
                                                                                 replies[0]["run_id"]: (2, 0)}


def test_restart_whose_first_batch_was_lost_is_still_a_new_run(collector_client):
    t0 = time.time() - 600
    for seq in (0, 2, 3):  # seq 1 lost, so far
        post(collector_client, original(seq, t0 + 2 * seq))
    run = stream_of(collector_client)["run_id"]
    assert stream_of(collector_client)["missing"] == [1]
    # a restarted client's seq 0 is lost; its seq 1 is made after the old run's seq 3: not a gap filler
    reply = post(collector_client, original(1, t0 + 100)).get_json()
    assert reply["run_id"] != run and reply["missing"] == [0]
    # the old run's own late seq 1 (made between its seq 0 and 2) still fills the old gap
    reply = post(collector_client, original(1, t0 + 2)).get_json()
    assert reply["run_id"] == run and reply["missing"] == []


def test_original_client_can_pass_its_token_in_the_url(make_collector):
    client = make_collector(tokens={"s3cret-url-token": "pc07"}).test_client()
    assert post(client, original(0)).status_code == 401
    assert post(client, original(0), query_string={"token": "s3cret-url-token"}).status_code == 200
    (stream,) = client.get("/api/streams?token=s3cret-url-token").get_json()["streams"]  # reading needs it too
    assert stream["token_name"] == "pc07"


# --- exactly once, gaps ------------------------------------------------------------------------------
def test_retried_batch_is_acknowledged_not_stored_twice(collector_client):
    payload = ours(0)
    first, again = post(collector_client, payload).get_json(), post(collector_client, payload).get_json()
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert again["status"] == "ok" and again["stored_records"] == 0
    assert stored(collector_client) == (1, 2)


def test_out_of_order_and_duplicate_arrival(collector_client):
    payloads = [ours(seq) for seq in range(100)]
    rng = random.Random(6)
    deliveries = payloads + rng.sample(payloads, 20)
    rng.shuffle(deliveries)
    duplicates = sum(post(collector_client, p).get_json()["duplicate"] for p in deliveries)
    assert duplicates == 20
    stream = stream_of(collector_client, run_id="run-a")
    assert (stream["batches"], stream["records"], stream["highest"], stream["missing"], stream["missing_count"]) == (
        100, 200, 99, [], 0)
    samples = prometheus_samples(collector_client.get("/metrics").get_data(as_text=True))
    assert samples["collector_batches_total"] == 100
    assert samples["collector_records_total"] == 200
    assert samples["collector_duplicates_total"] == 20
    assert samples["collector_missing_sequences"] == 0


def test_gap_is_reported_then_filled_by_a_late_batch(collector_client):
    assert post(collector_client, ours(0)).get_json()["missing"] == []
    reply = post(collector_client, ours(4)).get_json()
    assert (reply["missing"], reply["missing_count"], reply["highest"]) == ([1, 2, 3], 3, 4)
    assert post(collector_client, ours(2)).get_json()["missing"] == [1, 3]
    assert stream_of(collector_client)["missing_ranges"] == [[1, 1], [3, 3]]
    post(collector_client, ours(1))
    assert post(collector_client, ours(3)).get_json()["missing"] == []


def test_missing_first_sequence_is_a_gap(collector_client):
    assert post(collector_client, ours(2)).get_json()["missing"] == [0, 1]


def test_a_new_run_is_a_new_stream_not_a_gap(collector_client):
    for seq in range(3):
        post(collector_client, ours(seq, run_id="run-a"))
    reply = post(collector_client, ours(0, run_id="run-b")).get_json()
    assert (reply["run_id"], reply["missing"], reply["highest"]) == ("run-b", [], 0)
    assert {s["run_id"]: s["batches"] for s in collector_client.get("/api/streams").get_json()["streams"]} == {
        "run-a": 3, "run-b": 1}


def test_streams_are_per_host_run_and_source(collector_client):
    for host in ("pc1", "pc2"):
        for source in ("sysnest", "offcpu"):
            post(collector_client, ours(0, host=host, source=source))
    post(collector_client, ours(2, host="pc2", source="offcpu"))
    streams = {(s["host"], s["source"]): s["missing"] for s in collector_client.get("/api/streams").get_json()["streams"]}
    assert streams == {("pc1", "sysnest"): [], ("pc1", "offcpu"): [], ("pc2", "sysnest"): [], ("pc2", "offcpu"): [1]}


def test_huge_sequence_is_bounded_and_its_gap_listed_in_part(collector_client):
    top = 2**53 - 1
    records = [envelope("sysnest", 1_750_000_000.0, 1, per_sec=1.0)]
    reply = post(collector_client, {**ours(0, records=records), "sequence": top})
    assert reply.status_code == 200
    body = reply.get_json()
    assert body["missing_count"] == top and body["missing_truncated"] is True
    assert body["missing"] == list(range(1000))
    reply = post(collector_client, {**ours(0, records=records), "sequence": 2**53})
    assert (reply.status_code, reply.get_json()["reason"]) == (400, "bad_value")


# --- bad input -----------------------------------------------------------------------------------------
def _without(key, payload=None):
    payload = ours(0) if payload is None else payload
    del payload[key]
    return payload


BAD_BODIES = [
    ("not JSON", b"this is not json", "not_json"),
    ("invalid UTF-8", b'{"a": "\xff"}', "not_json"),
    ("NaN", b'{"timestamp": NaN}', "not_json"),
    ("empty", b"", "not_json"),
    ("array", b"[1, 2]", "wrong_type"),
    ("string", b'"hello"', "wrong_type"),
    ("no batch_id", _without("batch_id"), "missing_key"),
    ("no records", _without("records"), "missing_key"),
    ("no metric", _without("metric"), "missing_key"),
    ("no metrics (schema 1)", _without("metrics", as_schema_1(ours(0))), "missing_key"),
    ("no source_script (schema 1)", _without("source_script", as_schema_1(ours(0))), "missing_key"),
    ("schema 2 with schema 1's names", {**as_schema_1(ours(0)), "schema": 2}, "missing_key"),
    ("schema 1 with schema 2's names", {**ours(0), "schema": 1}, "missing_key"),
    ("no sequence", _without("sequence"), "missing_key"),
    ("no host", _without("host"), "missing_key"),
    ("no run_id", _without("run_id"), "missing_key"),
    ("no host (schema 1)", _without("host", as_schema_1(ours(0))), "missing_key"),
    ("sequence string", {**ours(0), "sequence": "3"}, "wrong_type"),
    ("sequence float", {**ours(0), "sequence": 3.0}, "wrong_type"),
    ("sequence bool", {**ours(0), "sequence": True}, "wrong_type"),
    ("negative sequence", {**ours(0), "sequence": -1}, "bad_value"),
    ("sequence 2**64", {**ours(0), "sequence": 2**64}, "bad_value"),
    ("timestamp string", {**ours(0), "timestamp": "now"}, "wrong_type"),
    ("timestamp in ms", {**ours(0), "timestamp": 1.7e12}, "bad_value"),
    ("timestamp inf", b'{"timestamp": 1e999}', "bad_value"),
    ("records object", {**ours(0), "records": {"a": 1}}, "wrong_type"),
    ("metrics object (schema 1)", {**as_schema_1(ours(0)), "metrics": {"a": 1}}, "wrong_type"),
    ("record not object", {**ours(0), "records": [1, 2]}, "bad_record"),
    ("record list", {**ours(0), "records": [[]]}, "bad_record"),
    ("record without kind", {**ours(0), "records": [{"metric": "sysnest", "ts": 1.0}]}, "bad_record"),
    ("record ts string", {**ours(0), "records": [envelope("sysnest", 1.0, 1) | {"ts": "x"}]}, "bad_record"),
    ("record without kind (schema 1)", {**as_schema_1(ours(0)), "metrics": [{"metric": "sysnest"}]}, "bad_record"),
    ("original record not object", {**original(0), "metrics": ["raw line"]}, "bad_record"),
    ("schema 3", {**ours(0), "schema": 3}, "bad_value"),
    ("schema 0", {**as_schema_1(ours(0)), "schema": 0}, "bad_value"),
    ("empty batch_id", {**ours(0), "batch_id": ""}, "bad_value"),
    ("batch_id with newline", {**ours(0), "batch_id": "a\nb"}, "bad_value"),
    ("host NUL", {**ours(0), "host": "pc\x00"}, "bad_value"),
    ("long run_id", {**ours(0), "run_id": "r" * 129}, "bad_value"),
    ("dropped negative", {**ours(0), "dropped": -1}, "bad_value"),
    ("lone surrogate", b'{"timestamp": 1, "x": "\\ud800"}', "bad_unicode"),
    ("deep nesting", {**ours(0), "records": [envelope("sysnest", 1.0, 1) | {"x": json.loads("[" * 40 + "]" * 40)}]},
     "too_deep"),
    ("very deep nesting", b"[" * 200_000 + b"]" * 200_000, "too_deep"),
]


@pytest.mark.parametrize("body,reason", [(b, r) for _, b, r in BAD_BODIES], ids=[i for i, _, _ in BAD_BODIES])
def test_bad_input_gets_a_4xx_reason_and_stores_nothing(collector_client, body, reason):
    post(collector_client, ours(0))
    before = stored(collector_client)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = collector_client.post("/data", data=data, content_type="application/json")
    assert reply.status_code == 400, reply.get_data(as_text=True)
    assert reply.get_json()["status"] == "error" and reply.get_json()["reason"] == reason
    assert stored(collector_client) == before
    samples = prometheus_samples(collector_client.get("/metrics").get_data(as_text=True))
    assert samples[f'collector_rejected_total{{reason="{reason}"}}'] == 1


def test_body_over_the_limit_is_413_json(make_collector):
    client = make_collector(max_body=64 * 1024).test_client()
    big = ours(0, records=[envelope("sysnest", 1.0, 1, pad="x" * 70_000)])
    reply = post(client, big)
    assert reply.status_code == 413 and reply.get_json()["reason"] == "too_large"
    assert stored(client) == (0, 0)


def test_gzip_body_is_accepted(collector_client):
    payload = ours(0)
    reply = collector_client.post("/data", data=gzip.compress(json.dumps(payload).encode()),
                                  headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert reply.status_code == 200 and reply.get_json()["stored_records"] == 2
    assert collector_client.get("/api/records").get_json()["records"][0]["record"] == payload["records"][0]


def test_gzip_bomb_is_413_and_bad_gzip_400(make_collector):
    client = make_collector(max_body=64 * 1024).test_client()
    # 64 KiB compressed to a few hundred bytes: the limit holds for the decompressed size
    bomb = gzip.compress(b'{"pad": "' + b"x" * (1 << 20) + b'"}')
    assert len(bomb) < 64 * 1024
    reply = client.post("/data", data=bomb, headers={"Content-Encoding": "gzip"})
    assert reply.status_code == 413 and reply.get_json()["reason"] == "too_large"
    payload = gzip.compress(json.dumps(ours(0)).encode())
    for body, reason in ((b"not gzip", "bad_gzip"), (payload[:-10], "bad_gzip"), (payload + b"junk", "bad_gzip")):
        reply = client.post("/data", data=body, headers={"Content-Encoding": "gzip"})
        assert (reply.status_code, reply.get_json()["reason"]) == (400, reason)
    reply = client.post("/data", data=payload, headers={"Content-Encoding": "br"})
    assert (reply.status_code, reply.get_json()["reason"]) == (415, "unsupported_encoding")
    assert stored(client) == (0, 0)


def test_wrong_method_and_unknown_paths_answer_json(collector_client):
    reply = collector_client.get("/data")
    assert reply.status_code == 405 and reply.get_json()["status"] == "error"
    assert collector_client.get("/api/nothing").get_json()["status"] == "error"
    assert collector_client.get("/stream?host=x&run_id=y&source=z").status_code == 404


# --- tokens ----------------------------------------------------------------------------------------------
def test_tokens_name_the_batch_and_never_reach_the_log(make_collector, tmp_path, caplog):
    log_file = tmp_path / "server_data.log"
    tokens = {"tok-alice-9f8e7d6c5b4a": "alice", "tok-bob-0a1b2c3d4e5f": "bob"}
    client = make_collector(tokens=tokens, log_file=str(log_file)).test_client()
    caplog.set_level("DEBUG")
    bad_token = "tok-mallory-1234567890"
    assert post(client, ours(0)).status_code == 401
    reply = post(client, ours(0), headers={"Authorization": f"Bearer {bad_token}"})
    assert (reply.status_code, reply.get_json()["reason"]) == (401, "unauthorized")
    reader = {"Authorization": "Bearer tok-alice-9f8e7d6c5b4a"}
    assert client.get("/api/streams", headers=reader).get_json()["streams"] == []
    assert post(client, ours(0, host="pc-a"), headers={"Authorization": "Bearer tok-alice-9f8e7d6c5b4a"}).status_code == 200
    assert post(client, ours(0, host="pc-b"), headers={"Authorization": "Bearer tok-bob-0a1b2c3d4e5f"}).status_code == 200
    assert {s["host"]: s["token_name"] for s in client.get("/api/streams", headers=reader).get_json()["streams"]} == {
        "pc-a": "alice", "pc-b": "bob"}
    logged = log_file.read_text() + caplog.text
    assert "by=alice" in logged and "rejected unauthorized" in logged
    for token in (*tokens, bad_token):
        assert token not in logged


def test_batch_log_has_one_line_per_batch(make_collector, tmp_path):
    log_file = tmp_path / "server_data.log"
    client = make_collector(log_file=str(log_file)).test_client()
    payloads = [ours(0), ours(2)]
    for p in payloads + payloads[:1]:
        post(client, p)
    lines = log_file.read_text().splitlines()
    assert len(lines) == 3
    assert payloads[0]["batch_id"] in lines[0] and "seq=0" in lines[0] and "records=2" in lines[0]
    assert "WARNING" in lines[1] and "missing=1" in lines[1]
    assert " duplicate" in lines[2] and "records=0" in lines[2]


# --- reading -----------------------------------------------------------------------------------------------
def _three_streams(client):
    for seq in range(3):
        post(client, ours(seq, host="pc1", run_id="r1", timestamp=1000.0))
    post(client, ours(0, host="pc2", run_id="r2", timestamp=2000.0))
    post(client, ours(0, host="pc2", run_id="r2", source="offcpu", timestamp=3000.0,
                      records=[envelope("offcpu", 3000.5, 1, "row", comm="a,\"b\"", blocked_us=12.5,
                                        stack=["f1", "f2"])]))


def test_records_api_filters(collector_client):
    _three_streams(collector_client)

    def get(**q):
        reply = collector_client.get("/api/records", query_string=q)
        assert reply.status_code == 200
        return reply.get_json()["records"]

    assert len(get()) == 9
    assert {r["host"] for r in get(host="pc2")} == {"pc2"} and len(get(host="pc2")) == 3
    assert len(get(host="pc2", source="offcpu")) == 1
    assert len(get(run_id="r1")) == 6
    assert [r["sequence"] for r in get(run_id="r1", since=1001.0, until=1001.0)] == [1, 1]
    assert len(get(kind="summary")) == 4
    assert len(get(limit=4)) == 4 and get(limit=4) == get()[:4]
    for bad in ({"limit": "x"}, {"limit": "0"}, {"since": "yesterday"}, {"until": "nan"}, {"format": "xml"}):
        reply = collector_client.get("/api/records", query_string=bad)
        assert reply.status_code == 400 and reply.get_json()["reason"] == "bad_query"


def test_csv_and_ndjson_export(collector_client):
    _three_streams(collector_client)
    reply = collector_client.get("/api/records?format=csv&source=offcpu")
    assert reply.status_code == 200 and reply.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    assert len(rows) == 1
    assert (rows[0]["host"], rows[0]["comm"], rows[0]["blocked_us"], rows[0]["stack"]) == (
        "pc2", 'a,"b"', "12.5", '["f1","f2"]')
    reply = collector_client.get("/api/records?format=ndjson&run_id=r1")
    lines = reply.get_data(as_text=True).splitlines()
    assert reply.mimetype == "application/x-ndjson" and len(lines) == 6
    items = [json.loads(line) for line in lines]
    assert items == collector_client.get("/api/records?run_id=r1").get_json()["records"]


def test_streams_api(collector_client):
    _three_streams(collector_client)
    streams = collector_client.get("/api/streams").get_json()["streams"]
    assert {(s["host"], s["run_id"], s["source"], s["batches"], s["records"]) for s in streams} == {
        ("pc1", "r1", "sysnest", 3, 6), ("pc2", "r2", "sysnest", 1, 2), ("pc2", "r2", "offcpu", 1, 1)}
    assert all(s["last_seen"] >= s["first_seen"] > time.time() - 60 for s in streams)
    only = collector_client.get("/api/streams?host=pc2&source=offcpu").get_json()["streams"]
    assert [(s["host"], s["source"]) for s in only] == [("pc2", "offcpu")]


def test_prometheus_metrics(collector_client):
    _three_streams(collector_client)
    post(collector_client, ours(5, host="pc1", run_id="r1", timestamp=1000.0))
    collector_client.post("/data", data=b"junk")
    reply = collector_client.get("/metrics")
    assert reply.content_type.startswith("text/plain; version=0.0.4")
    samples = prometheus_samples(reply.get_data(as_text=True))
    assert samples["collector_batches_total"] == 6
    assert samples["collector_records_total"] == 11
    assert samples['collector_rejected_total{reason="not_json"}'] == 1
    assert samples['collector_stream_missing_sequences{host="pc1",run_id="r1",source="sysnest"}'] == 2
    assert samples['collector_stream_batches{host="pc2",run_id="r2",source="offcpu"}'] == 1
    assert samples["collector_missing_sequences"] == 2
    last_seen = samples['collector_stream_last_seen_timestamp_seconds{host="pc1",run_id="r1",source="sysnest"}']
    assert time.time() - 60 < last_seen <= time.time()


def test_prometheus_label_values_are_escaped(collector_client):
    post(collector_client, ours(0, host='pc "quoted" \\ back'))
    text = collector_client.get("/metrics").get_data(as_text=True)
    assert 'host="pc \\"quoted\\" \\\\ back"' in text
    prometheus_samples(text)


def test_healthz_advertises_gzip(collector_client, db_url):
    reply = collector_client.get("/healthz")
    body = reply.get_json()
    assert reply.status_code == 200 and body["status"] == "ok"
    assert "gzip" in body["content_encodings"] and reply.headers["Accept-Encoding"] == "gzip"
    assert body["database"] == ("sqlite" if db_url.startswith("sqlite") else "postgresql")
    assert body["auth"] is False


# --- dashboard -----------------------------------------------------------------------------------------------
def test_dashboard_lists_streams_with_gaps(collector_client):
    _three_streams(collector_client)
    post(collector_client, ours(5, host="pc1", run_id="r1", timestamp=1000.0))
    page = collector_client.get("/").get_data(as_text=True)
    for text in ("pc1", "pc2", "r1", "r2", "sysnest", "offcpu", "3–4"):
        assert text in page, text


def test_stream_page_charts_the_registry_field(collector_client):
    for seq in range(5):
        post(collector_client, ours(seq, host="pc1", run_id="r1"))
    page = collector_client.get("/stream?host=pc1&run_id=r1&source=sysnest").get_data(as_text=True)
    # config.py registers sysnest with chart.y = per_sec of summary records
    assert 'data-field="per_sec"' in page and "<polyline" in page and "syscalls/s" in page
    assert page.count("<tr>") == 1 + 10  # header + the 10 records


def test_stream_page_charts_first_numeric_field_of_an_unregistered_metric(collector_client):
    records = [envelope("mystery", 100.0 + i, i + 1, "row", name="x", depth=i * 2.0) for i in range(4)]
    post(collector_client, ours(0, source="mystery", records=records))
    page = collector_client.get("/stream?host=lab-pc-01&run_id=run-a&source=mystery").get_data(as_text=True)
    assert 'data-field="depth"' in page
    points = page.split('points="')[1].split('"')[0].split()
    assert len(points) == 4
    assert [float(p.split(",")[1]) for p in points] == sorted((float(p.split(",")[1]) for p in points), reverse=True)


@pytest.mark.parametrize("path", ["/", "/stream", "/api/streams", "/api/records", "/metrics", "/healthz"])
@pytest.mark.parametrize("value", ["%00", "%25", "%", "%ED%A0%80", "%FF", "x" * 5000, "1e400", "-1", "h%C3%A9llo%E2%80%A8"])
def test_odd_query_values_never_5xx(collector_client, path, value):
    """Percent-encoded as a client would send them: NUL, a lone surrogate's bytes, invalid UTF-8, ..."""
    post(collector_client, ours(0))
    keys = ("host", "run_id", "source", "kind", "since", "until", "limit", "format")
    reply = collector_client.get(path + "?" + "&".join(f"{k}={value}" for k in keys))
    assert reply.status_code in (200, 400, 404), reply.get_data(as_text=True)[:300]
