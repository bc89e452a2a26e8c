"""The transport against a test collector (tests/support/collector_stub.py): payload, sequences, outages,
rejections, bounds and restarts. No Qt and no BPF: records are submitted directly."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import socket
import sqlite3
import threading
import time

import pytest
from collector_stub import CollectorStub, free_port

from client.transport import Transport, collector_url

FAST = {"flush_interval": 0.1, "backoff_base": 0.05, "backoff_max": 0.5, "probe_interval": 0.5}


def records(source: str, start: int, n: int, pad: int = 0) -> list[dict]:
    """n envelope records numbered from start; `pad` random bytes each (hex) make them incompressible."""
    return [{"metric": source, "ts": time.time(), "kind": "event", "interval": 1, "i": i,
             **({"pad": os.urandom(pad).hex()} if pad else {})} for i in range(start, start + n)]


def lines_of(records: list[dict], separators: tuple[str, str] = (", ", ": ")) -> list[bytes]:
    """The records as a script's NDJSON lines; spaced by default, as the transport would never encode them."""
    return [json.dumps(r, separators=separators).encode() for r in records]


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def collector():
    stub = CollectorStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def outbox(tmp_path):
    return str(tmp_path / "outbox.sqlite")


def outbox_rows(path: str) -> list[tuple[str, str, str, int]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT batch_id, run_id, source, sequence FROM batches ORDER BY id").fetchall()


def test_payload_keys_and_gapless_sequences(collector, outbox):
    t = Transport(collector.url, token="t0ken", outbox_path=outbox, batch_records=100, **FAST)
    for k in range(10):
        t.submit("alpha", records("alpha", k * 55, 55))
        t.submit("beta", records("beta", k, 1))
    t.close(10)
    status = t.status()
    assert status["pending_outbox"] == 0 and status["dropped"] == 0 and status["buffered"] == 0
    assert status["sent_records"] == 560
    assert status["sent_batches"] == status["created_batches"] == len(collector.batches)
    for (run_id, source), sequences in collector.streams().items():
        assert run_id == t.run_id
        assert sequences == list(range(len(sequences))), (source, sequences)
    assert [r["i"] for r in collector.records("alpha")] == list(range(550))
    assert [r["i"] for r in collector.records("beta")] == list(range(10))
    payload = next(iter(collector.batches.values()))
    assert set(payload) == {"schema", "timestamp", "metric", "batch_id", "sequence", "host", "run_id",
                            "records", "dropped"}
    assert payload["schema"] == 2 and payload["metric"] in ("alpha", "beta") and payload["host"] == socket.gethostname() and payload["dropped"] == 0
    assert len(payload["batch_id"]) == 32 and int(payload["batch_id"], 16) >= 0
    assert abs(payload["timestamp"] - time.time()) < 60
    assert all(n == 1 for n in collector.posts.values())


@pytest.mark.slow
def test_outage_every_batch_arrives_once_in_order(collector, outbox):
    """Collector down at the start, up after 5 s, down again, up again: nothing lost, nothing twice."""
    collector.stop()
    t = Transport(collector.url, outbox_path=outbox, batch_records=50, **FAST)
    stop, seen = threading.Event(), {"pending_max": 0, "unreachable": False}

    def feed() -> None:
        n = 0
        while not stop.is_set():
            t.submit("m", records("m", n, 10))
            n += 10
            status = t.status()
            seen["pending_max"] = max(seen["pending_max"], status["pending_outbox"])
            seen["unreachable"] |= status["reachable"] is False
            time.sleep(0.02)
        seen["submitted"] = n

    feeder = threading.Thread(target=feed)
    feeder.start()
    time.sleep(5)
    assert t.status()["sent_batches"] == 0
    collector.start()
    time.sleep(3)
    collector.stop()
    time.sleep(2.5)
    collector.start()
    time.sleep(1.5)
    stop.set()
    feeder.join()
    t.close(20)
    status = t.status()
    assert seen["unreachable"] and seen["pending_max"] >= 20, seen
    assert status["pending_outbox"] == 0 and status["dropped"] == 0, status
    assert status["created_batches"] == status["sent_batches"] == len(collector.batches)
    sequences = collector.streams()[(t.run_id, "m")]
    assert sequences == list(range(status["created_batches"]))      # first arrivals in sequence order
    assert [r["i"] for r in collector.records("m")] == list(range(seen["submitted"]))
    duplicates = sum(n - 1 for n in collector.posts.values())
    print(f"outage: {len(sequences)} batches, {seen['submitted']} records, peak outbox {seen['pending_max']}, "
          f"{duplicates} re-posted after a lost answer")


def test_restart_replays_what_an_earlier_client_left(collector, outbox):
    dead = f"http://127.0.0.1:{free_port()}"
    first = Transport(dead, outbox_path=outbox, batch_records=20, **FAST)
    first.submit("m", records("m", 0, 100))
    wait_for(lambda: first.status()["created_batches"] == 5, what="5 batches in the outbox")
    first.close(0.5)
    left = outbox_rows(outbox)
    assert [r[3] for r in left] == [0, 1, 2, 3, 4]
    second = Transport(collector.url, outbox_path=outbox, **FAST)
    assert second.status()["pending_outbox"] == 5
    second.submit("m", records("m", 100, 10))
    second.close(10)
    assert collector.streams()[(first.run_id, "m")] == [0, 1, 2, 3, 4]
    assert collector.streams()[(second.run_id, "m")] == [0]
    assert {r[0] for r in left} <= set(collector.batches)
    assert outbox_rows(outbox) == []


def test_same_run_id_continues_its_sequence(collector, outbox):
    a = Transport(collector.url, outbox_path=outbox, run_id="r1", **FAST)
    a.submit("m", records("m", 0, 3))
    a.close(5)
    b = Transport(collector.url, outbox_path=outbox, run_id="r1", **FAST)
    b.submit("m", records("m", 3, 3))
    b.close(5)
    assert collector.streams()[("r1", "m")] == [0, 1]


def test_retry_on_5xx_keeps_batch_id(collector, outbox):
    collector.fail_with = 503
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    t.submit("m", records("m", 0, 10))
    wait_for(lambda: t.status()["last_error"].startswith("HTTP 503"), what="a 503")
    (batch_id, *_), = outbox_rows(outbox)
    time.sleep(0.5)
    collector.fail_with = None
    t.close(10)
    assert list(collector.batches) == [batch_id]
    assert t.status()["sent_batches"] == 1 and t.status()["dropped"] == 0


def test_rejected_batch_is_dropped_and_counted(collector, outbox):
    collector.fail_with = 400
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    t.submit("m", records("m", 0, 7))
    wait_for(lambda: t.status()["dropped"] == 7, what="the rejection")
    t.close(5)
    status = t.status()
    assert status["drop_reasons"] == {"rejected_400": 7} and status["dropped_batches"] == 1
    assert status["sources"]["m"]["dropped"] == 7 and status["pending_outbox"] == 0
    assert "HTTP 400" in status["last_error"] and "told to fail" in status["last_error"]
    assert outbox_rows(outbox) == []


def test_wrong_token_holds_batches_until_fixed(outbox):
    stub = CollectorStub(token="right").start()
    try:
        t = Transport(stub.url, token="wrong", outbox_path=outbox, **FAST)
        t.submit("m", records("m", 0, 5))
        wait_for(lambda: "401" in t.status()["last_error"], what="the 401")
        status = t.status()
        assert status["dropped"] == 0 and status["pending_outbox"] == 1
        t.set_server(stub.url, "right")
        wait_for(lambda: t.status()["sent_batches"] == 1, what="delivery with the right token")
        t.close(5)
    finally:
        stub.stop()
    assert len(stub.records("m")) == 5


def test_buffer_spill_is_counted_and_reported_in_the_batch(collector, outbox):
    t = Transport(collector.url, outbox_path=outbox, max_buffered=100, **FAST)
    t.submit("m", records("m", 0, 1000))
    t.close(5)
    status = t.status()
    assert status["drop_reasons"] == {"buffer_full": 900}
    (payload,) = collector.batches.values()
    assert payload["dropped"] == 900
    assert [r["i"] for r in payload["records"]] == list(range(900, 1000))


def test_outbox_bounds_drop_oldest_and_count_them(collector, outbox):
    collector.stop()
    t = Transport(collector.url, outbox_path=outbox, batch_records=10, outbox_max_bytes=100_000, **FAST)
    for k in range(20):
        t.submit("m", records("m", k * 10, 10, pad=1500))     # ~15 KB per batch in the outbox
    wait_for(lambda: t.status()["created_batches"] == 20, what="20 batches")
    wait_for(lambda: t.status()["drop_reasons"].get("outbox_full", 0) >= 100, what="evictions")
    with sqlite3.connect(outbox) as db:
        assert db.execute("SELECT SUM(size) FROM batches").fetchone()[0] <= 100_000
    collector.start()
    t.close(10)
    status = t.status()
    delivered = len(collector.records("m"))
    assert delivered + status["drop_reasons"]["outbox_full"] == 200     # every record delivered or counted
    sequences = collector.streams()[(t.run_id, "m")]
    assert sequences == list(range(20 - len(sequences), 20))             # the newest were kept, in order


def test_outbox_age_bound(collector, outbox):
    collector.stop()
    t = Transport(collector.url, outbox_path=outbox, outbox_max_age=0.3, **FAST)
    t.submit("m", records("m", 0, 4))
    wait_for(lambda: t.status()["drop_reasons"].get("outbox_expired") == 4, what="expiry")
    t.close(1)
    assert t.status()["pending_outbox"] == 0


@pytest.mark.parametrize("advertised", [True, False])
def test_gzip_only_when_advertised(outbox, advertised):
    stub = CollectorStub(gzip_ok=advertised).start()
    try:
        t = Transport(stub.url, outbox_path=outbox, batch_records=500, **FAST)
        wait_for(lambda: t.status()["reachable"] is True, what="the probe")
        for k in range(4):
            t.submit("m", records("m", k * 500, 500))
        t.close(10)
    finally:
        stub.stop()
    assert [r["i"] for r in stub.records("m")] == list(range(2000))
    assert (stub.gzip_posts == 4) if advertised else (stub.gzip_posts == 0)


def test_stored_body_is_the_payload(collector, outbox):
    """What the outbox holds is exactly what is posted (gzip of the JSON payload)."""
    collector.stop()
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    t.submit("m", records("m", 0, 2))
    wait_for(lambda: t.status()["pending_outbox"] == 1, what="a stored batch")
    t.close(0.5)
    with sqlite3.connect(outbox) as db:
        body, sequence, batch_id = db.execute("SELECT body, sequence, batch_id FROM batches").fetchone()
    import json

    payload = json.loads(gzip.decompress(body))
    assert payload["sequence"] == sequence == 0 and payload["batch_id"] == batch_id
    assert [r["i"] for r in payload["records"]] == [0, 1]


def test_no_server_keeps_nothing(outbox):
    t = Transport(None, outbox_path=outbox, **FAST)
    t.submit("m", records("m", 0, 5))
    t.close(1)
    status = t.status()
    assert status["url"] is None and status["sources"]["m"]["submitted"] == 5
    assert status["pending_outbox"] == 0 and status["dropped"] == 0


def test_unknown_tuning_is_refused(outbox):
    with pytest.raises(TypeError, match="batch_recs"):
        Transport(None, outbox_path=outbox, batch_recs=5)


def test_non_finite_numbers_become_null(collector, outbox):
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    t.submit("m", [{"metric": "m", "kind": "row", "ts": 1.0, "interval": 1, "x": float("nan"),
                    "h": [float("inf"), 2.5]}])
    t.close(5)
    (record,) = collector.records("m")
    assert record["x"] is None and record["h"] == [None, 2.5]


@pytest.mark.slow
def test_against_the_real_collector(tmp_path, outbox):
    """server.py (the collector of its own issue) stores every batch once, gzip included, no gaps, of records
    and of lines alike."""
    server = pytest.importorskip("server")
    from werkzeug.serving import make_server

    app = server.create_app({"db_url": f"sqlite:///{tmp_path / 'collector.db'}"})
    port = free_port()
    httpd = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        t = Transport(f"http://127.0.0.1:{port}", outbox_path=outbox, batch_records=1000, **FAST)
        wait_for(lambda: t.status()["reachable"] is True, what="the probe")
        for k in range(20):     # every other batch from lines, as a worker hands over a metric's output
            sent = records("sysnest", k * 1000, 1000)
            t.submit("sysnest", sent, lines_of(sent) if k % 2 else None)
        t.close(30)
        client = app.test_client()
        (stream,) = client.get("/api/streams").get_json()["streams"]
    finally:
        httpd.shutdown()
        thread.join(5)
    status = t.status()
    assert status["gzip"] is True       # it advertises gzip, so these ~90 KB batches went compressed
    assert status["sent_batches"] == status["created_batches"] == stream["batches"] == 20
    assert stream["records"] == 20_000 and stream["missing_count"] == 0 and stream["highest"] == 19
    assert stream["run_id"] == t.run_id and stream["host"] == socket.gethostname()
    assert status["dropped"] == 0 and status["pending_outbox"] == 0


class _Portal(http.server.BaseHTTPRequestHandler):
    """A captive portal or a wrong URL: 200 to anything, never the collector's acknowledgement."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"status": "ok"}' if self.path.endswith("/data") else b"<html>Welcome to the hotel wifi</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_a_portal_answering_200_keeps_the_batches(outbox):
    portal = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Portal)
    threading.Thread(target=portal.serve_forever, daemon=True).start()
    try:
        t = Transport(f"http://127.0.0.1:{portal.server_port}", outbox_path=outbox, **FAST)
        for i in range(6):
            t.submit(f"m{i}", records(f"m{i}", 0, 3))
        wait_for(lambda: "not the collector's acknowledgement" in t.status()["last_error"], what="the error")
        time.sleep(0.5)  # more attempts
        t.close(1)
    finally:
        portal.shutdown()
        portal.server_close()
    status = t.status()
    assert (status["sent_batches"], status["dropped"], status["pending_outbox"]) == (0, 0, 6)
    assert status["reachable"] is False
    assert len(outbox_rows(outbox)) == 6


def test_an_outage_reads_as_one_human_line_cleared_once_delivery_works(outbox):
    port = free_port()
    t = Transport(f"http://127.0.0.1:{port}", outbox_path=outbox, **FAST)
    try:
        t.submit("m", records("m", 0, 5))
        line = f"collector unreachable: connection refused (127.0.0.1:{port})"
        wait_for(lambda: t.status()["last_error"] == line, what=line)
        stub = CollectorStub(port=port).start()      # the collector comes back
        try:
            wait_for(lambda: t.status()["sent_batches"] == 1, what="the delivery")
            assert t.status()["last_error"] == "" and t.status()["reachable"] is True
        finally:
            t.close(5)
            stub.stop()
    finally:
        t.close(1)


@pytest.mark.parametrize("typed, fixed", [
    ("127.0.0.1:5055", "http://127.0.0.1:5055"),
    ("https://lab.example:443", "https://lab.example:443"),
    ("ftp://x", ValueError),
    ("http://", ValueError),
])
def test_a_url_without_a_scheme_is_fixed_and_another_refused(typed, fixed):
    if fixed is ValueError:
        with pytest.raises(ValueError):
            collector_url(typed)
    else:
        assert collector_url(typed) == fixed


def test_batches_split_by_bytes_keep_every_record_in_order(collector, outbox):
    # the cut is serialized in one json.dumps and halved until each part fits batch_bytes
    t = Transport(collector.url, outbox_path=outbox, batch_records=1000, batch_bytes=20_000, **FAST)
    t.submit("m", records("m", 0, 1000, pad=40))
    t.close(10)
    sizes = [len(p["records"]) for p in collector.batches.values()]
    assert len(sizes) > 1 and sum(sizes) == 1000
    assert [r["i"] for r in collector.records("m")] == list(range(1000))
    for payload in collector.batches.values():
        assert len(b",".join(json.dumps(r, separators=(",", ":")).encode() for r in payload["records"])) <= 20_000


def test_an_ended_metric_s_last_records_leave_without_waiting_for_the_flush(collector, outbox):
    t = Transport(collector.url, outbox_path=outbox, batch_records=1000, flush_interval=30.0)
    t.submit("m", records("m", 0, 10))
    time.sleep(0.3)
    assert not collector.batches, "a partial batch waits for the flush interval"
    t.end_of("m")
    wait_for(lambda: len(collector.records("m")) == 10, 5, "the ended metric's records")
    t.end_of("nobody")          # a metric that sent nothing: nothing to do
    t.close(5)
    assert t.status()["dropped"] == 0


def test_lines_are_sent_as_they_are_not_encoded_again(collector, outbox):
    collector.stop()
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    sent = records("m", 0, 3)
    t.submit("m", sent, lines_of(sent))
    wait_for(lambda: t.status()["pending_outbox"] == 1, what="a stored batch")
    t.close(0.5)
    with sqlite3.connect(outbox) as db:
        (body,) = db.execute("SELECT body FROM batches").fetchone()
    assert b"[" + b",".join(lines_of(sent)) + b"]}" in gzip.decompress(body)
    collector.start()
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    t.close(5)
    assert collector.records("m") == sent


def test_lines_and_records_of_one_metric_keep_their_order(collector, outbox):
    t = Transport(collector.url, outbox_path=outbox, batch_records=1000, **FAST)
    t.submit("m", records("m", 0, 300))                  # a run of records longer than one json.dumps call
    t.submit("m", (sent := records("m", 300, 5)), lines_of(sent, (",", ":")))
    t.submit("m", records("m", 305, 5))
    t.close(5)
    (payload,) = collector.batches.values()
    assert [r["i"] for r in payload["records"]] == list(range(310))
    assert t.status()["sent_records"] == 310


def test_non_finite_numbers_in_lines_become_null(collector, outbox):
    t = Transport(collector.url, outbox_path=outbox, **FAST)
    head = '{"metric": "m", "kind": "row", "ts": 1.0, "interval": 1'
    lines = [f'{head}, "i": 0, "x": NaN, "h": [Infinity, 2.5], "big": 1E+999}}'.encode(),
             f'{head}, "i": 1, "x": -Infinity, "c": "NaN"}}'.encode(),
             f'{head}, "i": 2, "x": 1e308, "digits": {"9" * 120}}}'.encode(),
             f'{head}, "i": 3, "x": 4.5}}'.encode()]
    t.submit("m", [json.loads(line) for line in lines], lines)
    t.close(5)
    got = collector.records("m")
    assert [r["i"] for r in got] == [0, 1, 2, 3] and t.status()["dropped"] == 0
    assert (got[0]["x"], got[0]["h"], got[0]["big"]) == (None, [None, 2.5], None)
    assert (got[1]["x"], got[1]["c"]) == (None, "NaN")
    assert (got[2]["x"], got[2]["digits"]) == (1e308, int("9" * 120))
    assert got[3]["x"] == 4.5


def test_lines_split_by_bytes_keep_every_record_in_order(collector, outbox):
    t = Transport(collector.url, outbox_path=outbox, batch_records=1000, batch_bytes=20_000, **FAST)
    sent = records("m", 0, 1000, pad=40)
    t.submit("m", sent, lines_of(sent))
    t.close(10)
    assert len(collector.batches) > 1
    assert collector.records("m") == sent
    for payload in collector.batches.values():
        assert len(b",".join(lines_of(payload["records"]))) <= 20_000


def test_lines_must_match_the_records(outbox):
    t = Transport(None, outbox_path=outbox, **FAST)
    with pytest.raises(ValueError, match="2 lines for 1 records"):
        t.submit("m", records("m", 0, 1), [b"{}", b"{}"])
    t.close(1)
