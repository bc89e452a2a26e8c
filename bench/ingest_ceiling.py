"""The storage ceilings of benchmark 4: plain writers that put the batches wrk posts straight into the
collector's schema, with no HTTP, no parsing and no checks, a group of batches per transaction (as
many as wrk has connections: the most the collector's group commit can hold at once).

sqlite3: WAL, synchronous=NORMAL, foreign keys on, as collector/store.py opens the file. psycopg: the
same private PostgreSQL cluster with its default, durable settings, records by COPY as the collector
writes them. Each batch is its batch row, its 100 records (the JSON text of bench/post_batches.lua's
sysnest record, times rising through the stream's next second) and its stream's new totals; the tables
are made by the collector itself (collector.store.Store). Batches/s counts only the time spent in the
database: building the rows is the client's work.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator

from sqlalchemy.engine import make_url

from collector.payload import parse_body
from collector.store import Store
from collector.writer import Ingest

RECORD = ('{{"metric":"sysnest","ts":{ts:.3f},"kind":"row","interval":1,"level":"detail","pid":{pid},'
          '"comm":"stress","syscall":"read","nr":0,"count":120,"errors":0,"total_us":35.25,'
          '"avg_us":0.294,"max_us":4.1}}')
STREAMS = 2  # wrk's threads, each one client's stream
BATCH_SQL = ("INSERT INTO batches (batch_id, host, run_id, source, sequence, client_ts, received_at, n_records,"
             " dropped, schema) VALUES ({p}, {p}, {p}, 'sysnest', {p}, {p}, {p}, {p}, 0, 1) RETURNING id")
STREAM_SQL = ("UPDATE streams SET batches = batches + 1, records = records + {p}, received = received + 1,"
              " highest = {p}, last_seen = {p} WHERE id = {p}")
BATCH_ROW_PG = "(%s, %s, %s, 'sysnest', %s, %s, %s, %s, 0, 1)"
BATCHES_SQL_PG = ("INSERT INTO batches (batch_id, host, run_id, source, sequence, client_ts, received_at, n_records,"
                  " dropped, schema) VALUES {rows} RETURNING id, batch_id")
STREAMS_SQL_PG = ("UPDATE streams SET batches = batches + %s, records = records + %s, received = received + %s,"
                  " highest = %s, last_seen = %s WHERE id = %s")
NEW_STREAM_SQL = ("INSERT INTO streams (host, run_id, source, batches, records, received, highest, lowest, dropped,"
                  " first_seen, last_seen, legacy) VALUES ({p}, {p}, 'sysnest', 0, 0, 0, -1, 0, 0, {p}, {p}, FALSE)"
                  " RETURNING id")


def batches(records: int) -> Iterator[tuple[int, int, float, list[tuple[float, str]]]]:
    """(stream, sequence, batch time, [(record ts, record JSON)]), the streams taking turns."""
    start = float(int(time.time()))
    seq = 0
    while True:
        t = start + seq
        rows = [(t + i / (records + 1), RECORD.format(ts=t + i / (records + 1), pid=1000 + i)) for i in range(1, records + 1)]
        for stream in range(STREAMS):
            yield stream, seq, t + 1, rows
        seq += 1


def _streams(cur: sqlite3.Cursor, p: str) -> list[int]:
    now = time.time()
    ids = []
    for n in range(STREAMS):
        cur.execute(NEW_STREAM_SQL.format(p=p), (f"ceiling-host-{n}", "ceiling", now, now))
        ids.append(cur.fetchone()[0])
    return ids


def groups(records: int, group: int) -> Iterator[list]:
    source = batches(records)
    while True:
        yield [next(source) for _ in range(group)]


def sqlite_ceiling(path: str, seconds: float, records: int, group: int) -> float:
    """Batches/s of a plain sqlite3 writer, `group` batches a transaction."""
    Store(f"sqlite:///{path}").close()  # the collector's own tables and indexes
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        conn.execute(f"PRAGMA {pragma}")
    cur = conn.cursor()
    stream_ids = _streams(cur, "?")
    insert_records = ("INSERT INTO records (batch, stream, sequence, idx, ts, kind, metric, data)"
                      " VALUES (?, ?, ?, ?, ?, 'row', 'sysnest', ?)")

    def write(batch_group: list) -> None:
        cur.execute("BEGIN IMMEDIATE")
        for stream, seq, t, rows in batch_group:
            sid = stream_ids[stream]
            cur.execute(BATCH_SQL.format(p="?"), (f"ceiling-{stream}-{seq}", f"ceiling-host-{stream}", "ceiling", seq,
                                                  t, time.time(), records))
            batch_id = cur.fetchone()[0]
            cur.executemany(insert_records, [(batch_id, sid, seq, i, ts, data) for i, (ts, data) in enumerate(rows)])
            cur.execute(STREAM_SQL.format(p="?"), (records, seq, time.time(), sid))
        cur.execute("COMMIT")

    rate = _batches_per_second(records, group, seconds, write)
    conn.close()
    return rate


def postgres_ceiling(url: str, seconds: float, records: int, group: int) -> float:
    """Batches/s of a plain psycopg writer, `group` batches a transaction, records by COPY."""
    import psycopg  # noqa: PLC0415 - only this ceiling needs it

    Store(url).close()
    u = make_url(url)
    conn = psycopg.connect(host=u.query["host"], port=int(u.query["port"]), user=u.username, dbname=u.database)
    cur = conn.cursor()
    stream_ids = _streams(cur, "%s")
    conn.commit()
    copy = "COPY records (batch, stream, sequence, idx, ts, kind, metric, data) FROM STDIN"

    def write(batch_group: list) -> None:
        # a handful of round trips a group, as the collector makes: its batch rows in one INSERT, its
        # records in one COPY, one UPDATE per stream
        now = time.time()
        params = [v for stream, seq, t, _ in batch_group
                  for v in (f"ceiling-{stream}-{seq}", f"ceiling-host-{stream}", "ceiling", seq, t, now, records)]
        cur.execute(BATCHES_SQL_PG.format(rows=", ".join([BATCH_ROW_PG] * len(batch_group))), params)
        ids = dict((name, bid) for bid, name in cur.fetchall())
        rows_out, highest = [], {}
        for stream, seq, _, rows in batch_group:
            batch_id, sid = ids[f"ceiling-{stream}-{seq}"], stream_ids[stream]
            rows_out += [(batch_id, sid, seq, i, ts, "row", "sysnest", data) for i, (ts, data) in enumerate(rows)]
            highest[sid] = (highest.get(sid, (0, 0))[0] + 1, seq)
        with cur.copy(copy) as out:
            for row in rows_out:
                out.write_row(row)
        for sid, (n, seq) in highest.items():
            cur.execute(STREAMS_SQL_PG, (n, n * records, n, seq, now, sid))
        conn.commit()

    rate = _batches_per_second(records, group, seconds, write)
    conn.close()
    return rate


def _batches_per_second(records: int, group: int, seconds: float, write: Callable[[list], None]) -> float:
    """Batches written a second: `write` given `group` batches at a time until it has spent `seconds`
    (the time making the batches not counted)."""
    spent, done = 0.0, 0
    for batch_group in groups(records, group):
        started = time.perf_counter()
        write(batch_group)
        spent += time.perf_counter() - started
        done += len(batch_group)
        if spent >= seconds:
            break
    return done / spent


def _body(stream: int, seq: int, t: float, rows: list[tuple[float, str]]) -> bytes:
    """The batch as bench/post_batches.lua posts it."""
    return (f'{{"schema":1,"timestamp":{t:.1f},"source_script":"sysnest","batch_id":"writer-{stream}-{seq}",'
            f'"sequence":{seq},"host":"writer-host-{stream}","run_id":"writer","metrics":[{",".join(d for _, d in rows)}]}}'
            ).encode()


def collector_writer(url: str, seconds: float, records: int, group: int) -> float:
    """Batches/s of the collector's own writer (collector.writer, what server.py's group commit runs)
    given the same batches already parsed, `group` a transaction, in one thread: no HTTP and no GIL
    shared with request threads. Batches/s counts only the time in the writer (checkpoints included)."""
    store = Store(url)
    writer = store.writer  # the group commit's write, without its requests
    spent, done = 0.0, 0
    try:
        for batch_group in groups(records, group):
            jobs = [Ingest(parse_body(_body(stream, seq, t, rows)), None, "127.0.0.1", 2.0)
                    for stream, seq, t, rows in batch_group]
            started = time.perf_counter()
            writer._write_group(jobs)  # noqa: SLF001
            if writer._checkpoints:  # noqa: SLF001
                writer._checkpoints.after_commit()  # noqa: SLF001
            spent += time.perf_counter() - started
            done += len(jobs)
            if spent >= seconds:
                break
    finally:
        store.close()
    return done / spent
