"""Stacks stored once: the frames of offcpu, compmem and cpuprofile stack records go to the stacks table,
one row per distinct stack, and every read gives the records back as they were posted (SQLite and
PostgreSQL). A database of the schema before the stacks table starts and takes stack records."""

from __future__ import annotations

import json
import runpy

import pytest
from collector_payloads import ours
from helpers import ROOT
from sqlalchemy import MetaData, create_engine, text
from stack_posts import cpuprofile_stacks, post_intervals, sample


def read_back(client, source: str) -> list[dict]:
    items = client.get(f"/api/records?source={source}&limit=100000").get_json()["records"]
    return [i["record"] for i in items]


def table_count(app, table: str) -> int:
    from collector.state import EXTENSION

    with app.extensions[EXTENSION].store.engine.connect() as conn:
        return conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()


@pytest.mark.parametrize("metric", ["offcpu", "compmem", "cpuprofile"])
def test_each_stack_is_stored_once_and_records_read_back_whole(collector_app, metric):
    client = collector_app.test_client()
    records = cpuprofile_stacks(1_795_307_001.0) if metric == "cpuprofile" else sample(metric)
    stack_records = [r for r in records if r["kind"] == "stack" or r.get("level") == "stack"]
    distinct = {json.dumps([r.get(k) for k in ("frames", "kernel_frames", "user_frames", "folded")])
                for r in stack_records}
    assert stack_records and len(distinct) > 1
    posted = post_intervals(client, metric, records, 5)
    assert table_count(collector_app, "stacks") == len(distinct)
    assert read_back(client, metric) == posted
    # key order too: the frame fields are the last fields each metric writes
    ndjson = client.get(f"/api/records?source={metric}&format=ndjson&limit=100000").get_data(as_text=True)
    assert [list(json.loads(line)["record"]) for line in ndjson.splitlines()] == [list(r) for r in posted]


def test_retried_batch_adds_no_stack_and_non_stack_records_have_none(collector_app):
    client = collector_app.test_client()
    payload = ours(0, source="offcpu", records=sample("offcpu"))
    for _ in range(2):
        assert client.post("/data", json=payload).status_code == 200
    with collector_app.extensions["collector"].store.engine.connect() as conn:
        rows = conn.execute(text("SELECT data, stack FROM records")).all()
    stacks = [stack for data, stack in rows if '"level":"stack"' in data]
    assert stacks and all(s is not None and len(s) == 16 for s in stacks)
    assert all(stack is None for data, stack in rows if '"level":"stack"' not in data)
    assert all('"kernel_frames"' not in data for data, _ in rows)  # frames are in the stacks table only
    assert len(rows) == len(payload["records"])


def test_a_stack_field_of_any_shape_round_trips(collector_client):
    odd = [{"metric": "offcpu", "ts": 1.0e9, "kind": "row", "level": "stack", "folded": "é;\u2603 1",
            "frames": [2**70, None, {"a": []}]},
           {"metric": "offcpu", "ts": 1.0e9, "kind": "stack", "frames": []},
           {"metric": "offcpu", "ts": 1.0e9, "kind": "row", "level": "thread", "frames": ["kept in the record"]}]
    assert collector_client.post("/data", json=ours(0, source="offcpu", records=odd)).status_code == 200
    assert read_back(collector_client, "offcpu") == odd


def previous_schema() -> MetaData:
    """The tables as they were before the stacks table (frozen from commit 429a250: no stacks, no
    records.stack, nor anything added since)."""
    return runpy.run_path(f"{ROOT}/tests/samples/collector_schemas/429a250.py")["metadata"]


def test_database_of_the_previous_schema_starts_and_keeps_its_records(make_collector, db_url):
    old = previous_schema()
    engine = create_engine(db_url)
    old.create_all(engine)
    record = {"metric": "sysnest", "ts": 1.0e9, "kind": "summary", "syscalls": 7}
    with engine.begin() as conn:  # a stream of one batch of one record, stored by the previous collector
        stream = conn.execute(old.tables["streams"].insert().values(
            host="h", run_id="r", source="sysnest", batches=1, records=1, received=1, highest=0, lowest=0,
            dropped=0, first_seen=1.0e9, last_seen=1.0e9, legacy=False)).inserted_primary_key[0]
        batch = conn.execute(old.tables["batches"].insert().values(
            batch_id="b0", host="h", run_id="r", source="sysnest", sequence=0, client_ts=1.0e9,
            received_at=1.0e9, n_records=1, dropped=0, schema=1)).inserted_primary_key[0]
        conn.execute(old.tables["records"].insert().values(
            batch=batch, stream=stream, sequence=0, idx=0, ts=1.0e9, kind="summary", metric="sysnest",
            data=json.dumps(record, separators=(",", ":"))))
    engine.dispose()
    app = make_collector()
    client = app.test_client()
    offcpu = post_intervals(client, "offcpu", sample("offcpu"), 2)
    assert read_back(client, "sysnest") == [record]
    assert read_back(client, "offcpu") == offcpu
    assert table_count(app, "stacks") > 0


def test_two_processes_posting_the_same_new_stacks_store_each_once(db_url):
    """Two server processes take, at once, batches bringing the same new stacks: each stack is stored
    once; then one is killed (SIGKILL) and restarted, and every acknowledged record reads back whole
    from both."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    import requests
    from server_fixtures import ServerProcess

    records = sample("offcpu")
    stacks = [r for r in records if r.get("level") == "stack"]
    # ten variants of each sample stack, each host's batches holding all of them in its own order
    variants = [{**r, "user_frames": [f"f{n} [app]", *r["user_frames"]]} for n in range(10) for r in stacks]
    rng = random.Random(13)
    payloads = []
    for h in range(4):
        for seq in range(15):
            batch = [{**r, "ts": 1.8e9 + seq, "interval": seq + 1} for r in rng.sample(variants, len(variants))]
            payloads.append(ours(seq, host=f"pc{h}", source="offcpu", records=batch))
    servers = [ServerProcess("--db", db_url, "--threads", "8") for _ in range(2)]
    try:
        posts = [(s, p) for p in payloads for s in servers]
        rng.shuffle(posts)

        def send(item):
            server, payload = item
            return requests.post(server.url + "/data", data=json.dumps(payload), timeout=60,
                                 headers={"Content-Type": "application/json"}).status_code

        with ThreadPoolExecutor(12) as pool:
            assert set(pool.map(send, posts)) == {200}
        servers[0].kill()
        servers[0] = ServerProcess("--db", db_url, "--threads", "2", port=servers[0].port)
        for server in servers:
            for h in range(4):
                items = requests.get(f"{server.url}/api/records?host=pc{h}&source=offcpu&limit=100000",
                                     timeout=30).json()["records"]
                posted = [r for p in payloads if p["host"] == f"pc{h}" for r in p["records"]]
                assert sorted(json.dumps(i["record"], sort_keys=True) for i in items) == sorted(
                    json.dumps(r, sort_keys=True) for r in posted)
        engine = create_engine(db_url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM stacks")).scalar_one() == len(
                {json.dumps([r["kernel_frames"], r["user_frames"], r["folded"]]) for r in variants})
        engine.dispose()
    finally:
        for server in servers:
            server.stop()
