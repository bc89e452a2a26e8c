# collector/schema.py as commit 44efcbf left it (git show 44efcbf:collector/schema.py), frozen for tests/test_server_migrations.py
"""The collector's tables. A batch row per accepted batch_id (unique: the idempotency key), a record
row per metric record (its JSON as received plus the columns queries filter on), and named counters
for what leaves no row (duplicates, rejections) so every server process reports the same totals."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit id.
ID = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

batches = Table(
    "batches", metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("batch_id", String(128), nullable=False, unique=True),
    Column("host", String(255), nullable=False),
    Column("run_id", String(128), nullable=False),
    Column("source", String(128), nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("client_ts", Float, nullable=False),     # the batch's own timestamp
    Column("received_at", Float, nullable=False),   # server time, unix seconds
    Column("n_records", Integer, nullable=False),
    Column("dropped", BigInteger, nullable=False),  # records the client dropped before this batch
    Column("schema", Integer, nullable=False),      # 0: the original client's payload
    Column("token_name", String(255)),
    Column("remote_addr", String(64)),
    Index("ix_batches_stream", "host", "run_id", "source", "sequence"),
    Index("ix_batches_legacy", "host", "source", "received_at"),
)

records = Table(
    "records", metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("batch", ID, ForeignKey("batches.id"), nullable=False),
    Column("host", String(255), nullable=False),
    Column("run_id", String(128), nullable=False),
    Column("source", String(128), nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("idx", Integer, nullable=False),         # position in its batch
    Column("ts", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("metric", String(64), nullable=False),
    Column("data", Text, nullable=False),           # the record as JSON, exactly its fields
    Index("ix_records_stream_ts", "host", "run_id", "source", "ts"),
    Index("ix_records_ts", "ts"),
)

counters = Table(
    "counters", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)
