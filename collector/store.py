"""Storage through SQLAlchemy Core: an SQLite file (WAL, busy timeout, writers serialised with BEGIN
IMMEDIATE) or PostgreSQL, and what readers ask of it. Writing is writer.py's: `Store.writer` takes the
batches. Each stream's totals and
gaps have their own rows, kept up to date by the writer in the batch's transaction, so readers never
scan the batches; everything a reader sees comes from the database, never from one process's memory."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    and_,
    bindparam,
    case,
    create_engine,
    event,
    func,
    null,
    or_,
    select,
    text,
    union_all,
)

from collector import json_sql, migrate, retention
from collector import stacks as stack_text
from collector.compaction import COUNTERS, Compactor
from collector.rejections import Rejections
from collector.schema import ID, batches, compactions, counters, gaps, records, stacks, streams
from collector.stack_reads import STREAMS_PER_QUERY, StackReads
from collector.stream import MISSING_LISTED, TOTALS, Stream
from collector.writer import BUSY_TIMEOUT_MS, BatchWriter
from registry.spec import divided

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.engine import Row

__all__ = ["MISSING_LISTED", "Store", "Stream", "make_engine"]

NEWEST_LIMIT = 10_000  # records of one stream's newest interval read at most
READ_CHUNK = 1000  # records read per query by iter_records ...
CHUNK_BYTES = 4 * 2**20  # ... or this much of their stored text (but at least one record)


@dataclass(frozen=True)
class RecordFilters:
    host: str | None = None
    run_id: str | None = None
    source: str | None = None
    kind: str | None = None
    since: float | None = None
    until: float | None = None
    cgroup: str | None = None  # the records' `cgroup` field: this path ...
    cgroup_tree: bool = False  # ... or (True) this path and every group below it


@dataclass(frozen=True)
class Cursor:
    """A place in the records' order (ts, id): a page holds the records after it."""
    ts: float
    id: int


@dataclass(frozen=True)
class Page:
    rows: int
    last: Cursor | None  # its last record
    more: bool  # cut by its row or byte bound: records may follow


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:" and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            dbapi_conn.isolation_level = None  # let the "begin" hook below open transactions
            # wal_autocheckpoint=0: the writer checkpoints, outside any commit (writer._Checkpoints)
            for pragma in ("journal_mode=WAL", f"busy_timeout={BUSY_TIMEOUT_MS}", "synchronous=NORMAL",
                           "foreign_keys=ON", "wal_autocheckpoint=0"):
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


