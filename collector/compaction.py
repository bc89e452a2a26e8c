"""Retention in the database: a pass, run by a background thread of the collector every few minutes,
deletes the records past the policy's last age, merges the older stack records of each stream into
the tiers' buckets (retention.py), and, under a size bound, deletes the oldest records until the
database is below it. Ingest goes on meanwhile: the pass works in short transactions of a few
thousand rows. Passes of several collector processes on one database can run at once: each stream's
merging holds a lock on the stream for its transaction (PostgreSQL: an advisory lock; SQLite: the one
writer's lock) and reads the rows it merges after taking it, so no row is merged twice; on PostgreSQL
it locks those rows too, and expiry and eviction pass locked rows by (SKIP LOCKED), so none deletes a
record a merge is about to write a bucket's sum into. What every pass did is counted in the counters
table in the same transactions, and logged in compactions."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import orjson
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from collector import dbsize, retention
from collector.chart import registered
from collector.schema import batches, compactions, gaps, records, retention_marks, stacks, streams
from collector.stacks import ascii_json
from collector.writer import GROUP_RECORDS, bump, write_transaction

CHUNK = 2000  # stack records merged in one transaction (SQLite: ingest waits for it; 83 ms at nice 19, loaded)
DELETE_CHUNK = 2000  # records deleted in one transaction
IDS_PER_STATEMENT = 500  # ids in one IN (...) list
LATE_S = 3600  # a pass merges from this far before where the last one got to (and what was stored since)
LOCK_CLASS = 7_461_802  # PostgreSQL advisory locks (class, stream id) while a stream's rows are merged
BOUND_LOCK = 0  # ... and (class, 0) while the size bound deletes
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for a lock_timeout that ran out
HIGH_WATER = 0.9  # the size bound deletes once the database is past this share of it ...
LOW_WATER = 0.8  # ... down to this share (the freed pages take the next data, so the file stays put)
LOG_KEPT = 1000  # compactions rows kept (and the newest that evicted)
# a stack no record uses is deleted by a pass this long after one found it so: a reader that read its
# records just before they went (its frames are a second statement) still finds them
STACK_GRACE_S = 600
STACK_LOCK_WAIT_MS = 1000  # PostgreSQL: deleting stacks waits this long for ingest, which waits for it meanwhile
COUNTERS = {"merged": "retention:merged", "expired": "retention:expired", "evicted": "retention:evicted",
            "batches_deleted": "retention:batches", "stacks_deleted": "retention:stacks"}

log = logging.getLogger("collector")


class MergeRaced(RuntimeError):
    """A merge's records changed under it (not with the row locks taken): its transaction is rolled back."""


@dataclass
class PassResult:
    started_at: float = field(default_factory=time.time)
    merged: int = 0
    expired: int = 0
    evicted: int = 0
    batches: int = 0
    stacks: int = 0
    db_bytes: int | None = None


