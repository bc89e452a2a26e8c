"""Load: a lab's worth of clients posting to one collector (server.py under waitress, real HTTP) at once.
50 clients x 200 batches, some sent twice as a client retries after a lost answer: every batch is
stored exactly once, every answer is a 200, and the collector's own totals agree.

On the lab's default database, SQLite (about a minute here: the collector spends ~3.5 ms of CPU per
batch). PostgreSQL under concurrent, repeated posts from two server processes is covered by
test_server_processes.py."""

from __future__ import annotations

import random
import sqlite3
import threading
import uuid

import pytest
import requests
from collector_payloads import envelope, ours, prometheus_samples
from server_fixtures import ServerProcess

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

CLIENTS, BATCHES, RECORDS = 50, 200, 5
RESEND = 0.05          # share of batches a client sends a second time


def client_posts(url: str, client: int, statuses: list, seed: int) -> int:
    """One client: its batches in sequence over one keep-alive connection; returns how many it resent."""
    rng = random.Random(seed)
    run_id = uuid.uuid4().hex
    resent = 0
    with requests.Session() as session:
        for seq in range(BATCHES):
            records = [envelope("sysnest", 1.75e9 + seq, seq + 1, "row", pid=client, n=i) for i in range(RECORDS)]
            payload = ours(seq, host=f"client-{client:02d}", run_id=run_id, records=records)
            sends = 2 if rng.random() < RESEND else 1
            for _ in range(sends):
                reply = session.post(url + "/data", json=payload, timeout=60)
                statuses.append((reply.status_code, reply.json().get("duplicate")))
            resent += sends - 1
    return resent


@pytest.mark.timeout(300)
def test_50_clients_200_batches_each_stored_exactly_once(tmp_path):
    db_path = tmp_path / "collector.db"
    server = ServerProcess("--db", str(db_path), output=str(tmp_path / "server.log"))
    try:
        results: list[list] = [[] for _ in range(CLIENTS)]
        resent = [0] * CLIENTS

        def run(c: int) -> None:
            resent[c] = client_posts(server.url, c, results[c], seed=c)

        threads = [threading.Thread(target=run, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        assert not any(t.is_alive() for t in threads), "a client did not finish within 240 s"
        statuses = [s for r in results for s in r]
        assert {code for code, _ in statuses} == {200}, sorted({code for code, _ in statuses})
        first = sum(1 for _, dup in statuses if dup is False)
        dups = sum(1 for _, dup in statuses if dup is True)
        assert first == CLIENTS * BATCHES and dups == sum(resent) > 0

        streams = requests.get(server.url + "/api/streams", timeout=30).json()["streams"]
        assert len(streams) == CLIENTS
        assert {(s["batches"], s["records"], s["highest"], s["missing_count"]) for s in streams} == {
            (BATCHES, BATCHES * RECORDS, BATCHES - 1, 0)}
        samples = prometheus_samples(requests.get(server.url + "/metrics", timeout=30).text)
        assert samples["collector_batches_total"] == CLIENTS * BATCHES
        assert samples["collector_duplicates_total"] == sum(resent)
        assert not any(k.startswith("collector_rejected_total") and v for k, v in samples.items())
    finally:
        status, log = server.stop()
    assert status == 0 and "Traceback" not in log
    # the database itself: one row per batch_id, and each batch's records exactly once
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*), COUNT(DISTINCT batch_id) FROM batches").fetchone() == (
            CLIENTS * BATCHES, CLIENTS * BATCHES)
        assert db.execute("SELECT COUNT(*) FROM records").fetchone()[0] == CLIENTS * BATCHES * RECORDS
        assert db.execute("SELECT COUNT(*) FROM batches b WHERE n_records != "
                          "(SELECT COUNT(*) FROM records r WHERE r.batch = b.id)").fetchone()[0] == 0
