"""Group commit (collector/groupcommit.py) and what the collector stores when batches arrive together:
concurrent POSTs share transactions, yet every batch_id is stored once, every stream's totals and gaps
come out as if the batches had come one by one, and a failure stays with the batch that caused it."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from collector_payloads import envelope, ours, prometheus_samples

from collector import writer
from collector.groupcommit import GroupCommit

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out


def _wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def _queued_behind_first(items: list[int], max_items: int, weight=lambda item: 1, max_weight: int = 100):
    """Submit items[0], hold its transaction open until every other item has queued behind it, then let
    the writes go. Returns the groups written, in order, and each item's future (a result, or the
    write's exception); writing -1 fails."""
    groups: list[list[int]] = []
    release = threading.Event()

    def write(group: list[int]) -> list[int]:
        groups.append(list(group))
        release.wait(5)  # only the first transaction waits: the event is set before any other starts
        if -1 in group:
            raise RuntimeError("cannot store -1")
        return [item * 10 for item in group]

    commit = GroupCommit(write, max_items=max_items, weight=weight, max_weight=max_weight)
    with ThreadPoolExecutor(len(items)) as pool:
        futures = [pool.submit(commit.submit, items[0])]
        _wait_for(lambda: groups)  # the first item is being written: the others queue
        futures += [pool.submit(commit.submit, n) for n in items[1:]]
        _wait_for(lambda: len(commit._queue) == len(items) - 1)
        release.set()
    return groups, futures


def test_concurrent_submits_share_groups_and_each_gets_its_own_result():
    groups, futures = _queued_behind_first(list(range(12)), max_items=4)
    assert [f.result(5) for f in futures] == [n * 10 for n in range(12)]
    assert sorted(n for group in groups for n in group) == list(range(12))  # each written once
    assert groups[0] == [0] and max(map(len, groups)) == 4 and len(groups) == 4  # 1 + 4 + 4 + 3


def test_a_failing_item_fails_alone():
    groups, futures = _queued_behind_first([0, 1, 2, -1, 3], max_items=8)
    first, *rest = futures
    assert first.result(5) == 0
    with pytest.raises(RuntimeError, match="cannot store -1"):
        rest[2].result(5)
    assert [rest[i].result(5) for i in (0, 1, 3)] == [10, 20, 30]
    # the shared transaction failed, then each of its items was written alone
    assert sorted(groups[1]) == [-1, 1, 2, 3] and sorted(map(tuple, groups[2:])) == [(-1,), (1,), (2,), (3,)]


def test_weight_limits_a_group_past_its_first_item():
    groups, futures = _queued_behind_first([1, 9, 2, 3, 1], max_items=10, weight=lambda item: item, max_weight=5)
    assert [f.result(5) for f in futures] == [10, 90, 20, 30, 10]
    assert groups[1:] == [[9], [2, 3], [1]]  # 9 alone (a first item always goes), then up to 5 in all