class Store(StackReads):
    def __init__(self, url: str, max_streams: int = 0, policy: retention.Policy | None = None,
                 max_db_bytes: int | None = None) -> None:
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        migrate.upgrade_engine(self.engine)  # or SchemaError, before anything is served
        self._rejections = Rejections()
        self.writer = BatchWriter(self.engine, self._rejections, max_streams)
        # retention: merged and deleted by passes of its own (compaction.py), started by the app
        self.compactor = Compactor(self.engine, policy or retention.Policy(), max_db_bytes)

    def close(self) -> None:
        self.compactor.stop()
        self.writer.close()
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def reject(self, reason: str) -> None:
        """Count a rejected request: in memory, written with the next batch (see rejections.py)."""
        self._rejections.add(reason)

    # --- reading ---------------------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """The named counters: the database's, plus this process's rejections not written yet."""
        with self.engine.connect() as conn:
            found = {name: value for name, value in conn.execute(select(counters.c.name, counters.c.value))}
        for reason, n in self._rejections.pending().items():
            found["rejected:" + reason] = found.get("rejected:" + reason, 0) + n
        return found

    def retention(self, found: dict[str, int] | None = None) -> dict:
        """What compaction has done (the counters, every process's: `found` if read already) and its newest
        pass, for the overview."""
        found = self.counters() if found is None else found
        c = compactions.c
        with self.engine.connect() as conn:
            newest = conn.execute(select(c.finished_at, c.db_bytes).order_by(c.id.desc()).limit(1)).first()
        done = {name: found.get(counter, 0) for name, counter in COUNTERS.items()}
        compactor = self.compactor
        return {**done, "policy": compactor.policy.text(), "max_db_bytes": compactor.max_db_bytes,
                "last_pass": newest.finished_at if newest else None, "db_bytes": newest.db_bytes if newest else None}

    def totals(self) -> tuple[int, int]:
        """(batches, records) stored."""
        s = streams.c
        with self.engine.connect() as conn:
            n, recs = conn.execute(select(func.coalesce(func.sum(s.batches), 0),
                                          func.coalesce(func.sum(s.records), 0))).one()
        return int(n), int(recs)

    def streams(self, host: str | None = None, run_id: str | None = None, source: str | None = None) -> list[Stream]:
        """Every (host, run_id, source) stream with its counts and gaps, most recently seen first."""
        s = streams.c
        where = [c == v for c, v in ((s.host, host), (s.run_id, run_id), (s.source, source)) if v is not None]
        # a stream's first MISSING_LISTED gaps are all that its listing can show
        rank = func.row_number().over(partition_by=gaps.c.stream, order_by=gaps.c.lo)
        ranked = (select(gaps.c.stream, gaps.c.lo, gaps.c.hi, rank.label("n"))
                  .where(gaps.c.stream.in_(select(s.id).where(*where))).subquery())
        gaps_q = (select(ranked.c.stream, ranked.c.lo, ranked.c.hi).where(ranked.c.n <= MISSING_LISTED)
                  .order_by(ranked.c.stream, ranked.c.lo))
        with self.engine.connect() as conn:
            rows = conn.execute(select(s.id, s.host, s.run_id, s.source, *(s[c] for c in TOTALS))
                                .where(*where).order_by(s.last_seen.desc())).all()
            gap_rows: dict[int, list] = {}
            if any(r.highest + 1 > r.received for r in rows):
                for g in conn.execute(gaps_q):
                    gap_rows.setdefault(g.stream, []).append((g.lo, g.hi))
        return [Stream.from_row(r.host, r.run_id, r.source, r[4:], gap_rows.get(r.id, ())) for r in rows]

    def stream(self, host: str, run_id: str, source: str) -> Stream | None:
        found = self.streams(host, run_id, source)
        return found[0] if found else None

    def records(self, host: str | None = None, run_id: str | None = None, source: str | None = None,
                kind: str | None = None, since: float | None = None, until: float | None = None,
                limit: int = 1000, newest: bool = False, max_text: int | None = None,
                cgroup: str | None = None, cgroup_tree: bool = False) -> list[dict]:
        """Records matching the filters, oldest first (newest=True: the latest `limit`, still oldest first).
        max_text: a record with more stored text comes with data None (a page showing a few hundred
        records must not parse megabytes of each)."""
        r = records.c
        order = (r.ts.desc(), r.id.desc()) if newest else (r.ts, r.id)
        with self.engine.connect() as conn:
            where = self._record_filters(conn, RecordFilters(host, run_id, source, kind, since, until,
                                                             cgroup, cgroup_tree))
            if where is None:
                return []
            query = _records_query(where, max_text).order_by(*order).limit(limit)
            rows = [_record_row(row) for row in conn.execute(query)]
        return rows[::-1] if newest else rows

    def trends(self) -> dict[tuple[str, str, str], str]:
        """Every stream's trend text (trend.py) by (host, run_id, source); streams without one left out."""
        s = streams.c
        with self.engine.connect() as conn:
            return {(r.host, r.run_id, r.source): r.trend for r in
                    conn.execute(select(s.host, s.run_id, s.source, s.trend).where(s.trend.is_not(None)))}

    def field_values(self, source: str, keys: list[tuple[str, str]], kind: str, field: str, name: str | None = None,
                     since: float | None = None, until: float | None = None, limit: int = 40,
                     per: tuple[str, ...] = (), scale: float = 1.0) -> dict[tuple[str, str], list[tuple[float, float]]]:
        """Per (host, run_id) stream of `source`, the numeric `field` of its newest `limit` records of `kind`
        (of the hist records called `name`) in [since, until], oldest first; times scale, divided by each
        `per` field of the same record (a key figure: registry/spec.py Figure), a record lacking one or
        marked `partial` (an interval cut short) left out. One query for all the streams: a UNION ALL of one walk down each stream's (stream, kind, ts)
        index, the numbers read out of the JSON by the database (the overview's trend lines once took a
        query and a JSON parse per record)."""
        s = streams.c
        wanted = set(keys)
        found: dict[tuple[str, str], list[tuple[float, float]]] = {}
        with self.engine.connect() as conn:
            ids = {row.id: (row.host, row.run_id) for row in
                   conn.execute(select(s.id, s.host, s.run_id).where(s.source == source))
                   if (row.host, row.run_id) in wanted}
            stream_ids = sorted(ids)
            for start in range(0, len(stream_ids), STREAMS_PER_QUERY):
                chunk = stream_ids[start:start + STREAMS_PER_QUERY]
                query = _walks(self.dialect, len(chunk), kind, (field, *per), name, since is not None, until is not None)
                params = {f"s{i}": stream_id for i, stream_id in enumerate(chunk)}
                params.update(since=since, until=until, limit=limit)
                for stream_id, ts, *read in conn.execute(query, params):
                    numbers = [_float(v) for v in read]
                    number = divided(numbers, scale) if None not in numbers else None
                    if number is not None:
                        found.setdefault(ids[stream_id], []).append((float(ts), number))
        return {key: pts[::-1] for key, pts in found.items()}

    def stream_ids(self) -> list[tuple[int, str, str, str, int]]:
        """(id, host, run_id, source, records stored) of every stream, most recently seen first."""
        s = streams.c
        with self.engine.connect() as conn:
            return [tuple(row) for row in conn.execute(select(s.id, s.host, s.run_id, s.source, s.records)
                                                       .order_by(s.last_seen.desc()))]

    def newest_records(self, stream_ids: list[int], kind: str, window: float,
                       max_text: int | None = None) -> dict[int, list[tuple[float, str | None]]]:
        """Per stream, (ts, JSON text) of its records of this kind within `window` seconds of its newest
        one, newest first (at most NEWEST_LIMIT): each stream's newest interval, for many streams in one
        query (/metrics once took two queries per stream)."""
        found: dict[int, list[tuple[float, str | None]]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(stream_ids), STREAMS_PER_QUERY):
                chunk = stream_ids[start:start + STREAMS_PER_QUERY]
                params = {f"s{i}": stream_id for i, stream_id in enumerate(chunk)}
                params.update(kind=kind, window=window, limit=NEWEST_LIMIT, max_text=max_text or 2**31)
                for stream_id, ts, data in conn.execute(_newest_walks(len(chunk)), params):
                    found.setdefault(int(stream_id), []).append((float(ts), data))
        return found

    def records_after_ids(self, after: dict[int, int], kind: str, limit: int,
                          field: str | None = None) -> dict[int, list[tuple[int, float, str]]]:
        """Per stream (its id: the record id read up to), (id, ts, JSON text) of up to `limit` of its newer
        records of this kind, in id order: what arrived since a reader last looked (an outbox's late
        batch included, whatever its ts), for many streams in one query per 200. field: the record's
        top-level field as JSON text instead of the whole record (read by the database, never parsed here)."""
        found: dict[int, list[tuple[int, float, str]]] = {}
        ids = sorted(after)
        with self.engine.connect() as conn:
            for start in range(0, len(ids), STREAMS_PER_QUERY):
                chunk = ids[start:start + STREAMS_PER_QUERY]
                params: dict = {f"s{i}": stream_id for i, stream_id in enumerate(chunk)}
                params.update({f"a{i}": after[stream_id] for i, stream_id in enumerate(chunk)})
                params.update(kind=kind, limit=limit)
                for stream_id, row_id, ts, data in conn.execute(_after_walks(self.dialect, len(chunk), field), params):
                    found.setdefault(int(stream_id), []).append((int(row_id), float(ts), data))
        return found

    def _stream_id(self, conn: Connection, host: str, run_id: str, source: str) -> int | None:
        s = streams.c
        return conn.execute(select(s.id).where(s.host == host, s.run_id == run_id, s.source == source)).scalar()

    def newest_stack_ts(self, host: str, run_id: str, source: str, until: float | None = None) -> float | None:
        """The time of the stream's newest stack record (at or before until)."""
        r = records.c
        with self.engine.connect() as conn:
            stream_id = self._stream_id(conn, host, run_id, source)
            if stream_id is None:
                return None
            where = [r.stream == stream_id, r.stack.is_not(None)] + ([r.ts <= until] if until is not None else [])
            return conn.execute(select(func.max(r.ts)).where(*where)).scalar()

    def selection_streams(self, source: str, hosts: tuple[str, ...] = (), run_ids: tuple[str, ...] = (),
                          limit: int | None = None) -> list[int]:
        """The ids of the streams of `source` from any of `hosts` and any of `run_ids` (none given: every
        one), at most `limit` + 1 of them (the caller says when a selection is too wide)."""
        s = streams.c
        where = [s.source == source]
        if hosts:
            where.append(s.host.in_(hosts))
        if run_ids:
            where.append(s.run_id.in_(run_ids))
        query = select(s.id).where(*where).order_by(s.id)
        with self.engine.connect() as conn:
            return [int(i) for i in conn.execute(query if limit is None else query.limit(limit + 1)).scalars()]

    def newest_summaries(self, stream_ids: list[int], until: float | None = None,
                         max_text: int = 65536) -> dict[int, str | None]:
        """Per stream, the JSON text of its newest summary record (at or before until; None when over
        max_text), for every stream in one query."""
        r = records.c
        where = [r.stream.in_(stream_ids), r.kind == "summary"] + ([r.ts <= until] if until is not None else [])
        newest = select(r.stream.label("stream"), func.max(r.ts).label("ts")).where(*where).group_by(r.stream).subquery()
        data = case((func.length(r.data) > max_text, null()), else_=r.data)
        query = (select(r.stream, data).select_from(records.join(newest, and_(r.stream == newest.c.stream,
                                                                               r.ts == newest.c.ts)))
                 .where(r.kind == "summary").order_by(r.id))
        with self.engine.connect() as conn:
            return {int(stream_id): text for stream_id, text in conn.execute(query)}

    def record_page(self, filters: RecordFilters, after: Cursor | None, rows: int, max_bytes: int) -> Page:
        """Where the page of records after `after` ends: at most `rows` of them, and no more of their stored
        text than max_bytes (but at least one record). Known before any row is read, so an answer's
        headers can name the next page."""
        r = records.c
        with self.engine.connect() as conn:
            where = self._record_filters(conn, filters, after)
            if where is None:
                return Page(0, None, False)
            window = (select(r.ts, r.id, func.length(r.data).label("size")).where(*where)
                      .order_by(r.ts, r.id).limit(rows).subquery())
            running = func.sum(window.c.size).over(order_by=(window.c.ts, window.c.id))
            sized = select(window.c.ts, window.c.id, running.label("upto"), func.count().over().label("total"),
                           func.row_number().over(order_by=(window.c.ts, window.c.id)).label("n")).subquery()
            last = conn.execute(select(sized.c.ts, sized.c.id, sized.c.n, sized.c.total)
                                .where((sized.c.upto <= max_bytes) | (sized.c.n == 1))
                                .order_by(sized.c.n.desc()).limit(1)).first()
        if last is None:
            return Page(0, None, False)
        return Page(int(last.n), Cursor(float(last.ts), int(last.id)), last.total > last.n or last.n == rows)

    def iter_records(self, filters: RecordFilters, after: Cursor | None, last: Cursor) -> Iterator[dict]:
        """The records after `after` up to `last` (a Page's), oldest first, read READ_CHUNK rows at a time
        (each chunk its own short query: no read transaction held open while a slow client reads)."""
        r = records.c
        while True:
            with self.engine.connect() as conn:
                where = self._record_filters(conn, filters, after)
                if where is None:
                    return
                where.append(_up_to(last))
                # the next rows' sizes first: a chunk holds READ_CHUNK rows or CHUNK_BYTES of text, at least a row
                sizes = conn.execute(select(r.ts, r.id, func.length(r.data)).where(*where)
                                     .order_by(r.ts, r.id).limit(READ_CHUNK)).all()
                if not sizes:
                    return
                n = total = 0
                for _ts, _id, size in sizes:
                    if n and total + size > CHUNK_BYTES:
                        break
                    n, total = n + 1, total + size
                end = Cursor(float(sizes[n - 1][0]), int(sizes[n - 1][1]))
                query = (_records_query([*where, _up_to(end)])
                         .order_by(r.ts, r.id))
                chunk = [_record_row(row) for row in conn.execute(query)]
            yield from chunk
            if n == len(sizes) < READ_CHUNK:
                return
            after = end

    def _record_filters(self, conn: Connection, f: RecordFilters, after: Cursor | None = None) -> list | None:
        """The WHERE clauses on records for these filters; None when no stream matches them."""
        r, s = records.c, streams.c
        where = [r.kind == f.kind] if f.kind is not None else []
        if f.since is not None:
            where.append(r.ts >= f.since)
        if f.until is not None:
            where.append(r.ts <= f.until)
        if after is not None:
            where.append(_after(after))
        if f.cgroup is not None:
            where.append(json_sql.of_cgroup(self.dialect, records.c.data, f.cgroup, f.cgroup_tree))
        of_stream = [c == v for c, v in ((s.host, f.host), (s.run_id, f.run_id), (s.source, f.source)) if v is not None]
        if of_stream:
            # the streams' ids first: for one stream the (stream, ts) index then gives the rows in order
            ids = conn.execute(select(s.id).where(*of_stream)).scalars().all()
            if not ids:
                return None
            where.append(r.stream == ids[0] if len(ids) == 1 else r.stream.in_(ids))
        return where



