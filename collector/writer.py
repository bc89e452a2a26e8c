"""Writing batches. A POST's batch shares a transaction with the batches posted meanwhile
(groupcommit.py). In it go the batch row (INSERT ... ON CONFLICT (batch_id) DO NOTHING: a retry is
recognised atomically, across threads and server processes), its records, and its stream's totals and
gaps, changed under the stream row's lock, so storing and answering cost the same however long the
stream is. SQLite's WAL is copied back into the database by a request after its batch is committed,
not inside a commit that every waiting request would wait for."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, count, repeat
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from collector import legacy_runs, trend
from collector.groupcommit import GroupCommit
from collector.payload import Batch
from collector.rejections import Rejections
from collector.schema import counters
from collector.stream import MISSING_LISTED, TOTALS, Stream

MAX_TOTAL = 2**63 - 1  # a 64-bit column's largest: a sum of client-reported counts stops there
GROUP_BATCHES = 64  # batches in one transaction at most
GROUP_RECORDS = 50_000  # and records, past a group's first batch
RECORDS_PER_INSERT = 500  # SQLite: rows of one INSERT, 4000 parameters (its limit is 32766)
RECORD_COLUMNS = ("batch", "stream", "sequence", "idx", "ts", "kind", "metric", "data", "stack")
STACKS_PER_INSERT = 500  # SQLite: rows of one INSERT into stacks, 1000 parameters
BATCH_COLUMNS = 12
WRITER_CACHE_KB = 32_768  # SQLite: the writer's page cache (the default 2 MB holds too few index pages)
CHECKPOINT_RECORDS = 20_000  # SQLite: records written between two checkpoints (a few MB of WAL)
WAL_PAGES_MAX = 16_384  # SQLite: a longer WAL (64 MB of 4 KB pages) is truncated before the next write
TRUNCATE_WAIT_MS = 200  # for readers to finish, before giving up until the next checkpoint
BUSY_TIMEOUT_MS = 60_000  # store.make_engine's, for everything else


@dataclass
class Ingest:
    """One POST's batch, as the writer stores it."""
    batch: Batch
    token_name: str | None
    remote_addr: str | None
    legacy_slack_s: float


@dataclass
class IngestResult:
    duplicate: bool
    host: str
    run_id: str
    source: str
    sequence: int
    stored_records: int
    stream: Stream  # the batch's stream once stored (a duplicate: the stream of the batch stored first)
    owner: str | None = None  # set when refused: the stream belongs to this other token
    full: bool = False  # refused: a new stream, and the collector holds max_streams already


@contextlib.contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write (on SQLite: BEGIN IMMEDIATE, see store.make_engine)."""
    with engine.connect() as conn:
        conn.execution_options(write=True)
        with conn.begin():
            yield conn


def bump(conn: Connection, name: str, by: int = 1) -> None:
    """Add to a named counter, atomically across processes."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(counters).values(name=name, value=by)
    conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_={"value": counters.c.value + by}))


