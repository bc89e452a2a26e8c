"""What a profile reads of the store (collector/profiles.py), mixed into Store: each stream's newest
stack record, a selection's stack records summed per stack and comm by the database (the weight read
from each record's JSON there: json_sql.number_sums), or read one by one (a stream's newest interval),
and each distinct stack's frames once."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from sqlalchemy import Connection, Select, and_, bindparam, false, func, or_, select, union_all

from collector import json_sql
from collector.schema import ID, records, stacks

if TYPE_CHECKING:
    from sqlalchemy import Engine

STACKS_PER_QUERY = 500  # hashes in one IN (...) list
STREAMS_PER_QUERY = 200  # streams in one UNION ALL (SQLite allows 500 compound terms); store.py's walks too


@dataclass(frozen=True)
class StackFilters:
    """Which stack records of a selection's streams: a time range (since_of: each stream's own start
    instead, by id), and the records' `cgroup` (any of these paths, or their trees) and `comm` fields."""
    since: float | None = None
    until: float | None = None
    since_of: dict[int, float] | None = None
    cgroups: tuple[str, ...] = ()
    cgroup_tree: bool = False
    comms: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackSums:
    """A selection's stack records summed per stack and comm (Store.selection_stack_sums)."""
    sums: list[tuple[bytes, object, int | float | None]]  # (stack hash, comm, summed weight), first seen first
    frames: dict[bytes, str]  # each stack's frame fields as JSON, by hash
    records: int  # the records summed
    since: float | None  # the oldest and newest record's time (None: no record)
    until: float | None
    truncated: bool  # more records than the limit: the newest were summed


