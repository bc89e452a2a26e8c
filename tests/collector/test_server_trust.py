"""The collector under hostile or careless clients: tokens judged before bodies are read, once, rejections
that cost no database write (server.py as a process); streams owned by their token (on each database)."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import socket
import sqlite3
import threading
import time
import tracemalloc

import requests
from collector_payloads import ours, prometheus_samples, stored
from server_fixtures import ServerProcess, free_port

from collector import httpserver, ingest

TOKEN = "tok-trust-1"
BIG = 62 * 2**20  # announced, never sent


def _deleted_files(pid: int) -> int:
    """Open files of pid already unlinked: waitress's temp files for bodies it buffers."""
    fds = f"/proc/{pid}/fd"
    return sum(os.readlink(os.path.join(fds, fd)).endswith("(deleted)") for fd in os.listdir(fds))


def _post_headers(port: int, length: int, token: str | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(f"POST /data HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
                 f"Content-Length: {length}\r\n\r\n".encode())
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
            data.lower().partition(b"content-length: ")[2].split(b"\r\n")[0] or 0):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_tokenless_huge_posts_refused_before_their_bodies(tmp_path):
    db = tmp_path / "c.db"
    server = ServerProcess("--token", TOKEN, "--db", str(db))
    socks = []
    try:
        for _ in range(100):
            sock = _post_headers(server.port, BIG)
            try:
                sock.sendall(b"x" * 2**20)  # past waitress's 512 KB in memory: a temp file if buffered
            except OSError:
                pass  # already refused and closed: fine
            socks.append(sock)
        answers = [_answer(s) for s in socks]
        assert answers == [(401, {"status": "error", "reason": "unauthorized", "detail": answers[0][1]["detail"]})] * 100
        assert _deleted_files(server.proc.pid) == 0  # no body buffered in temp space
        samples = prometheus_samples(requests.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                                                  timeout=10).text)
        assert samples['collector_rejected_total{reason="unauthorized"}'] == 100
        # counted in memory: not one database write for them
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM counters WHERE name LIKE 'rejected:%'").fetchone() == (0,)
        # a client sending a whole 3 MB body with a wrong token still reads its 401 (no reset)
        wrong = requests.post(server.url + "/data", data=b"[" + b" " * 3 * 2**20 + b"]",
                              headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401 and wrong.json()["reason"] == "unauthorized"
        assert wrong.headers["WWW-Authenticate"] == "Bearer"
        good = requests.post(server.url + "/data", json=ours(0), headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=10)
        assert good.status_code == 200, good.text
        with sqlite3.connect(db) as conn:  # written with the next batch
            assert conn.execute("SELECT value FROM counters WHERE name = 'rejected:unauthorized'").fetchone() == (101,)
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_a_stream_belongs_to_the_token_that_made_it(make_collector):
    alice, bob = {"Authorization": "Bearer tok-alice-1"}, {"Authorization": "Bearer tok-bob-2"}
    client = make_collector(tokens={"tok-alice-1": "alice", "tok-bob-2": "bob"}).test_client()
    first = ours(0, host="pc-alice")
    assert client.post("/data", json=first, headers=alice).status_code == 200
    before = client.get("/api/streams", headers=alice).get_json()["streams"]
    # bob may neither add to alice's stream, nor take her sequences, nor replay her batch
    for payload in (ours(1, host="pc-alice"), ours(5, host="pc-alice"), {**ours(0, host="pc-alice"), "batch_id": first["batch_id"]}):
        reply = client.post("/data", json=payload, headers=bob)
        assert (reply.status_code, reply.get_json()["reason"]) == (403, "forbidden"), reply.get_json()
    assert client.get("/api/streams", headers=alice).get_json()["streams"] == before
    assert before[0]["token_name"] == "alice" and before[0]["missing_count"] == 0
    assert client.post("/data", json=ours(1, host="pc-alice"), headers=alice).status_code == 200
    assert client.post("/data", json=ours(0, host="pc-bob"), headers=bob).status_code == 200
    page = client.get("/", headers=bob).get_data(as_text=True)
    assert "<th>owner</th>" in page and ">alice<" in page and ">bob<" in page
    samples = prometheus_samples(client.get("/metrics", headers=bob).get_data(as_text=True))
    assert samples['collector_rejected_total{reason="forbidden"}'] == 3


def test_a_post_is_authorized_once_whichever_server_runs_the_app(make_collector, monkeypatch):
    """Under httpserver.py the headers are judged before the body is read, and the app takes that verdict
    (the token's name included: it decides who owns a stream); under another server the app judges."""
    judged = []
    authorize = ingest.authorize
    monkeypatch.setattr(ingest, "authorize", lambda *args: judged.append(1) or authorize(*args))
    alice, bob = {"Authorization": "Bearer tok-alice-1"}, {"Authorization": "Bearer tok-bob-2"}
    app = make_collector(tokens={"tok-alice-1": "alice", "tok-bob-2": "bob"})
    port = free_port()
    server = httpserver.make_server(app, "127.0.0.1", port, 2, 1024 * 1024)
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}/data"
    try:
        answers = [requests.post(url, json=payload, headers=headers, timeout=10).status_code for payload, headers in
                   ((ours(0, host="pc-a"), alice), (ours(1, host="pc-a"), bob), (ours(1, host="pc-a"), alice),
                    (ours(0, host="pc-b"), {"Authorization": "Bearer nope"}))]
    finally:
        server.close()
    assert answers == [200, 403, 200, 401] and len(judged) == 4
    assert app.test_client().post("/data", json=ours(2, host="pc-a"), headers=alice).status_code == 200
    assert len(judged) == 5
    (stream,) = app.test_client().get("/api/streams", headers=alice).get_json()["streams"]
    assert (stream["token_name"], stream["batches"]) == ("alice", 3)


