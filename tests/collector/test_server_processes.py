"""server.py as an instructor runs it: the command line, waitress serving real HTTP, and several
server processes on one database storing each batch exactly once under concurrent, repeated posts."""

from __future__ import annotations

import gzip
import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from collector_payloads import envelope, ours, prometheus_samples
from server_fixtures import ServerProcess, free_port, run_cli

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out


@pytest.mark.parametrize("args", [["--port", "70000"], ["--port", "x"], ["--tokens-file", "/nonexistent/tokens"],
                                  ["--max-body", "10"], ["--nonsense"]])
def test_bad_arguments_exit_2_with_one_line(args):
    result = run_cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.strip().splitlines()[-1].startswith("server.py: error:")


def test_bad_tokens_file_is_one_line(tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("alice onlyonefield extra\n")
    result = run_cli("--tokens-file", str(tokens))
    assert result.returncode == 2 and "line 1: expected 'name token'" in result.stderr


@pytest.mark.parametrize("db", ["mysql://lab@localhost/lab", "postgresql://nobody@/lab?host=/nonexistent&port=1"])
def test_unusable_database_exits_1_with_one_line(db):
    result = run_cli("--db", db, "--port", str(free_port()))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("server.py: cannot open the database"), result.stderr


def test_database_it_cannot_understand_exits_1_with_one_line(tmp_path):
    import sqlite3

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as old:  # the first collector's records table, and none of its other tables
        old.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, batch INTEGER, host TEXT, run_id TEXT,"
                    " source TEXT, sequence INTEGER, idx INTEGER, ts REAL, kind TEXT, metric TEXT, data TEXT)")
    result = run_cli("--db", str(db), "--port", str(free_port()))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "refusing the database: its tables (records) are not those of any collector version" in lines[0]


def test_waitress_serves_gzip_tokens_and_json_413(tmp_path):
    log_file = tmp_path / "server_data.log"
    token = "lab-token-4c1d2e9f"
    server = ServerProcess("--db", str(tmp_path / "lab.db"), "--log-file", str(log_file), "--token", token,
                           "--max-body", "65536")
    try:
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        assert requests.get(server.url + "/healthz", timeout=5).json()["auth"] is True
        reply = requests.post(server.url + "/data", data=gzip.compress(json.dumps(ours(0)).encode()),
                              headers={**auth, "Content-Encoding": "gzip"}, timeout=5)
        assert reply.status_code == 200 and reply.json()["stored_records"] == 2
        assert reply.headers["Accept-Encoding"] == "gzip"
        assert requests.post(server.url + "/data", json=ours(1), timeout=5).status_code == 401
        big = ours(1, records=[envelope("sysnest", 1.0, 1, pad="x" * 100_000)])
        reply = requests.post(server.url + "/data", json=big, headers=auth, timeout=5)
        assert reply.status_code == 413 and reply.json()["reason"] == "too_large"
        chunked = (b"x" * 1000 for _ in range(100))  # no Content-Length: the limit holds while reading
        reply = requests.post(server.url + "/data", data=chunked, headers=auth, timeout=5)
        assert reply.status_code == 413 and reply.json()["reason"] == "too_large"
        page = requests.get(server.url + "/", headers=auth, timeout=5)
        assert page.status_code == 200 and "lab-pc-01" in page.text
    finally:
        status, err = server.stop()
    assert status == 0 and "Traceback" not in err
    logged = log_file.read_text() + err
    assert "batch " in log_file.read_text() and token not in logged


def test_two_processes_store_each_batch_exactly_once(db_url):
    servers = [ServerProcess("--db", db_url, "--threads", "8") for _ in range(2)]
    try:
        payloads = [ours(seq, host=f"pc{h}", run_id=f"run{h}") for h in range(3) for seq in range(40)]
        rng = random.Random(66)
        # every batch to both servers, some a third time (a retry after a lost answer), all at once
        posts = [(s, p) for p in payloads for s in servers] + [(rng.choice(servers), p) for p in rng.sample(payloads, 30)]
        rng.shuffle(posts)

        def send(item):
            server, payload = item
            reply = requests.post(server.url + "/data", json=payload, timeout=30)
            return reply.status_code, reply.json()

        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(send, posts))
        assert {status for status, _ in replies} == {200}
        assert sum(not body["duplicate"] for _, body in replies) == len(payloads)
        for server in servers:
            streams = requests.get(server.url + "/api/streams", timeout=10).json()["streams"]
            assert sorted((s["host"], s["batches"], s["records"], s["missing_count"]) for s in streams) == [
                ("pc0", 40, 80, 0), ("pc1", 40, 80, 0), ("pc2", 40, 80, 0)]
            samples = prometheus_samples(requests.get(server.url + "/metrics", timeout=10).text)
            # counters live in the database: both processes report the lab-wide totals
            assert samples["collector_batches_total"] == 120
            assert samples["collector_duplicates_total"] == len(posts) - 120
    finally:
        for server in servers:
            server.stop()