class _Sql:
    """The ingest path's statements as driver SQL, run on the driver's cursor, most of them covering a
    whole group (many rows in one statement). Every call into the database gives up Python's GIL, and
    the writer then waits for it behind the request threads that are parsing: a group costs a handful of
    calls whatever its size. (Building them through SQLAlchemy would cost more than the work.)"""

    def __init__(self, dialect: str) -> None:
        self._dialect = dialect
        self._sized: dict[tuple[str, int], str] = {}
        totals = ", ".join(TOTALS)
        # {rows}: a (?, ...) group per row, made by values(); {ids}: ?, ... made by in_list()
        self.insert_batches = ("INSERT INTO batches (batch_id, host, run_id, source, sequence, client_ts, received_at,"
                               " n_records, dropped, schema, token_name, remote_addr) VALUES {rows}"
                               " ON CONFLICT (batch_id) DO NOTHING RETURNING id, batch_id")
        self.count_streams = "SELECT count(*) FROM streams"
        self.drop_streams = "DELETE FROM streams WHERE batches = 0 AND id IN ({ids})"
        self.first_batches = "SELECT batch_id, host, run_id, source, sequence FROM batches WHERE batch_id IN ({ids})"
        # the streams' rows, made if new (with the totals of a stream without batches), and locked until
        # commit: on PostgreSQL the no-op update takes the row lock
        self.lock_streams = (f"INSERT INTO streams (host, run_id, source, {totals}) VALUES {{rows}}"
                             f" ON CONFLICT (host, run_id, source) DO UPDATE SET batches = streams.batches"
                             f" RETURNING id, host, run_id, source, {totals}, trend")
        self.no_batches = "0, 0, 0, -1, 0, 0, 0, 0, FALSE, NULL"
        # every stream's new totals in one statement: each row conflicts on its id and updates it
        self.update_streams = (f"INSERT INTO streams (id, host, run_id, source, {totals}) VALUES {{rows}}"
                               f" ON CONFLICT (id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in TOTALS)}")
        # a stack stored before (by any transaction, any process) is left as it is: same hash, same frames
        self.set_trends = self.sql("UPDATE streams SET trend = ? WHERE id = ?")
        self.insert_stacks = "INSERT INTO stacks (hash, frames) VALUES {rows} ON CONFLICT (hash) DO NOTHING"
        self.insert_records = f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}) VALUES {{rows}}"
        self.copy_records = f"COPY records ({', '.join(RECORD_COLUMNS)}) FROM STDIN"  # PostgreSQL
        self.read_stream = self.sql(f"SELECT id, {totals} FROM streams WHERE host = ? AND run_id = ? AND source = ?")
        self.gap_below = self.sql("SELECT lo, hi FROM gaps WHERE stream = ? AND lo <= ? ORDER BY lo DESC LIMIT 1")
        self.add_gap = self.sql("INSERT INTO gaps (stream, lo, hi) VALUES (?, ?, ?)")
        self.set_gap_lo = self.sql("UPDATE gaps SET lo = ? WHERE stream = ? AND lo = ?")
        self.set_gap_hi = self.sql("UPDATE gaps SET hi = ? WHERE stream = ? AND lo = ?")
        self.drop_gap = self.sql("DELETE FROM gaps WHERE stream = ? AND lo = ?")
        self.first_gaps = self.sql(f"SELECT lo, hi FROM gaps WHERE stream = ? ORDER BY lo LIMIT {MISSING_LISTED}")

    def sql(self, statement: str) -> str:
        return statement if self._dialect == "sqlite" else statement.replace("?", "%s")  # psycopg's style

    def values(self, template: str, rows: int, columns: int, constants: str = "") -> str:
        """template with {rows} as this many rows of `columns` parameters, each followed by constants."""
        key = (template + constants, rows)
        if key not in self._sized:
            row = "(" + ", ".join(["?"] * columns + ([constants] if constants else [])) + ")"
            self._sized[key] = self.sql(template.format(rows=", ".join([row] * rows)))
        return self._sized[key]

    def in_list(self, template: str, n: int) -> str:
        key = (template, n)
        if key not in self._sized:
            self._sized[key] = self.sql(template.format(ids=", ".join(["?"] * n)))
        return self._sized[key]


class _Group:
    """What one transaction has done so far: the streams it holds locked, with their totals as they
    stand (in TOTALS order, written back once at the end), and the rows of records to insert."""

    def __init__(self) -> None:
        self.streams: dict[tuple, list] = {}  # (host, run_id, source) -> [id, *totals]
        self.records: list[tuple] = []  # the rows of records to insert
        self.stacks: dict[bytes, str] = {}  # the stacks its records reference: hash -> frames
        self.full: set[tuple] = set()  # new streams refused: the collector holds max_streams already
        self.trends: dict[tuple, str | None] = {}  # each locked stream's trend text as stored
        self.figures: dict[tuple, list] = {}  # the figures its new batches bring (trend.py)