@functools.lru_cache(maxsize=16)
def _newest_walks(n: int) -> Select:
    """newest_records' query for n streams (bound as s0..s{n-1}, kind, window, limit, max_text): a walk
    down each stream's (stream, kind, ts) index from its newest record back `window` seconds."""
    r = records.c
    data = case((func.length(r.data) > bindparam("max_text"), null()), else_=r.data).label("data")
    walks = []
    for i in range(n):
        stream_id = bindparam(f"s{i}", type_=ID)
        newest = select(func.max(r.ts)).where(r.stream == stream_id, r.kind == bindparam("kind")).scalar_subquery()
        walks.append(select(stream_id.label("stream"), r.ts, data)
                     .where(r.stream == stream_id, r.kind == bindparam("kind"), r.ts >= newest - bindparam("window"))
                     .order_by(r.ts.desc(), r.id.desc()).limit(bindparam("limit")).subquery())
    return union_all(*(select(w) for w in walks))


@functools.lru_cache(maxsize=16)
def _after_walks(dialect: str, n: int, field: str | None) -> Select:
    """records_after_ids' query for n streams (bound as s0.., a0.., kind, limit)."""
    r = records.c
    data = r.data if field is None else json_sql.field_json(dialect, r.data, field).label("data")
    walks = []
    for i in range(n):
        stream_id = bindparam(f"s{i}", type_=ID)
        walks.append(select(stream_id.label("stream"), r.id, r.ts, data)
                     .where(r.stream == stream_id, r.kind == bindparam("kind"), r.id > bindparam(f"a{i}", type_=ID))
                     .order_by(r.id).limit(bindparam("limit")).subquery())
    return union_all(*(select(w) for w in walks))