def test_concurrent_posts_store_each_batch_once_with_right_totals_and_gaps(collector_app):
    """Threads post one stream's batches shuffled, with retries (same batch_id) and two batch_ids
    carrying the same sequence; some sequences never arrive. However the batches were grouped into
    transactions, the totals are those of one-by-one arrival."""
    rng = random.Random(8)
    lost = {5, 17, 18, 19, 40}
    payloads = [ours(seq, host=f"pc{h}", run_id="r", records=[envelope("sysnest", 1000.0 + seq, 1, pid=h)])
                for h in range(3) for seq in range(50) if seq not in lost]
    retries = rng.sample(payloads, 25)
    same_sequence = [{**p, "batch_id": p["batch_id"] + "-b"} for p in rng.sample(payloads, 10)]
    posts = payloads + retries + same_sequence
    rng.shuffle(posts)

    def send(payload):
        reply = collector_app.test_client().post("/data", data=json.dumps(payload), content_type="application/json")
        return payload["batch_id"], reply.status_code, reply.get_json()

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(send, posts))
    assert {status for _, status, _ in replies} == {200}
    stored_once = [batch_id for batch_id, _, body in replies if not body["duplicate"]]
    assert sorted(stored_once) == sorted(p["batch_id"] for p in payloads + same_sequence)
    client = collector_app.test_client()
    streams = {s["host"]: s for s in client.get("/api/streams").get_json()["streams"]}
    for h in range(3):
        extra = sum(1 for p in same_sequence if p["host"] == f"pc{h}")
        s = streams[f"pc{h}"]
        assert (s["batches"], s["records"], s["received"], s["highest"]) == (45 + extra, 45 + extra, 45, 49)
        assert (s["missing"], s["missing_count"], s["missing_ranges"]) == ([5, 17, 18, 19, 40], 5,
                                                                           [[5, 5], [17, 19], [40, 40]])
    samples = prometheus_samples(client.get("/metrics").get_data(as_text=True))
    assert samples["collector_duplicates_total"] == len(retries)
    assert samples["collector_batches_total"] == len(payloads) + len(same_sequence)
    # a late batch still fills its gap
    assert client.post("/data", data=json.dumps(ours(17, host="pc0", run_id="r")),
                       content_type="application/json").get_json()["missing"] == [5, 18, 19, 40]


def _wal_after(tmp_path, monkeypatch, checkpoint_records: int) -> int:
    from collector import create_app
    from collector.state import EXTENSION

    monkeypatch.setattr(writer, "CHECKPOINT_RECORDS", checkpoint_records)
    app = create_app({"db_url": f"sqlite:///{tmp_path}/c{checkpoint_records}.db"})
    try:
        client = app.test_client()
        records = [envelope("sysnest", 1000.0 + i, 1, pad="x" * 200) for i in range(50)]
        for seq in range(200):  # about 3 MB of records
            assert client.post("/data", data=json.dumps(ours(seq, records=records)),
                               content_type="application/json").status_code == 200
        stream = client.get("/api/streams").get_json()["streams"][0]
        assert (stream["batches"], stream["records"], stream["missing_count"]) == (200, 10000, 0)
        return os.path.getsize(f"{tmp_path}/c{checkpoint_records}.db-wal")
    finally:
        app.extensions[EXTENSION].store.close()


def test_sqlite_wal_is_checkpointed_outside_commits(tmp_path, monkeypatch):
    """SQLite's own checkpoints are off (each would hold up a commit); the writer's keep the WAL from
    growing with the data."""
    unchecked = _wal_after(tmp_path, monkeypatch, 10**9)
    checked = _wal_after(tmp_path, monkeypatch, 200)
    assert unchecked > 3_000_000 and checked < unchecked / 4, (unchecked, checked)


def test_sqlite_wal_truncation_does_not_wait_long_for_a_reader(tmp_path, monkeypatch):
    """A long read (an export) holds the WAL: truncating it waits a moment, then gives up until the next
    checkpoint, instead of holding every POST up for the busy timeout."""
    import sqlite3

    from collector import create_app
    from collector.state import EXTENSION

    monkeypatch.setattr(writer, "CHECKPOINT_RECORDS", 20)
    monkeypatch.setattr(writer, "WAL_PAGES_MAX", 1)
    app = create_app({"db_url": f"sqlite:///{tmp_path}/c.db"})
    reader = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    try:
        client = app.test_client()
        records = [envelope("sysnest", 1000.0 + i, 1) for i in range(10)]
        post = lambda seq: client.post("/data", data=json.dumps(ours(seq, records=records)),  # noqa: E731
                                       content_type="application/json")
        assert post(0).status_code == 200
        reader.execute("BEGIN")
        assert reader.execute("SELECT COUNT(*) FROM records").fetchone() == (10,)  # holds its snapshot
        started = time.monotonic()
        assert all(post(seq).status_code == 200 for seq in range(1, 30))
        assert time.monotonic() - started < 10  # 60 s (the busy timeout) a truncation, without the limit
        reader.execute("COMMIT")
        assert client.get("/api/streams").get_json()["streams"][0]["batches"] == 30
    finally:
        reader.close()
        app.extensions[EXTENSION].store.close()
