"""Schema migrations (collector/migrate.py, Alembic): a database made by each earlier collector version,
built from that version's own schema (tests/samples/collector_schemas, copied from the git history),
upgraded in place with every row intact; a database the collector cannot understand refused at start
with one line; `server.py db upgrade`. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import runpy
import subprocess

import pytest
from collector_payloads import ours
from helpers import PYTHON, ROOT
from server_fixtures import SERVER, free_port
from sqlalchemy import UniqueConstraint, create_engine, insert, inspect, select, text

from collector import migrate
from collector.store import make_engine

SCHEMAS = f"{ROOT}/tests/samples/collector_schemas"
# each landed collector version's schema, by the commit that introduced it, and its Alembic revision
VERSIONS = {"44efcbf": "0001", "429a250": "0002", "af34d32": "0003", "1ccc11a": "0004", "fd2630b": "0005",
            "7e1b4dc": "0006"}
STACK_HASH = bytes(range(16))
ALICE = {"Authorization": "Bearer tok-alice"}


def _old_schema(commit: str):
    return runpy.run_path(f"{SCHEMAS}/{commit}.py")["metadata"]


def _fill(conn, meta, commit: str) -> None:
    """A lab as that version stored it: two streams of our transport (one with sequence 2 missing), one
    of the original client, records, counters; the later versions' stream totals and gaps too."""
    t = meta.tables
    streams = [("pc-a", "run-1", "sysnest", [0, 1, 3], "alice"), ("pc-b", "run-2", "offcpu", [0], "bob"),
               ("10.0.0.9", "legacy-x", "sysnest", [0, 1], None)]
    batch_id = record_id = 0
    for stream_id, (host, run_id, source, sequences, token) in enumerate(streams, 1):
        if "streams" in t:
            conn.execute(insert(t["streams"]).values(
                id=stream_id, host=host, run_id=run_id, source=source, batches=len(sequences),
                records=2 * len(sequences), received=len(sequences), highest=max(sequences), lowest=0, dropped=3,
                first_seen=100.0, last_seen=100.0 + len(sequences), legacy=token is None, token_name=token))
            if sequences == [0, 1, 3]:
                conn.execute(insert(t["gaps"]).values(stream=stream_id, lo=2, hi=2))
        for n, sequence in enumerate(sequences):
            batch_id += 1
            conn.execute(insert(t["batches"]).values(
                id=batch_id, batch_id=f"b-{batch_id}", host=host, run_id=run_id, source=source, sequence=sequence,
                client_ts=50.0 + n, received_at=100.0 + n, n_records=2, dropped=3 if n == 0 else 0,
                schema=0 if token is None else 1, token_name=token, remote_addr="10.0.0.9"))
            for idx in range(2):
                record_id += 1
                row = {"id": record_id, "batch": batch_id, "sequence": sequence, "idx": idx, "ts": 50.0 + n + idx / 10,
                       "kind": "row", "metric": source,
                       "data": json.dumps({"metric": source, "kind": "row", "ts": 50.0 + n, "i": record_id},
                                          separators=(",", ":"))}
                row.update({"stream": stream_id} if "streams" in t else {"host": host, "run_id": run_id,
                                                                           "source": source})
                if "stacks" in t and record_id == 1:
                    conn.execute(insert(t["stacks"]).values(hash=STACK_HASH, frames='{"frames":["f1","f2"]}'))
                    row["stack"] = STACK_HASH
                conn.execute(insert(t["records"]).values(**row))
    conn.execute(insert(t["counters"]).values([{"name": "duplicates", "value": 4},
                                                {"name": "rejected:not_json", "value": 2}]))
    if conn.dialect.name == "postgresql":  # the ids were given here: their sequences go on past them, as the
        for table in ("batches", "records", "streams"):  # collector's own inserts would have left them
            if table in t:
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"))


def _rows(conn, table: str, columns: str) -> list[tuple]:
    return [tuple(r) for r in conn.execute(text(f"SELECT {columns} FROM {table} ORDER BY 1"))]


BATCH_COLUMNS = ("id, batch_id, host, run_id, source, sequence, client_ts, received_at, n_records, dropped, schema,"
                 " token_name, remote_addr")
RECORD_COLUMNS = "id, batch, sequence, idx, ts, kind, metric, data"


