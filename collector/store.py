"""Storage through SQLAlchemy Core: an SQLite file (WAL, busy timeout, writers serialised with BEGIN
IMMEDIATE) or PostgreSQL. Idempotency rests on the unique batch_id and INSERT ... ON CONFLICT DO
NOTHING, so it holds across threads and server processes; everything a reader sees (streams, gaps,
counts) is computed from the database, never from one process's memory."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, create_engine, distinct, event, func, select, text
from sqlalchemy.dialects import postgresql, sqlite

from collector import legacy_runs
from collector.payload import Batch
from collector.schema import batches, counters, metadata, records

MISSING_LISTED = 1000  # sequences listed per stream; the count is always exact
SCHEMA_LOCK = 7_461_801  # PostgreSQL advisory lock id while creating tables


@dataclass
class Stream:
    host: str
    run_id: str
    source: str
    batches: int = 0
    records: int = 0
    received: int = 0  # distinct sequences
    highest: int = -1
    lowest: int = 0
    dropped: int = 0
    first_seen: float = 0.0
    last_seen: float = 0.0
    legacy: bool = False
    token_name: str | None = None
    gaps: list[tuple[int, int]] = field(default_factory=list)  # inclusive ranges, ascending

    @property
    def missing_count(self) -> int:
        return self.highest + 1 - self.received

    def missing(self, limit: int = MISSING_LISTED) -> list[int]:
        out: list[int] = []
        for lo, hi in self.gaps:
            take = min(hi - lo + 1, limit - len(out))
            out.extend(range(lo, lo + take))
            if len(out) >= limit:
                break
        return out

    def as_dict(self) -> dict:
        missing = self.missing()
        return {"host": self.host, "run_id": self.run_id, "source": self.source, "batches": self.batches,
                "records": self.records, "highest": self.highest, "received": self.received,
                "missing_count": self.missing_count, "missing": missing,
                "missing_truncated": len(missing) < self.missing_count,
                "missing_ranges": [list(g) for g in self.gaps[:MISSING_LISTED]], "dropped": self.dropped,
                "first_seen": self.first_seen, "last_seen": self.last_seen, "legacy": self.legacy,
                "token_name": self.token_name}


@dataclass
class IngestResult:
    duplicate: bool
    host: str
    run_id: str
    source: str
    sequence: int
    stored_records: int


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:" and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record) -> None:
            dbapi_conn.isolation_level = None  # let the "begin" hook below open transactions
            for pragma in ("journal_mode=WAL", "busy_timeout=60000", "synchronous=NORMAL", "foreign_keys=ON"):
                dbapi_conn.execute(f"PRAGMA {pragma}")

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            # a writer takes the lock up front: a deferred transaction that reads, then writes, fails
            # at once (SQLITE_BUSY_SNAPSHOT) when another process wrote in between
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

        return engine
    if url.startswith("postgresql"):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    raise ValueError(f"unsupported database URL {url.split(':', 1)[0]!r}: use sqlite:///FILE or postgresql://...")


class Store:
    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        self._create_schema()

    def _create_schema(self) -> None:
        with self._write() as conn:
            if self.dialect == "postgresql":
                # several processes starting at once would race on CREATE TABLE
                conn.execute(select(func.pg_advisory_xact_lock(SCHEMA_LOCK)))
            metadata.create_all(conn)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn.execution_options(write=True)
            with conn.begin():
                yield conn

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    # --- writing ---------------------------------------------------------------------------------------
    def ingest(self, batch: Batch, token_name: str | None, remote_addr: str | None,
               legacy_slack_s: float = 2.0) -> IngestResult:
        """Store a batch once; a batch_id seen before is acknowledged as a duplicate and not stored."""
        with self._write() as conn:
            if batch.legacy:
                batch.run_id = legacy_runs.assign(conn, batch, legacy_slack_s)
            row = conn.execute(
                self._insert(batches).values(
                    batch_id=batch.batch_id, host=batch.host, run_id=batch.run_id, source=batch.source,
                    sequence=batch.sequence, client_ts=batch.timestamp, received_at=time.time(),
                    n_records=len(batch.records), dropped=batch.dropped, schema=batch.schema,
                    token_name=token_name, remote_addr=(remote_addr or "")[:64] or None,
                ).on_conflict_do_nothing(index_elements=["batch_id"]).returning(batches.c.id)
            ).first()
            if row is None:
                self._bump(conn, "duplicates")
                first = conn.execute(select(batches.c.host, batches.c.run_id, batches.c.source, batches.c.sequence)
                                     .where(batches.c.batch_id == batch.batch_id)).one()
                return IngestResult(True, first.host, first.run_id, first.source, first.sequence, 0)
            if batch.records:
                conn.execute(records.insert(), [
                    {"batch": row.id, "host": batch.host, "run_id": batch.run_id, "source": batch.source,
                     "sequence": batch.sequence, "idx": i, "ts": r.ts, "kind": r.kind, "metric": r.metric,
                     "data": r.json}
                    for i, r in enumerate(batch.records)])
        return IngestResult(False, batch.host, batch.run_id, batch.source, batch.sequence, len(batch.records))

    def _bump(self, conn: Connection, name: str) -> None:
        stmt = self._insert(counters).values(name=name, value=1)
        conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_={"value": counters.c.value + 1}))

    def count(self, name: str) -> None:
        with self._write() as conn:
            self._bump(conn, name)

    # --- reading ---------------------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {name: value for name, value in conn.execute(select(counters.c.name, counters.c.value))}

    def totals(self) -> tuple[int, int]:
        """(batches, records) stored."""
        with self.engine.connect() as conn:
            n, recs = conn.execute(select(func.count(), func.coalesce(func.sum(batches.c.n_records), 0))).one()
        return int(n), int(recs)

    def streams(self, host: str | None = None, run_id: str | None = None, source: str | None = None) -> list[Stream]:
        """Every (host, run_id, source) stream with its counts and gaps, most recently seen first."""
        b = batches.c
        where = [c == v for c, v in ((b.host, host), (b.run_id, run_id), (b.source, source)) if v is not None]
        key = (b.host, b.run_id, b.source)
        agg = (select(*key, func.count().label("batches"), func.sum(b.n_records).label("records"),
                      func.count(distinct(b.sequence)).label("received"), func.max(b.sequence).label("highest"),
                      func.min(b.sequence).label("lowest"), func.sum(b.dropped).label("dropped"),
                      func.min(b.received_at).label("first_seen"), func.max(b.received_at).label("last_seen"),
                      func.min(b.schema).label("schema"), func.max(b.token_name).label("token_name"))
               .where(*where).group_by(*key).order_by(func.max(b.received_at).desc()))
        seqs = select(*key, b.sequence).where(*where).distinct().subquery()
        nxt = func.lead(seqs.c.sequence).over(partition_by=(seqs.c.host, seqs.c.run_id, seqs.c.source),
                                              order_by=seqs.c.sequence)
        pairs = select(seqs.c.host, seqs.c.run_id, seqs.c.source, seqs.c.sequence.label("seq"),
                       nxt.label("nxt")).subquery()
        gaps_q = (select(pairs.c.host, pairs.c.run_id, pairs.c.source, pairs.c.seq, pairs.c.nxt)
                  .where(pairs.c.nxt > pairs.c.seq + 1).order_by(pairs.c.seq))
        with self.engine.connect() as conn:
            out = {}
            for r in conn.execute(agg):
                out[(r.host, r.run_id, r.source)] = Stream(
                    r.host, r.run_id, r.source, int(r.batches), int(r.records or 0), int(r.received),
                    int(r.highest), int(r.lowest), int(r.dropped or 0), float(r.first_seen), float(r.last_seen),
                    r.schema == 0, r.token_name,
                    gaps=[(0, int(r.lowest) - 1)] if r.lowest > 0 else [])
            for g in conn.execute(gaps_q):
                stream = out.get((g.host, g.run_id, g.source))
                if stream is not None:
                    stream.gaps.append((int(g.seq) + 1, int(g.nxt) - 1))
        return list(out.values())

    def stream(self, host: str, run_id: str, source: str) -> Stream | None:
        found = self.streams(host, run_id, source)
        return found[0] if found else None

    def records(self, host: str | None = None, run_id: str | None = None, source: str | None = None,
                kind: str | None = None, since: float | None = None, until: float | None = None,
                limit: int = 1000, newest: bool = False) -> list[dict]:
        """Records matching the filters, oldest first (newest=True: the latest `limit`, still oldest first)."""
        r = records.c
        where = [c == v for c, v in ((r.host, host), (r.run_id, run_id), (r.source, source), (r.kind, kind))
                 if v is not None]
        if since is not None:
            where.append(r.ts >= since)
        if until is not None:
            where.append(r.ts <= until)
        order = (r.ts.desc(), r.id.desc()) if newest else (r.ts, r.id)
        query = (select(r.id, r.host, r.run_id, r.source, r.sequence, r.ts, r.kind, r.metric, r.data,
                        batches.c.batch_id)
                 .join(batches, batches.c.id == r.batch).where(*where).order_by(*order).limit(limit))
        with self.engine.connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query)]
        return rows[::-1] if newest else rows