class BatchWriter:
    def __init__(self, engine: Engine, rejections: Rejections, max_streams: int = 0) -> None:
        self.engine = engine
        self._max_streams = max_streams  # 0: no bound
        self._rejections = rejections  # written with the next group, not one transaction each
        self._sql = _Sql(engine.dialect.name)
        self._driver_error = engine.dialect.loaded_dbapi.Error
        self._group = GroupCommit(self._write_group, GROUP_BATCHES, lambda job: job.batch.n_records, GROUP_RECORDS)
        self._checkpoints = _Checkpoints(engine) if engine.dialect.name == "sqlite" else None
        self._copy = engine.dialect.name == "postgresql"
        # one connection for every group, while it works: SQLite keeps its page cache valid from one
        # transaction to the next only on the connection that wrote them (a pooled one would re-read
        # the indexes' pages each time), and PostgreSQL's pool would check it with a round trip
        self._conn: Connection | None = None

    def close(self) -> None:
        with self._group.paused():
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def ingest(self, job: Ingest) -> IngestResult:
        """Store a batch once; a batch_id seen before is acknowledged as a duplicate and not stored.
        Returns once the transaction holding it has committed (shared with batches posted meanwhile)."""
        result = self._group.submit(job)
        if self._checkpoints:
            self._checkpoints.after_commit()
        return result

    def _write_group(self, jobs: list[Ingest]) -> list[IngestResult]:
        if self._checkpoints:
            self._checkpoints.before_write()
        if self._conn is None:
            self._conn = self.engine.connect().execution_options(write=True)
            if self._checkpoints:
                self._conn.exec_driver_sql(f"PRAGMA cache_size = -{WRITER_CACHE_KB}")
                self._conn.commit()
        conn = self._conn
        rejected = self._rejections.take()
        try:
            with conn.begin():
                for reason, n in sorted(rejected.items()):
                    bump(conn, "rejected:" + reason, n)
                cursor = conn.connection.cursor()
                try:
                    results = self._store(conn, cursor, jobs)
                except self._driver_error as e:  # as SQLAlchemy would have raised it: callers handle those
                    raise DBAPIError.instance(None, None, e, self._driver_error) from e
                finally:
                    cursor.close()
        except Exception:
            self._rejections.put_back(rejected)
            self._conn = None  # rolled back; a fresh connection next time, in case this one is broken
            conn.close()
            raise
        if self._checkpoints:
            self._checkpoints.written(sum(r.stored_records + 1 for r in results))
        return results

    def _store(self, conn: Connection, cursor: Any, jobs: list[Ingest]) -> list[IngestResult]:
        now = time.time()
        group = _Group()
        new: list[bool] = []
        for run in _runs(jobs):
            if run[0].batch.legacy:
                run[0].batch.run_id = legacy_runs.assign(conn, run[0].batch, run[0].legacy_slack_s)
            new += self._insert_batches(cursor, run, group, now)
        # a batch refused (its stream is another token's) has no row: it is answered by its owner alone
        owners = {id(job): group.streams[_key(job.batch)][-1] for job, is_new in zip(jobs, new, strict=True)
                  if is_new is None and _key(job.batch) not in group.full}
        sql = self._sql
        self._insert_stacks(cursor, group.stacks)
        self._insert_records(cursor, group.records)
        rows = [(stream[0], *key, *stream[1:]) for key, stream in group.streams.items() if stream[1]]
        if rows:
            cursor.execute(sql.values(sql.update_streams, len(rows), 4 + len(TOTALS)), list(chain.from_iterable(rows)))
        if group.figures:
            cursor.executemany(sql.set_trends, [(trend.merge(group.trends.get(key), figures, key[2]), group.streams[key][0])
                                                for key, figures in group.figures.items()])
        # a stream made by the lock that got no batch (its only batch was a duplicate) is not kept
        empty = [stream[0] for stream in group.streams.values() if not stream[1]]
        if empty:
            cursor.execute(sql.in_list(sql.drop_streams, len(empty)), empty)
        duplicates = sorted({job.batch.batch_id for job, is_new in zip(jobs, new, strict=True) if is_new is False})
        first = {}
        if duplicates:
            bump(conn, "duplicates", sum(is_new is False for is_new in new))
            first = {row[0]: tuple(row[1:]) for row in
                     cursor.execute(sql.in_list(sql.first_batches, len(duplicates)), duplicates).fetchall()}
        answers: dict[tuple, Stream] = {}
        results = []
        for job, is_new in zip(jobs, new, strict=True):
            b = job.batch
            if is_new is None:
                results.append(IngestResult(False, *_key(b), b.sequence, 0, Stream(*_key(b)), owners.get(id(job)),
                                            _key(b) in group.full))
                continue
            key, sequence = ((b.host, b.run_id, b.source), b.sequence) if is_new else (first[b.batch_id][:3],
                                                                                       first[b.batch_id][3])
            if key not in answers:
                answers[key] = self._answer(cursor, key, group)
            results.append(IngestResult(not is_new, *key, sequence, b.n_records if is_new else 0, answers[key]))
        return results

    def _insert_batches(self, cursor: Any, jobs: list[Ingest], group: _Group, now: float) -> list[bool | None]:
        """Insert the batches' rows; for each, whether it is new (else a duplicate, stored before), or None
        when refused: its stream belongs to another token. A new batch is counted in its stream and its
        records queued for insertion."""
        sql = self._sql
        # the streams first, locked (and made, owned by nobody yet, if new): their owners decide
        keys = sorted({_key(job.batch) for job in jobs} - group.streams.keys())  # one lock order everywhere
        if keys:
            locked = cursor.execute(sql.values(sql.lock_streams, len(keys), 3, sql.no_batches),
                                    list(chain.from_iterable(keys))).fetchall()
            for stream_id, host, run_id, source, *totals, trend_text in locked:
                group.streams[(host, run_id, source)] = [stream_id, *totals]
                group.trends[(host, run_id, source)] = trend_text
        self._bound_streams(cursor, [key for key in keys if not group.streams[key][1]], group)
        allowed = [_key(job.batch) not in group.full and self._may_post(group.streams[_key(job.batch)], job.token_name)
                   for job in jobs]
        taken = [job for job, ok in zip(jobs, allowed, strict=True) if ok]
        inserted = {}
        if taken:
            params = list(chain.from_iterable(_batch_row(job, now) for job in taken))
            inserted = {batch_id: row_id for row_id, batch_id in
                        cursor.execute(sql.values(sql.insert_batches, len(taken), BATCH_COLUMNS), params).fetchall()}
        # the same batch_id twice in one group: its first copy is the one stored
        row_ids = [inserted.pop(job.batch.batch_id, None) if ok else None for job, ok in zip(jobs, allowed, strict=True)]
        for job, row_id in zip(jobs, row_ids, strict=True):
            if row_id is not None:
                self._count_in(cursor, group, row_id, job, now)
        return [(row_id is not None) if ok else None for row_id, ok in zip(row_ids, allowed, strict=True)]

    def _bound_streams(self, cursor: Any, made: list[tuple], group: _Group) -> None:
        """The streams just made beyond max_streams are refused (and, getting no batch, dropped again):
        20,000 streams made an 8 MB dashboard and a 13 MB /metrics."""
        if not made or not self._max_streams:
            return
        over = cursor.execute(self._sql.count_streams).fetchone()[0] - self._max_streams
        if over > 0:
            group.full.update(made[-over:])

    @staticmethod
    def _may_post(stream: list, token_name: str | None) -> bool:
        """A stream belongs to the token that posted to it first; it is claimed here (the owner column
        is written back with the totals). Without tokens, streams have no owner."""
        owner = stream[-1]
        if owner is None:
            stream[-1] = token_name
            return True
        return owner == token_name

    def _count_in(self, cursor: Any, group: _Group, row_id: int, job: Ingest, now: float) -> None:
        """Add a new batch to its stream's totals and gaps, and queue its records."""
        batch = job.batch
        stream = group.streams[_key(batch)]
        stream_id, n, recs, received, highest, lowest, dropped, first_seen, last_seen, legacy, token = stream
        new_sequence = self._fill(cursor, stream_id, batch.sequence, highest)
        stream[1:] = (n + 1, recs + batch.n_records, received + new_sequence, max(highest, batch.sequence),
                      min(lowest, batch.sequence) if n else batch.sequence, min(dropped + batch.dropped, MAX_TOTAL),
                      min(first_seen, now) if n else now, max(last_seen, now) if n else now,
                      bool(legacy) or batch.legacy, token)  # its owner, claimed in _may_post
        group.records += zip(repeat(row_id), repeat(stream_id), repeat(batch.sequence), count(), batch.ts, batch.kinds,
                             batch.metrics, batch.data, batch.stack_keys or repeat(None))
        group.stacks.update(batch.stack_frames)
        if batch.figures:
            group.figures.setdefault(_key(batch), []).extend(batch.figures)

    def _insert_stacks(self, cursor: Any, frames: dict[bytes, str]) -> None:
        """The group's stacks not stored yet; in hash order, so that two PostgreSQL transactions
        inserting the same new stacks wait for each other instead of deadlocking."""
        sql = self._sql
        rows = sorted(frames.items())
        for start in range(0, len(rows), STACKS_PER_INSERT):
            chunk = rows[start:start + STACKS_PER_INSERT]
            cursor.execute(sql.values(sql.insert_stacks, len(chunk), 2), list(chain.from_iterable(chunk)))

    def _insert_records(self, cursor: Any, rows: list[tuple]) -> None:
        sql = self._sql
        if self._copy:  # PostgreSQL: a tenth of an INSERT's time on the client, where the GIL is
            with cursor.copy(sql.copy_records) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        for start in range(0, len(rows), RECORDS_PER_INSERT):
            chunk = rows[start:start + RECORDS_PER_INSERT]
            cursor.execute(sql.values(sql.insert_records, len(chunk), len(RECORD_COLUMNS)),
                           list(chain.from_iterable(chunk)))

    def _answer(self, cursor: Any, key: tuple, group: _Group) -> Stream:
        """The stream as this group leaves it: its totals, and its first gaps when it has any."""
        # a duplicate's stream may be one that no batch of this group touched
        stream_id, *totals = group.streams.get(key) or cursor.execute(self._sql.read_stream, key).fetchone()
        received, highest = totals[2], totals[3]
        gap_rows = cursor.execute(self._sql.first_gaps, (stream_id,)).fetchall() if highest + 1 > received else ()
        return Stream.from_row(*key, totals, gap_rows)

    def _fill(self, cursor: Any, stream_id: int, seq: int, highest: int) -> bool:
        """Account for sequence seq in the stream's gaps; False if the stream had it already (another
        batch_id with the same sequence: stored, but nothing new received)."""
        sql = self._sql
        if seq > highest:
            if seq > highest + 1:
                cursor.execute(sql.add_gap, (stream_id, highest + 1, seq - 1))
            return True
        gap = cursor.execute(sql.gap_below, (stream_id, seq)).fetchone()
        if gap is None or gap[1] < seq:
            return False
        lo, hi = gap
        if lo == hi:
            cursor.execute(sql.drop_gap, (stream_id, lo))
        elif seq == lo:
            cursor.execute(sql.set_gap_lo, (seq + 1, stream_id, lo))
        else:
            cursor.execute(sql.set_gap_hi, (seq - 1, stream_id, lo))
            if seq < hi:
                cursor.execute(sql.add_gap, (stream_id, seq + 1, hi))
        return True