@pytest.mark.parametrize("commit", VERSIONS)
def test_each_earlier_schema_is_upgraded_with_every_row(commit, db_url, make_collector):
    engine = create_engine(db_url)
    meta = _old_schema(commit)
    meta.create_all(engine)
    with engine.begin() as conn:
        _fill(conn, meta, commit)
        before = {"batches": _rows(conn, "batches", BATCH_COLUMNS), "records": _rows(conn, "records", RECORD_COLUMNS),
                  "counters": _rows(conn, "counters", "name, value")}
    engine.dispose()
    client = make_collector(tokens={"tok-alice": "alice", "tok-bob": "bob"}).test_client()  # migrates on start
    with make_engine(db_url).connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == migrate.head()
        after = {"batches": _rows(conn, "batches", BATCH_COLUMNS), "records": _rows(conn, "records", RECORD_COLUMNS),
                 "counters": _rows(conn, "counters", "name, value")}
    assert after == before
    streams = {(s["host"], s["source"]): s for s in client.get("/api/streams", headers=ALICE).get_json()["streams"]}
    a = streams[("pc-a", "sysnest")]
    assert (a["batches"], a["records"], a["highest"], a["missing"], a["missing_count"]) == (3, 6, 3, [2], 1)
    assert streams[("10.0.0.9", "sysnest")]["legacy"] is True and streams[("pc-b", "offcpu")]["token_name"] == "bob"
    records = client.get("/api/records?limit=100", headers=ALICE).get_json()["records"]
    assert len(records) == 12 and {(r["host"], r["batch_id"]) for r in records if r["sequence"] == 3} == {("pc-a", "b-3")}
    if "stacks" in meta.tables:
        assert records[0]["record"]["frames"] == ["f1", "f2"]
    # the upgraded database takes new batches: the missing sequence fills its gap (alice's stream)
    reply = client.post("/data", json=ours(2, host="pc-a", run_id="run-1", source="sysnest"),
                        headers=ALICE)
    assert reply.status_code == 200 and reply.get_json()["missing_count"] == 0, reply.get_json()


def _mangled(db_url: str, mangle) -> None:
    meta = _old_schema("429a250")
    mangle(meta)
    engine = create_engine(db_url)
    meta.create_all(engine)
    engine.dispose()


def _drop_column(table: str, column: str):
    def mangle(meta) -> None:
        t = meta.tables[table]
        t._columns.remove(t.c[column])
    return mangle


def _not_unique(meta) -> None:
    table = meta.tables["batches"]
    table.constraints = {c for c in table.constraints if not isinstance(c, UniqueConstraint)}


def _no_gaps(meta) -> None:
    meta.remove(meta.tables["gaps"])


@pytest.mark.parametrize("mangle,says", [
    (_drop_column("streams", "dropped"), "lacks column streams.dropped"),
    (_not_unique, "lacks unique key batches(batch_id)"),
    (_no_gaps, "not those of any collector version"),
])
def test_a_database_it_cannot_understand_is_refused_at_start(db_url, mangle, says):
    _mangled(db_url, mangle)
    started = subprocess.run([PYTHON, SERVER, "--db", db_url, "--port", str(free_port())], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
    assert started.returncode == 1 and started.stdout == ""
    assert started.stderr.count("\n") == 1 and says in started.stderr, started.stderr
    with make_engine(db_url).connect() as conn:  # left as it was: nothing stamped, nothing added
        assert "alembic_version" not in _tables(conn) and "stacks" not in _tables(conn)


def test_a_newer_collectors_database_is_refused(db_url):
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('9999')"))
    engine.dispose()
    result = subprocess.run([PYTHON, SERVER, "db", "upgrade", "--db", db_url], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 1 and "made by a newer collector (schema revision 9999" in result.stderr
    assert result.stderr.count("\n") == 1


def test_db_upgrade_command(db_url):
    meta = _old_schema("44efcbf")
    engine = create_engine(db_url)
    meta.create_all(engine)
    with engine.begin() as conn:
        _fill(conn, meta, "44efcbf")
    engine.dispose()
    first = subprocess.run([PYTHON, SERVER, "db", "upgrade", "--db", db_url], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert first.returncode == 0 and f"from 0001 to {migrate.head()}" in first.stdout, first.stderr
    again = subprocess.run([PYTHON, SERVER, "db", "upgrade", "--db", db_url], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert again.returncode == 0 and "already at" in again.stdout, again.stderr
    with make_engine(db_url).connect() as conn:
        assert conn.execute(select(text("count(*)")).select_from(text("records"))).scalar() == 12


def _tables(conn) -> set[str]:
    return set(inspect(conn).get_table_names())


def test_a_0005_database_upgraded_to_0006_is_compacted(db_url, make_collector):
    """Migration 0006 on a database of the collector before it: records.bucket NULL in every record, the
    compactions log and the marks empty, and a retention pass on it deletes the old records, their
    batches (through the new records-by-batch index) and their streams, and logs itself."""
    engine = create_engine(db_url)
    meta = _old_schema("fd2630b")
    meta.create_all(engine)
    with engine.begin() as conn:
        _fill(conn, meta, "fd2630b")
    engine.dispose()
    app = make_collector(retention="raw=1d", compact_every_s=0)
    with make_engine(db_url).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM records WHERE bucket IS NULL")).scalar() == 12
        assert "ix_records_batch" in {i["name"] for i in inspect(conn).get_indexes("records")}
        assert _rows(conn, "compactions", "id") == [] and _rows(conn, "retention_marks", "bucket_s") == []
    done = app.extensions["collector"].store.compactor.run(now=86400.0 + 200)  # every record is from ts 50-53
    assert (done.expired, done.batches) == (12, 6)
    with make_engine(db_url).connect() as conn:
        assert [_rows(conn, t, "count(*)")[0][0] for t in ("records", "batches", "streams", "gaps", "compactions")] == \
            [0, 0, 0, 0, 1]
        assert dict(_rows(conn, "counters", "name, value"))["retention:expired"] == 12