@functools.lru_cache(maxsize=128)
def _walks(dialect: str, n: int, kind: str, fields: tuple[str, ...], name: str | None, since: bool, until: bool) -> Select:
    """field_values' query for n streams (bound as s0..s{n-1}, since, until, limit), built once per shape:
    building 50 subqueries took longer than running them."""
    r = records.c
    partial = json_sql.field_json(dialect, r.data, "partial")
    # an interval cut short (a stop's) is no rate: left out before the limit, as chart.Plot.wants leaves it
    where = [r.kind == kind, or_(partial.is_(None), partial != "true")]
    if name is not None:
        where.append(json_sql.field_text(dialect, r.data, "name") == name)
    if since:
        where.append(r.ts >= bindparam("since"))
    if until:
        where.append(r.ts <= bindparam("until"))
    values = [json_sql.field_json(dialect, r.data, field).label(f"v{i}") for i, field in enumerate(fields)]
    walks = []
    for i in range(n):
        stream_id = bindparam(f"s{i}", type_=ID)
        walks.append(select(stream_id.label("stream"), r.ts, *values).where(r.stream == stream_id, *where)
                     .order_by(r.ts.desc(), r.id.desc()).limit(bindparam("limit")).subquery())
    return union_all(*(select(w) for w in walks))


def _float(value: object) -> float | None:
    """A number the database read out of a record (PostgreSQL gives its text), if finite."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _after(cursor: Cursor) -> ColumnElement:
    """Records after the cursor in (ts, id) order, written so that the ts indexes give the range (a row
    value comparison made SQLite scan every record for each chunk)."""
    r = records.c
    return and_(r.ts >= cursor.ts, or_(r.ts > cursor.ts, r.id > cursor.id))


def _up_to(cursor: Cursor) -> ColumnElement:
    r = records.c
    return and_(r.ts <= cursor.ts, or_(r.ts < cursor.ts, r.id <= cursor.id))


def _records_query(where: list, max_text: int | None = None) -> Select:
    r, s = records.c, streams.c
    data = r.data if max_text is None else case((func.length(r.data) > max_text, null()), else_=r.data).label("data")
    return (select(r.id, s.host, s.run_id, s.source, r.sequence, r.ts, r.kind, r.metric, data, batches.c.batch_id,
                   stacks.c.frames)
            .select_from(records.join(streams, s.id == r.stream).join(batches, batches.c.id == r.batch)
                         .outerjoin(stacks, stacks.c.hash == r.stack))
            .where(*where))


def _record_row(row: Row) -> dict:
    """A row of _records_query as a dict, the record's stack frames put back into its data."""
    item = dict(row._mapping)
    frames = item.pop("frames")
    if item["data"] is not None:
        item["data"] = stack_text.join(item["data"], frames)
    return item