def _key(batch: Batch) -> tuple[str, str, str]:
    return batch.host, batch.run_id, batch.source


def _batch_row(job: Ingest, now: float) -> tuple:
    b = job.batch
    return (b.batch_id, *_key(b), b.sequence, b.timestamp, now, b.n_records, b.dropped, b.schema, job.token_name,
            (job.remote_addr or "")[:64] or None)


def _runs(jobs: list[Ingest]) -> Iterator[list[Ingest]]:
    """The group as runs stored together: consecutive batches of our transport, or one batch of the
    original client (its run is inferred from the batches stored before it, see legacy_runs)."""
    run: list[Ingest] = []
    for job in jobs:
        if job.batch.legacy:
            if run:
                yield run
                run = []
            yield [job]
        else:
            run.append(job)
    if run:
        yield run


class _Checkpoints:
    """SQLite only. Left to itself, SQLite checkpoints (copies the WAL back into the database file) inside
    the commit that fills the WAL past 1000 pages, so every request queued behind that commit waits.
    Here connections never checkpoint on their own (store.make_engine sets wal_autocheckpoint=0): a
    request whose batch is committed does it, outside the writer's turn, once enough was written. A
    PASSIVE checkpoint never waits for anyone; if the WAL still grows past WAL_PAGES_MAX (writers never
    paused long enough for it to start over), the next writer truncates it first."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._written = 0  # records and batches since the last checkpoint, roughly (no lock for reading it)
        self._truncate = False

    def written(self, rows: int) -> None:
        self._written += rows

    def after_commit(self) -> None:
        if self._written < CHECKPOINT_RECORDS or not self._lock.acquire(blocking=False):
            return
        try:
            self._written = 0
            _busy, wal_pages, _copied = self._run("PASSIVE")
            self._truncate = wal_pages > WAL_PAGES_MAX
        finally:
            self._lock.release()

    def before_write(self) -> None:
        """Called in the writer's turn, outside a transaction."""
        if self._truncate:
            self._truncate = False
            self._run("TRUNCATE")

    def _run(self, mode: str) -> tuple[int, int, int]:
        """(busy, pages in the WAL, pages copied). A failure is only a checkpoint not done: the batches
        are committed already, and the next checkpoint copies what this one did not."""
        try:
            raw = self._engine.raw_connection()
            try:
                cursor = raw.cursor()
                # TRUNCATE waits for readers (a long export): not for long, while the writers wait too
                cursor.execute(f"PRAGMA busy_timeout = {TRUNCATE_WAIT_MS if mode == 'TRUNCATE' else BUSY_TIMEOUT_MS}")
                row = cursor.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
                cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                cursor.close()
                return tuple(row)
            finally:
                raw.close()
        except Exception:  # noqa: BLE001 - see above
            return 0, 0, 0