class Compactor:
    def __init__(self, engine: Engine, policy: retention.Policy, max_db_bytes: int | None = None) -> None:
        self.engine = engine
        self.policy = policy
        self.max_db_bytes = max_db_bytes
        self._postgres = engine.dialect.name == "postgresql"
        self._one_pass = threading.Lock()  # this process's passes, one at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.policy.tiers) or self.max_db_bytes is not None

    def start(self, every_s: float) -> None:
        """A pass every every_s seconds (the first after every_s), in a daemon thread, until stop()."""
        if not self.enabled or every_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, args=(every_s,), name="compaction", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                done = self.run()
            except Exception as e:  # noqa: BLE001 - a failed pass is retried by the next one; ingest goes on
                log.warning("compaction pass failed: %s", type(e).__name__, exc_info=True)
                continue
            if done.merged or done.expired or done.evicted:
                log.info("compaction: %d stack records merged, %d expired, %d deleted by the size bound",
                         done.merged, done.expired, done.evicted)

    def run(self, now: float | None = None) -> PassResult:
        """One pass (now: the time the ages count from; the clock's by default)."""
        now = time.time() if now is None else now
        with self._one_pass:
            result = PassResult()
            if self.policy.max_age_s is not None:
                self._expire(now - self.policy.max_age_s, result)
            tiers = self.policy.tiers
            # coarsest first: a record old enough for an hour's bucket goes there at once
            for i in reversed(range(len(tiers))):
                if tiers[i].bucket_s:
                    younger = tiers[i - 1].until_s if i else 0
                    self._merge_tier(tiers[i].bucket_s, retention.bucket_of(now - younger, tiers[i].bucket_s), result)
            self._collect_stacks(now, result)
            if self.max_db_bytes is not None:
                self._bound(result)
            else:
                result.db_bytes = dbsize.measure(self.engine)
            self._log(result)
            if not self._postgres:  # what the pass wrote goes back into the database file (writer.py's _Checkpoints)
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            return result

    # --- merging ---------------------------------------------------------------------------------------
    def _merge_tier(self, bucket_s: int, cut: float, result: PassResult) -> None:
        """Every stream's stack records before cut not yet in buckets of bucket_s, merged into them."""
        r, m = records.c, retention_marks.c
        with self.engine.connect() as conn:
            top = conn.execute(select(func.coalesce(func.max(r.id), 0))).scalar()
            mark = conn.execute(select(m.done_until, m.done_id).where(m.bucket_s == bucket_s)).first()
            # the records to look at: from a little before where the passes got to in time, and any stored
            # since (a late batch's, from an outbox: the ids of a batch stored meanwhile may be a group's below)
            newer = None
            if mark is not None:
                since = retention.bucket_of(min(mark.done_until, cut) - LATE_S, bucket_s)
                newer = or_(r.ts >= since, r.id > mark.done_id - GROUP_RECORDS)
            # the streams with records to merge and how many, from one walk of the window on the ts index
            window = [r.ts < cut, r.stack.is_not(None), or_(r.bucket.is_(None), r.bucket < bucket_s)]
            if newer is not None:
                window.append(newer)
            wanted = select(r.stream, func.count().label("n")).where(*window).group_by(r.stream).subquery()
            found = conn.execute(select(streams.c.id, streams.c.source, wanted.c.n)
                                 .join_from(streams, wanted, wanted.c.stream == streams.c.id)).all()
        plans = {stream_id: _stack_plan(source) for stream_id, source, _n in found}
        found = [(stream_id, n) for stream_id, _source, n in found if plans[stream_id] is not None]
        # each process in an order of its own: two passes at once spread over the streams instead of the
        # second following the first from lock to lock
        random.shuffle(found)
        merged_before = None if mark is None else mark.done_until
        for group in _packed(found):
            if not self._merge_streams(group, plans, bucket_s, newer, cut, merged_before, result):
                return  # stopped: no mark, so the next pass starts where this one did
        with write_transaction(self.engine) as conn:  # the furthest mark of any pass, atomically
            upsert = (postgresql.insert if self._postgres else sqlite.insert)(retention_marks)
            stmt = upsert.values(bucket_s=bucket_s, done_until=cut, done_id=top)
            conn.execute(stmt.on_conflict_do_update(index_elements=["bucket_s"], set_={
                "done_until": case((stmt.excluded.done_until > m.done_until, stmt.excluded.done_until),
                                   else_=m.done_until),
                "done_id": case((stmt.excluded.done_id > m.done_id, stmt.excluded.done_id), else_=m.done_id)}))

    def _merge_streams(self, ids: list[int], plans: dict[int, _Plan], bucket_s: int, newer: ColumnElement | None,
                       cut: float, merged_before: float | None, result: PassResult) -> bool:
        """Merge these streams' records before cut (and `newer`), CHUNK at most a transaction (a stream
        with more, alone, bucket after bucket); False when the collector stopping ended it before all.
        A bucket before merged_before was merged by an earlier pass (a late record's) or by this one (the
        rest of a bucket longer than CHUNK): its merged records are merged again with the new ones, so a
        bucket keeps one record per stack."""
        r = records.c
        ids = sorted(ids)  # locked in one order by every process: no deadlock
        since = None
        while not self._stop.is_set():  # a collector stopping does not wait for the rest of a pass
            with write_transaction(self.engine) as conn:
                if self._postgres:
                    for stream_id in ids:
                        conn.execute(select(func.pg_advisory_xact_lock(LOCK_CLASS, stream_id % 2**31)))
                where = [r.stream.in_(ids), r.ts < cut, r.stack.is_not(None), or_(r.bucket.is_(None), r.bucket < bucket_s)]
                where += [c for c in (newer, None if since is None else r.ts >= since) if c is not None]
                # locked (PostgreSQL): another process's expiry or eviction passes them by (SKIP LOCKED) instead
                # of deleting a group's first record, whose UPDATE would then carry the group's sum nowhere
                rows = conn.execute(select(r.id, r.stream, r.ts, r.data, r.stack, r.batch).where(*where)
                                    .order_by(r.stream, r.ts, r.id).limit(CHUNK).with_for_update()).all()
                if not rows:
                    return True
                full = len(rows) == CHUNK
                last = (rows[-1].stream, retention.bucket_of(rows[-1].ts, bucket_s))
                if full and (rows[0].stream, retention.bucket_of(rows[0].ts, bucket_s)) != last:
                    # the last bucket whole, next time
                    rows = [row for row in rows if (row.stream, retention.bucket_of(row.ts, bucket_s)) != last]
                pairs = list(dict.fromkeys((row.stream, retention.bucket_of(row.ts, bucket_s)) for row in rows))
                again = [pair for n, pair in enumerate(pairs) if (merged_before is not None and pair[1] < merged_before)
                         or (n == 0 and since is not None)]
                rows = self._merged_already(conn, again, bucket_s) + rows
                merged = self._merge_rows(conn, rows, plans, bucket_s)
                if merged:
                    bump(conn, COUNTERS["merged"], merged)
                    result.merged += merged
                    result.batches += self._drop_batches(conn, {row.batch for row in rows})
            if not full:
                return True
            if len(ids) == 1:  # a long stream: on from its last bucket (the merged rows are left out anyway)
                since = last[1]
        return False

    @staticmethod
    def _merged_already(conn: Connection, pairs: list[tuple[int, float]], bucket_s: int) -> list:
        """The records merged before into these (stream, bucket start) buckets."""
        r = records.c
        found: list = []
        for start in range(0, len(pairs), IDS_PER_STATEMENT // 5):
            chunk = pairs[start:start + IDS_PER_STATEMENT // 5]
            found += conn.execute(select(r.id, r.stream, r.ts, r.data, r.stack, r.batch).where(
                r.bucket == bucket_s, or_(*(and_(r.stream == stream_id, r.ts >= begins, r.ts < begins + bucket_s)
                                            for stream_id, begins in chunk))).order_by(r.id).with_for_update()).all()
        return found

    def _merge_rows(self, conn: Connection, rows: list, plans: dict[int, _Plan], bucket_s: int) -> int:
        """Merge these rows (whole buckets of their streams, or the first part of one); the rows deleted."""
        r = records.c
        by_bucket: dict[tuple[int, float], list] = defaultdict(list)
        for row in rows:
            by_bucket[(row.stream, retention.bucket_of(row.ts, bucket_s))].append(row)
        rewrites: list[dict] = []
        gone: list[int] = []
        for (stream_id, start), bucket in by_bucket.items():
            plan = plans[stream_id]
            parsed = [orjson.loads(row.data) for row in bucket]
            if plan.snapshot:  # the bucket's newest state stands for it, as a snapshot profile shows it
                newest, _n = retention.intervals_of(parsed)
                for row, record in zip(bucket, parsed, strict=True):
                    if record.get("interval") == newest:
                        rewrites.append({"rid": row.id, "data": row.data, "ts": row.ts, "b": bucket_s})
                    else:
                        gone.append(row.id)
                continue
            interval, intervals = retention.intervals_of(parsed)
            summed = retention.SUMMED | {plan.weight}
            groups: dict[tuple, list[int]] = defaultdict(list)
            for i, record in enumerate(parsed):
                groups[(bytes(bucket[i].stack), retention.group_key(record, summed))].append(i)
            for members in groups.values():
                merged = retention.merge([parsed[i] for i in members], plan.weight, bucket_s, start, interval,
                                         intervals)
                rewrites.append({"rid": bucket[members[0]].id, "data": ascii_json(merged), "ts": start, "b": bucket_s})
                gone.extend(bucket[i].id for i in members[1:])
        if rewrites:
            written = conn.execute(update(records).where(r.id == bindparam("rid"))
                                   .values(data=bindparam("data"), ts=bindparam("ts"), bucket=bindparam("b")),
                                   rewrites).rowcount
            if written != len(rewrites):  # a record that holds a group's sum is gone: the group's weight with it
                raise MergeRaced(f"{len(rewrites) - written} merged record(s) gone meanwhile: rolled back")
        return self._delete_ids(conn, gone)

    # --- deleting --------------------------------------------------------------------------------------
    def _expire(self, cutoff: float, result: PassResult) -> None:
        """Every record older than cutoff, its emptied batches, and streams with nothing left."""
        n, emptied = self._delete_oldest(cutoff, "expired")
        result.expired += n
        result.batches += emptied + self._drop_empty_batches(cutoff)
        s = streams.c
        with write_transaction(self.engine) as conn:
            left = exists().where(records.c.stream == s.id)
            dead = conn.execute(select(s.id).where(s.last_seen < cutoff, ~left)).scalars().all()
            for start in range(0, len(dead), IDS_PER_STATEMENT):
                chunk = dead[start:start + IDS_PER_STATEMENT]
                conn.execute(delete(gaps).where(gaps.c.stream.in_(chunk)))
                conn.execute(delete(streams).where(s.id.in_(chunk), ~left))

    def _collect_stacks(self, now: float, result: PassResult) -> None:
        """Stacks no record uses (their records expired, evicted or merged away): marked unused_since by
        the first pass that finds them so, unmarked when a record uses one again, deleted by a pass
        STACK_GRACE_S after the mark; IDS_PER_STATEMENT of them a transaction, in hash order. On
        PostgreSQL the delete holds the stacks table against inserts (SHARE ROW EXCLUSIVE) for its short
        transaction: an ingest's INSERT ... ON CONFLICT DO NOTHING that found a stack's row takes no lock
        on it, so a delete between that and its records' insert would fail the batch on the foreign key;
        with the table held, the ingest committed before, or inserts the row anew after. (No grace age
        can stand in for the lock: an old unused stack may be met again by the next batch.) SQLite's
        one writer has the same effect."""
        h = stacks.c
        used = exists().where(records.c.stack == h.hash)
        after = b""
        while not self._stop.is_set():
            with write_transaction(self.engine) as conn:
                chunk = conn.execute(select(h.hash).where(h.hash > after).order_by(h.hash)
                                     .limit(IDS_PER_STATEMENT)).scalars().all()
                if not chunk:
                    return
                after = chunk[-1]
                conn.execute(update(stacks).where(h.hash.in_(chunk), h.unused_since.is_(None), ~used)
                             .values(unused_since=now))
                conn.execute(update(stacks).where(h.hash.in_(chunk), h.unused_since.is_not(None), used)
                             .values(unused_since=None))
                doomed = conn.execute(select(h.hash).where(h.hash.in_(chunk), h.unused_since <= now - STACK_GRACE_S,
                                                           ~used)).scalars().all()
            if doomed and not self._delete_stacks(doomed, now, result):
                return

    def _delete_stacks(self, doomed: list[bytes], now: float, result: PassResult) -> bool:
        """Delete these stacks if still unused (see _collect_stacks); False when ingest held the table
        past STACK_LOCK_WAIT_MS (the next pass tries again)."""
        h = stacks.c
        try:
            with write_transaction(self.engine) as conn:
                if self._postgres:
                    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{STACK_LOCK_WAIT_MS}ms'")
                    conn.exec_driver_sql("LOCK TABLE stacks IN SHARE ROW EXCLUSIVE MODE")
                n = conn.execute(delete(stacks).where(h.hash.in_(doomed), h.unused_since <= now - STACK_GRACE_S,
                                                      ~exists().where(records.c.stack == h.hash))).rowcount
                if n:
                    bump(conn, COUNTERS["stacks_deleted"], n)
        except DBAPIError as e:
            if getattr(e.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            log.info("compaction: stacks not deleted this pass: ingest held the table")
            return False
        result.stacks += n
        return True

    def _bound(self, result: PassResult) -> None:
        """Under max_db_bytes: past HIGH_WATER of it, the oldest records deleted down to LOW_WATER, as many
        as the excess is a share of the size. SQLite measures again and goes on while the pages in use
        are still too many; PostgreSQL's files do not shrink (the space is reused once VACUUM has run),
        so there it deletes once, then VACUUMs, and deletes again only once the tables have grown past
        their size after that. What deleting records does not free (dbsize.kept_bytes: the stacks above
        all, unused ones until _collect_stacks deletes them) is not theirs to pay for: once it alone is
        past LOW_WATER, no record is deleted (a round more only deleted the records, about 94 % of them
        in 20 rounds, and left the stacks)."""
        bound = self.max_db_bytes
        size = dbsize.measure(self.engine)
        result.db_bytes = size
        if size is None or size <= bound * HIGH_WATER:
            return
        with self.engine.connect() as conn:
            if self._postgres:
                before = conn.execute(select(compactions.c.db_bytes).where(compactions.c.evicted > 0)
                                      .order_by(compactions.c.id.desc()).limit(1)).scalar()
                if before is not None and size <= before:
                    return  # the space freed last time is still being taken
                if not conn.execute(select(func.pg_try_advisory_lock(LOCK_CLASS, BOUND_LOCK))).scalar():
                    return  # another process is at it
            try:
                if self._postgres:
                    conn.commit()  # the lock is the session's: no transaction stays open while deleting
                for _round in range(1 if self._postgres else 20):
                    kept = dbsize.kept_bytes(self.engine)
                    if kept >= bound * LOW_WATER:
                        log.warning("size bound: %d bytes of stacks, streams and logs, past the bound's low water"
                                    " (%d): no record is deleted for them", kept, bound * LOW_WATER)
                        break
                    goal = math.ceil(dbsize.estimated_rows(conn, "records") * (size - bound * LOW_WATER) / size)
                    conn.commit()  # (SQLite: nor a read snapshot the checkpoints would wait for)
                    n, emptied = self._delete_oldest(None, "evicted", goal)
                    result.evicted += n
                    result.batches += emptied
                    if self._postgres:
                        dbsize.vacuum(self.engine)
                    size = dbsize.measure(self.engine)
                    if not n or size <= bound * LOW_WATER:
                        break
            finally:
                if self._postgres:
                    _unlock_session(conn, LOCK_CLASS, BOUND_LOCK)
                conn.commit()
        result.db_bytes = size

    def _delete_oldest(self, cutoff: float | None, counter: str, limit: int | None = None) -> tuple[int, int]:
        """Delete the oldest records (those older than cutoff, if given; at most limit), DELETE_CHUNK a
        transaction; (records, batches) deleted."""
        r = records.c
        deleted = emptied = 0
        while (limit is None or deleted < limit) and not self._stop.is_set():
            with write_transaction(self.engine) as conn:
                chunk = DELETE_CHUNK if limit is None else min(DELETE_CHUNK, limit - deleted)
                # rows a merge holds are left to it, and two processes do not delete the same ones
                query = select(r.id, r.batch).order_by(r.ts, r.id).limit(chunk).with_for_update(skip_locked=True)
                if cutoff is not None:
                    query = query.where(r.ts < cutoff)
                rows = conn.execute(query).all()
                if not rows:
                    break
                n = self._delete_ids(conn, [row.id for row in rows])
                if n:
                    bump(conn, COUNTERS[counter], n)
                emptied += self._drop_batches(conn, {row.batch for row in rows})
                deleted += n
        return deleted, emptied

    def _drop_empty_batches(self, cutoff: float) -> int:
        """Delete the batches that came with no record (n_records 0), received before cutoff: no record's
        deletion names them, so _drop_batches never did. DELETE_CHUNK a transaction; how many went."""
        b = batches.c
        after = n = 0
        while not self._stop.is_set():
            with write_transaction(self.engine) as conn:
                ids = conn.execute(select(b.id).where(b.n_records == 0, b.received_at < cutoff, b.id > after)
                                   .order_by(b.id).limit(DELETE_CHUNK)).scalars().all()
                if not ids:
                    break
                after = ids[-1]
                n += self._drop_batches(conn, set(ids))
        return n

    @staticmethod
    def _delete_ids(conn: Connection, ids: list[int]) -> int:
        """Delete these records; how many were still there (another pass may have taken some)."""
        n = 0
        for start in range(0, len(ids), IDS_PER_STATEMENT):
            n += conn.execute(delete(records).where(records.c.id.in_(ids[start:start + IDS_PER_STATEMENT]))).rowcount
        return n

    @staticmethod
    def _drop_batches(conn: Connection, ids: set[int]) -> int:
        """Delete the batches among these that hold no record any more (the rest stay: their batch_id
        still recognises a retry)."""
        wanted = sorted(ids)
        n = 0
        for start in range(0, len(wanted), IDS_PER_STATEMENT):
            chunk = wanted[start:start + IDS_PER_STATEMENT]
            n += conn.execute(delete(batches).where(batches.c.id.in_(chunk),
                                                    ~exists().where(records.c.batch == batches.c.id))).rowcount
        if n:
            bump(conn, COUNTERS["batches_deleted"], n)
        return n

    def _log(self, result: PassResult) -> None:
        c = compactions.c
        with write_transaction(self.engine) as conn:
            conn.execute(insert(compactions).values(
                started_at=result.started_at, finished_at=time.time(), merged=result.merged, expired=result.expired,
                evicted=result.evicted, batches=result.batches, db_bytes=result.db_bytes))
            old = select(c.id).order_by(c.id.desc()).offset(LOG_KEPT).limit(1).scalar_subquery()
            # the newest pass that evicted stays: its db_bytes is the size the bound waits for growth past
            # (PostgreSQL), however many passes came since
            evicting = select(func.max(c.id)).where(c.evicted > 0).scalar_subquery()
            conn.execute(delete(compactions).where(c.id <= old, c.id != func.coalesce(evicting, 0)))


def _unlock_session(conn: Connection, *key: int) -> None:
    """Release a session-level advisory lock, also after an error left the transaction aborted (rolled
    back first); if even that fails, the connection is closed for good (its session, and the lock, end)
    rather than going back to the pool holding the lock that every other process's pass then waits for."""
    try:
        conn.rollback()
        conn.execute(select(func.pg_advisory_unlock(*key)))
    except Exception:
        conn.invalidate()
        raise


@dataclass(frozen=True)
class _Plan:
    """How a stream's stack records merge: their kind (None: any), the weight summed, snapshot or not."""
    kind: str | None
    weight: str
    snapshot: bool


def _stack_plan(source: str) -> _Plan | None:
    """The registry's stacks chart of the source; None for a registered metric without one (it has no
    stack records); an unregistered source's stack records are weighted by their count."""
    spec = registered(source)
    if spec is None:
        return _Plan(None, "count", False)
    chart = spec.chart
    if chart.kind != "stacks":
        return None
    return _Plan(chart.record_kind, chart.y, chart.snapshot)


def _packed(streams_n: list[tuple[int, int]]) -> list[list[int]]:
    """Streams (id, records to merge) in groups of CHUNK records at most, a transaction each (a pass
    over 300 streams took 300 transactions); a stream of more, alone."""
    groups: list[list[int]] = []
    group: list[int] = []
    size = 0
    for stream_id, n in streams_n:
        if n >= CHUNK:
            groups.append([stream_id])
            continue
        if size + n > CHUNK:
            groups.append(group)
            group, size = [], 0
        group.append(stream_id)
        size += n
    return groups + ([group] if group else [])