class StackReads:
    """Store's reads for a profile (Store gives the engine and its dialect)."""
    engine: Engine
    dialect: str

    def newest_stack_times(self, stream_ids: list[int], until: float | None = None) -> dict[int, float]:
        """Per stream, the time of its newest stack record (at or before until); streams without one left
        out. A walk down each stream's (stream, ts) index to its first stack record, not a scan of its records."""
        found: dict[int, float] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(stream_ids), STREAMS_PER_QUERY):
                chunk = stream_ids[start:start + STREAMS_PER_QUERY]
                params = {f"s{i}": stream_id for i, stream_id in enumerate(chunk)} | {"until": until}
                found.update((int(stream_id), float(ts)) for stream_id, ts in
                             conn.execute(_newest_stack_walks(len(chunk), until is not None), params))
        return found

    def selection_stack_records(self, stream_ids: list[int], of: StackFilters,
                                limit: int) -> tuple[list[tuple[float, str, bytes, int]], dict[bytes, str], bool]:
        """The stack records of these streams that the filters keep, oldest first: (ts, the record's JSON
        without its frames, its stack's hash, its stream's id), the newest `limit` of them, in one query
        whatever the number of streams; each of their stacks' frames by hash, read once per distinct
        stack; and whether records were left out by the limit."""
        r = records.c
        if not stream_ids:
            return [], {}, False
        with self.engine.connect() as conn:
            rows = conn.execute(select(r.ts, r.data, r.stack, r.stream).where(*self._stack_where(stream_ids, of))
                                .order_by(r.ts.desc(), r.id.desc()).limit(limit + 1)).all()
            truncated = len(rows) > limit
            rows = [(float(ts), data, bytes(digest), int(stream)) for ts, data, digest, stream in rows[:limit]][::-1]
            frames = self._frames(conn, {row[2] for row in rows})
        return rows, frames, truncated

    def selection_stack_sums(self, stream_ids: list[int], of: StackFilters, field: str, scale: int | None,
                             limit: int) -> StackSums:
        """The stack records of these streams that the filters keep (the newest `limit` of them) summed by
        the database per stack and comm: each record's number field `field` (json_sql.number_sums:
        times `scale`, rounded, when given), in one query whatever the number of streams; each stack's
        frames read once."""
        r = records.c
        if not stream_ids:
            return StackSums([], {}, 0, None, None, False)
        where = self._stack_where(stream_ids, of)
        with self.engine.connect() as conn:
            rows = conn.execute(self._stack_sums(where, field, scale)).all()
            truncated = sum(row[2] for row in rows) > limit
            if truncated:  # from the limit-th newest record on, as selection_stack_records reads them
                oldest_ts, oldest_id = conn.execute(select(r.ts, r.id).where(*where).order_by(r.ts.desc(), r.id.desc())
                                                    .offset(limit - 1).limit(1)).one()
                where += [r.ts >= oldest_ts, or_(r.ts > oldest_ts, r.id >= oldest_id)]
                rows = conn.execute(self._stack_sums(where, field, scale)).all()
            frames = self._frames(conn, {bytes(row[0]) for row in rows})
        sums = [(bytes(digest), None if comm is None else orjson.loads(comm), json_sql.summed(parts))
                for digest, comm, _n, _first, _last, *parts in rows]
        return StackSums(sums, frames, sum(row[2] for row in rows), min((float(row[3]) for row in rows), default=None),
                         max((float(row[4]) for row in rows), default=None), truncated)

    def _stack_sums(self, where: list, field: str, scale: int | None) -> Select:
        """Per stack and comm: (hash, comm as JSON, records, first and last ts, *json_sql.number_sums),
        first seen first."""
        r = records.c
        kind, value = json_sql.number_field(self.dialect, r.data, field)
        # OFFSET 0: the fields are read from each record's JSON once (a subquery the database merged into
        # the outer query would read them again for every aggregate that uses them)
        each = (select(r.stack, json_sql.field_json(self.dialect, r.data, "comm").label("comm"), r.ts, r.id,
                       kind.label("kind"), value.label("value")).where(*where).offset(0).subquery())
        e = each.c
        return (select(e.stack, e.comm, func.count(), func.min(e.ts), func.max(e.ts),
                       *json_sql.number_sums(self.dialect, e.kind, e.value, scale))
                .group_by(e.stack, e.comm).order_by(func.min(e.ts), func.min(e.id), e.stack, e.comm))

    def _stack_where(self, stream_ids: list[int], of: StackFilters) -> list:
        """The filters as conditions on the records of these streams that hold a stack."""
        r = records.c
        where = [r.stream.in_(stream_ids) if len(stream_ids) > 1 else r.stream == stream_ids[0], r.stack.is_not(None)]
        if of.since_of is not None:  # each stream's own window: its newest interval
            where.append(or_(*(and_(r.stream == stream_id, r.ts >= since) for stream_id, since in of.since_of.items()))
                         if of.since_of else false())
        if of.since is not None:
            where.append(r.ts >= of.since)
        if of.until is not None:
            where.append(r.ts <= of.until)
        if of.cgroups:
            where.append(or_(*(json_sql.of_cgroup(self.dialect, r.data, path, of.cgroup_tree) for path in of.cgroups)))
        if of.comms:
            where.append(json_sql.field_in(self.dialect, r.data, "comm", of.comms))
        return where

    @staticmethod
    def _frames(conn: Connection, hashes: set[bytes]) -> dict[bytes, str]:
        """The frames of these stacks, by hash."""
        wanted = sorted(hashes)
        frames: dict[bytes, str] = {}
        for start in range(0, len(wanted), STACKS_PER_QUERY):
            chunk = wanted[start:start + STACKS_PER_QUERY]
            frames.update((bytes(h), f) for h, f in
                          conn.execute(select(stacks.c.hash, stacks.c.frames).where(stacks.c.hash.in_(chunk))))
        return frames


@functools.lru_cache(maxsize=16)
def _newest_stack_walks(n: int, until: bool) -> Select:
    """newest_stack_times' query for n streams (bound as s0..s{n-1}, until)."""
    r = records.c
    walks = []
    for i in range(n):
        stream_id = bindparam(f"s{i}", type_=ID)
        where = [r.stream == stream_id, r.stack.is_not(None)] + ([r.ts <= bindparam("until")] if until else [])
        walks.append(select(stream_id.label("stream"), r.ts).where(*where).order_by(r.ts.desc()).limit(1).subquery())
    return union_all(*(select(w) for w in walks))
