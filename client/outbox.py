"""The transport's durable outbox: every batch is written here (gzip-compressed) the moment it is
created, before the first send attempt, and deleted once the collector has it.

So a batch's batch_id and sequence are fixed once, survive retries, outages and a SIGKILL, and the
next client process sends what an earlier one left. SQLite in WAL mode; one connection guarded by a
lock, shared by the transport's builder and sender threads. Bounded by bytes and by age: what the
bounds evict is returned to the caller, which counts it as dropped.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,   -- creation order = replay order
    batch_id TEXT NOT NULL UNIQUE,
    run_id   TEXT NOT NULL,
    source   TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    created  REAL NOT NULL,
    records  INTEGER NOT NULL,
    body     BLOB NOT NULL,                       -- the JSON payload, gzip-compressed
    size     INTEGER NOT NULL,                    -- len(body)
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS streams (              -- next sequence per (run, source), never reused
    run_id   TEXT NOT NULL,
    source   TEXT NOT NULL,
    next_seq INTEGER NOT NULL,
    PRIMARY KEY (run_id, source)
);
"""


@dataclass
class Batch:
    id: int
    batch_id: str
    run_id: str
    source: str
    sequence: int
    created: float
    records: int
    body: bytes
    attempts: int


@dataclass
class Evicted:
    reason: str          # "outbox_full" or "outbox_expired"
    source: str
    batches: int
    records: int


class Outbox:
    def __init__(self, path: str, max_bytes: int = 256 * 2**20, max_age: float = 7 * 86400) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=10.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")   # WAL + NORMAL: durable across a process kill
        self._db.executescript(SCHEMA)

    def add(self, run_id: str, source: str, build: Callable[[str, int], tuple[bytes, int]]) -> tuple[str, int]:
        """Create one batch: assign its batch_id and next sequence, and store build(batch_id, sequence)
        -> (gzip body, record count) in the same transaction. Returns (batch_id, sequence)."""
        batch_id = uuid.uuid4().hex
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT next_seq FROM streams WHERE run_id=? AND source=?",
                                       (run_id, source)).fetchone()
                sequence = row[0] if row else 0
                body, records = build(batch_id, sequence)
                self._db.execute(
                    "INSERT INTO batches (batch_id, run_id, source, sequence, created, records, body, size)"
                    " VALUES (?,?,?,?,?,?,?,?)",
                    (batch_id, run_id, source, sequence, time.time(), records, body, len(body)))
                self._db.execute("INSERT OR REPLACE INTO streams VALUES (?,?,?)", (run_id, source, sequence + 1))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return batch_id, sequence

    def oldest(self) -> Batch | None:
        """The batch to send next: the oldest, so each (run, source) replays in sequence order."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, batch_id, run_id, source, sequence, created, records, body, attempts"
                " FROM batches ORDER BY id LIMIT 1").fetchone()
        return Batch(*row) if row else None

    def delete(self, row_id: int) -> bool:
        """Remove a delivered (or rejected) batch; False if the bounds had already evicted it."""
        with self._lock:
            return self._db.execute("DELETE FROM batches WHERE id=?", (row_id,)).rowcount > 0

    def failed_attempt(self, row_id: int) -> None:
        with self._lock:
            self._db.execute("UPDATE batches SET attempts = attempts + 1 WHERE id=?", (row_id,))

    def enforce_bounds(self, now: float | None = None) -> list[Evicted]:
        """Evict batches older than max_age, then the oldest until the total is under max_bytes."""
        now = time.time() if now is None else now
        evicted: dict[tuple[str, str], Evicted] = {}

        def count(reason: str, rows: list[tuple[int, str, int]]) -> None:
            for _, source, records in rows:
                e = evicted.setdefault((reason, source), Evicted(reason, source, 0, 0))
                e.batches += 1
                e.records += records

        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                old = self._db.execute("SELECT id, source, records FROM batches WHERE created < ?",
                                       (now - self.max_age,)).fetchall()
                self._db.executemany("DELETE FROM batches WHERE id=?", [(r[0],) for r in old])
                count("outbox_expired", old)
                total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM batches").fetchone()[0]
                if total > self.max_bytes:
                    full = []
                    for row_id, source, records, size in self._db.execute(
                            "SELECT id, source, records, size FROM batches ORDER BY id"):
                        if total <= self.max_bytes:
                            break
                        full.append((row_id, source, records))
                        total -= size
                    self._db.executemany("DELETE FROM batches WHERE id=?", [(r[0],) for r in full])
                    count("outbox_full", full)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return list(evicted.values())

    def pending(self) -> dict[str, tuple[int, int]]:
        """{source: (batches, records)} waiting to be sent, from every run that left some."""
        with self._lock:
            rows = self._db.execute("SELECT source, COUNT(*), SUM(records) FROM batches GROUP BY source").fetchall()
        return {source: (batches, records or 0) for source, batches, records in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()