def test_csv_cells_and_headers_cannot_be_formulas(collector_client):
    evil = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]
    metrics = [{"metric": "sysnest", "kind": "event", "ts": 1.0, "comm": name, "n": -3, "=HYPERLINK(1)": 1}
               for name in evil]
    assert collector_client.post("/data", json={**ours(0, host="=pc"), "records": metrics}).status_code == 200
    rows = list(csv.reader(io.StringIO(collector_client.get("/api/records?format=csv").get_data(as_text=True))))
    header, body = rows[0], rows[1:]
    assert "'=HYPERLINK(1)" in header and "=HYPERLINK(1)" not in header
    column = header.index("comm")
    assert [r[column] for r in body] == ["'" + name for name in evil]
    assert {r[header.index("host")] for r in body} == {"'=pc"} and {r[header.index("n")] for r in body} == {"-3"}


def test_records_are_read_in_pages_named_by_a_cursor(collector_client, monkeypatch):
    for seq in range(12):
        assert collector_client.post("/data", json=ours(seq)).status_code == 200  # 24 records
    everything = collector_client.get("/api/records?limit=100").get_json()
    assert everything["count"] == 24 and everything["next_cursor"] is None
    pages, cursor = [], ""
    while cursor is not None:
        reply = collector_client.get(f"/api/records?limit=10&cursor={cursor}")
        page = reply.get_json()
        assert reply.headers.get("X-Next-Cursor") == page["next_cursor"]
        pages.append(page["records"])
        cursor = page["next_cursor"]
    assert [len(p) for p in pages] == [10, 10, 4] and sum(pages, []) == everything["records"]
    # bounded by bytes too: about three records' text per page
    monkeypatch.setattr("collector.api.PAGE_BYTES", 3 * len(json.dumps(everything["records"][0]["record"])))
    reply = collector_client.get("/api/records?format=ndjson&limit=100")
    lines = reply.get_data(as_text=True).splitlines()
    assert 2 <= len(lines) <= 3 and reply.headers["Link"].endswith('rel="next"')
    rest = collector_client.get("/api/records?format=csv&limit=100&cursor=" + reply.headers["X-Next-Cursor"])
    assert list(csv.DictReader(io.StringIO(rest.get_data(as_text=True))))[0]["id"] == str(everything["records"][len(lines)]["id"])
    for bad in ("x", "1.5", "nan:3", "1:-1", "1:٣"):
        reply = collector_client.get(f"/api/records?cursor={bad}")
        assert (reply.status_code, reply.get_json()["reason"]) == (400, "bad_query")


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _lab_of_records(path: str, n: int) -> None:
    """An SQLite collector database holding n ordinary sysnest rows in one stream, written straight
    into its tables (posting them would take minutes on a loaded machine)."""
    from collector.store import Store

    Store(f"sqlite:///{path}").close()  # the tables
    per_batch = 2000
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO streams (id, host, run_id, source, batches, records, received, highest, lowest,"
                   " dropped, first_seen, last_seen, legacy) VALUES (1, 'pc', 'run', 'sysnest', ?, ?, ?, ?, 0, 0,"
                   " 1, 2, 0)", (n // per_batch, n, n // per_batch, n // per_batch - 1))
        db.executemany("INSERT INTO batches (id, batch_id, host, run_id, source, sequence, client_ts, received_at,"
                       " n_records, dropped, schema) VALUES (?, ?, 'pc', 'run', 'sysnest', ?, 1, 1, ?, 0, 1)",
                       [(b + 1, f"batch-{b}", b, per_batch) for b in range(n // per_batch)])
        db.executemany(
            "INSERT INTO records (batch, stream, sequence, idx, ts, kind, metric, data) VALUES (?, 1, ?, ?, ?, 'row',"
            " 'sysnest', ?)",
            ((i // per_batch + 1, i // per_batch, i % per_batch, 1_750_000_000.0 + i / 1000, json.dumps(
                {"metric": "sysnest", "ts": 1_750_000_000.0 + i / 1000, "kind": "row", "interval": 1, "pid": i,
                 "comm": f"worker-{i % 97}", "syscall": "read", "count": i * 7, "total_us": i * 1.25},
                separators=(",", ":"))) for i in range(n)))


def test_a_300k_record_export_stays_small(tmp_path):
    """The dashboard's CSV link and the API's exports over 300k ordinary records: the server's peak
    RSS (VmHWM) stays under 200 MB (it was 3.9 GB for the JSON answer)."""
    db = str(tmp_path / "big.db")
    _lab_of_records(db, 300_000)
    server = ServerProcess("--db", db)
    try:
        for fmt in ("json",):  # the others share its reading; each takes half a minute on a loaded machine
            with requests.get(f"{server.url}/api/records?format={fmt}&limit=1000000", stream=True, timeout=600) as reply:
                assert reply.status_code == 200
                size = sum(len(piece) for piece in reply.iter_content(1 << 20))
                assert "X-Next-Cursor" not in reply.headers
            assert size > 300_000 * 200
        peak = _peak_rss_mb(server.proc.pid)
        print(f"peak RSS of the collector over a 300k-record JSON export: {peak:.0f} MB")
        assert peak <= 200
    finally:
        server.stop()


def test_a_stream_page_does_not_parse_huge_records(collector_client):
    """Records full of [[],[],...]: 3.6 MB of them cost 100 MB to parse on every page view."""
    empties = "[" + ",".join(["[]"] * 150_000) + "]"
    metrics = [{"metric": "sysnest", "kind": "row", "ts": 1.0 + i, "x": json.loads(empties)} for i in range(12)]
    reply = collector_client.post("/data", data=json.dumps({**ours(0), "records": metrics}, separators=(",", ":")),
                                  content_type="application/json")
    assert reply.status_code == 200, reply.get_json()
    tracemalloc.start()
    page = collector_client.get("/stream?host=lab-pc-01&run_id=run-a&source=sysnest")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert page.status_code == 200 and "over 64 KB" in page.get_data(as_text=True)
    assert peak < 40 * 2**20, f"{peak / 2**20:.0f} MB"


def test_slow_clients_lock_nobody_out():
    """150 connections sending their headers a byte at a time (waitress allowed 100 connections, and kept
    a trickling one for ever): /healthz is still answered within a second, and the server closes the
    slow ones once their headers are overdue."""
    server = ServerProcess()
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(150)]
    request = b"POST /data HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
    try:
        latencies, closed = [], 0
        started = time.monotonic()
        for step in range(40):  # a byte per connection every 0.5 s, for up to 20 s
            for sock in slow:
                try:
                    sock.send(request[step % len(request):][:1])
                except OSError:
                    pass
            if step % 4 == 0:
                t = time.monotonic()
                assert requests.get(server.url + "/healthz", timeout=5).status_code == 200
                latencies.append(time.monotonic() - t)
            closed = sum(_closed_by_peer(sock) for sock in slow)
            if closed == len(slow):
                break
            time.sleep(0.5)
        print(f"/healthz with 150 slow connections: worst {max(latencies) * 1000:.0f} ms; "
              f"all closed after {time.monotonic() - started:.1f} s")
        assert max(latencies) < 1.0
        assert closed == len(slow)
    finally:
        for sock in slow:
            sock.close()
        server.stop()


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        sock.setblocking(False)
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def test_the_number_of_streams_is_bounded(make_collector):
    """20,000 streams made an 8 MB dashboard: past max_streams a batch that would make one more gets 429
    (its client keeps it and retries), and the streams there keep taking batches."""
    client = make_collector(max_streams=3).test_client()
    for host in ("pc1", "pc2", "pc3"):
        assert client.post("/data", json=ours(0, host=host)).status_code == 200
    reply = client.post("/data", json=ours(0, host="pc4"))
    assert (reply.status_code, reply.get_json()["reason"]) == (429, "too_many_streams")
    assert client.post("/data", json=ours(1, host="pc1")).status_code == 200
    assert sorted(s["host"] for s in client.get("/api/streams").get_json()["streams"]) == ["pc1", "pc2", "pc3"]


def test_reading_needs_a_token_once_tokens_are_configured(make_collector):
    client = make_collector(tokens={"tok-up": "pc1"}, read_tokens={"tok-read": "teacher"}).test_client()
    assert client.post("/data", json=ours(0), headers={"Authorization": "Bearer tok-up"}).status_code == 200
    for path in ("/", "/stream?host=lab-pc-01&run_id=run-a&source=sysnest", "/api/streams", "/api/records", "/metrics"):
        refused = client.get(path)
        assert refused.status_code == 401 and refused.get_json()["reason"] == "unauthorized", path
        assert refused.headers["WWW-Authenticate"].startswith("Basic")  # a browser asks for it
        basic = "Basic " + base64.b64encode(b"anyone:tok-read").decode()
        assert client.get(path, headers={"Authorization": basic}).status_code == 200, path
        assert client.get(path, headers={"Authorization": "Bearer tok-up"}).status_code == 200, path
    assert client.get("/healthz").status_code == 200  # every client's probe
    # a read token cannot post
    reply = client.post("/data", json=ours(1), headers={"Authorization": "Bearer tok-read"})
    assert reply.status_code == 401


def test_pages_of_another_name_and_posts_from_web_pages_are_refused(make_collector):
    client = make_collector(allowed_hosts=("lab-collector.example",)).test_client()
    # DNS rebinding: a page of evil.example whose name now points here
    reply = client.get("/api/streams", headers={"Host": "evil.example:5000"})
    assert (reply.status_code, reply.get_json()["reason"]) == (400, "bad_host")
    for host in ("10.1.2.3:5000", "[::1]:5000", "lab-collector.example", "localhost"):
        assert client.get("/api/streams", headers={"Host": host}).status_code == 200, host
    # with no tokens (the default), a page on the lab network must not be able to post
    reply = client.post("/data", data=json.dumps(ours(0)), headers={"Origin": "http://evil.example",
                                                                     "Content-Type": "application/json"})
    assert (reply.status_code, reply.get_json()["reason"]) == (403, "forbidden")
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        reply = client.post("/data", data=json.dumps(ours(0)), headers={"Content-Type": content_type})
        assert (reply.status_code, reply.get_json()["reason"]) == (415, "bad_content_type"), content_type
    assert stored(client) == (0, 0)
    same_site = client.post("/data", data=json.dumps(ours(0)), headers={"Origin": "http://localhost",
                                                                         "Content-Type": "application/json"})
    assert same_site.status_code == 200


def test_every_answer_carries_the_security_headers(collector_client):
    collector_client.post("/data", json=ours(0))
    for path in ("/", "/stream?host=lab-pc-01&run_id=run-a&source=sysnest", "/api/streams", "/metrics", "/nowhere"):
        headers = collector_client.get(path).headers
        assert "default-src 'none'" in headers["Content-Security-Policy"], path
        assert (headers["X-Content-Type-Options"], headers["X-Frame-Options"], headers["Referrer-Policy"]) == (
            "nosniff", "DENY", "no-referrer"), path


def test_the_three_500s_are_gone(collector_client, db_url):
    """limit=² (a digit to str.isdigit, not to int), a 310-digit integer in a record on its stream's chart,
    and client-reported dropped counts summing past 64 bits."""
    reply = collector_client.get("/api/records?limit=²")
    assert (reply.status_code, reply.get_json()["reason"]) == (400, "bad_query")
    huge = {"metric": "sysnest", "kind": "summary", "ts": 1.0, "per_sec": 10**309}
    body = json.dumps({**ours(0, host="big"), "records": [huge, {**huge, "ts": 2.0, "per_sec": 5}]})
    assert collector_client.post("/data", data=body, content_type="application/json").status_code == 200
    assert collector_client.get("/stream?host=big&run_id=run-a&source=sysnest").status_code == 200
    most = 2**53 - 1
    assert collector_client.post("/data", json=ours(0, dropped=most)).status_code == 200
    from collector.store import make_engine

    with make_engine(db_url).begin() as conn:  # as after 1,024 posts of 2**53-1
        conn.exec_driver_sql("UPDATE streams SET dropped = 1024 * 9007199254740991 WHERE host = 'lab-pc-01'")
    reply = collector_client.post("/data", json=ours(1, dropped=most))
    assert reply.status_code == 200, reply.get_json()
    (stream,) = [s for s in collector_client.get("/api/streams").get_json()["streams"] if s["host"] == "lab-pc-01"]
    assert stream["dropped"] == 2**63 - 1


def test_a_tokens_file_others_can_read_is_warned_about(tmp_path, capsys):
    import server

    path = tmp_path / "tokens.txt"
    path.write_text("alice tok-a-111\n")
    os.chmod(path, 0o644)
    server.parse_args(["--tokens-file", str(path)])
    assert "readable by others (mode 644): chmod 600" in capsys.readouterr().err
    os.chmod(path, 0o600)
    server.parse_args(["--tokens-file", str(path)])
    assert capsys.readouterr().err == ""
