"""The collector's tables. A batch row per accepted batch_id (unique: the idempotency key), a record
row per metric record (its JSON as received plus the columns queries filter on), a stream row per
(host, run_id, source) holding its running totals and a gap row per missing range of sequences (both
kept up to date in the batch's own transaction, so no reader or answer scans the batches), and named
counters for what leaves no row (duplicates, rejections) so every server process reports the same
totals. A stack record's frames are a stack row, stored once, keyed by their hash (stacks.py); the
record keeps the hash. Old stack records are merged into time buckets and old rows deleted by the
compaction passes (compaction.py), which log each pass and where they got to. Every change to these tables is also an Alembic migration
(collector/migrations/versions), which brings a database of any earlier collector up to them."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

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
    # the batches that came with no record, by time: expiry deletes them (no record's deletion names them)
    Index("ix_batches_empty", "received_at", sqlite_where=text("n_records = 0"), postgresql_where=text("n_records = 0")),
)

streams = Table(
    "streams", metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("run_id", String(128), nullable=False),
    Column("source", String(128), nullable=False),
    Column("batches", BigInteger, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("received", BigInteger, nullable=False),  # distinct sequences
    Column("highest", BigInteger, nullable=False),
    Column("lowest", BigInteger, nullable=False),
    Column("dropped", BigInteger, nullable=False),
    Column("first_seen", Float, nullable=False),     # server time of its first and last batch
    Column("last_seen", Float, nullable=False),
    Column("legacy", Boolean, nullable=False),       # holds a batch of the original client
    Column("token_name", String(255)),               # its owner: the token that posted to it first
    Column("trend", Text),                           # its key figure's newest values (collector/trend.py)
    UniqueConstraint("host", "run_id", "source", name="uq_streams_key"),
)

gaps = Table(
    "gaps", metadata,  # the sequences below a stream's highest not received yet: lo..hi inclusive
    Column("stream", ID, ForeignKey("streams.id"), primary_key=True, autoincrement=False),
    Column("lo", BigInteger, primary_key=True, autoincrement=False),
    Column("hi", BigInteger, nullable=False),
)

stacks = Table(
    "stacks", metadata,  # a hash names the same frames for good; deleted once no record uses it (compaction.py)
    Column("hash", LargeBinary(16), primary_key=True),  # blake2b-128 of frames
    Column("frames", Text, nullable=False),  # the frame fields of a stack record, as a JSON object
    Column("unused_since", Float),  # when a compaction pass found no record using it (NULL: in use)
)

records = Table(
    "records", metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("batch", ID, ForeignKey("batches.id"), nullable=False),
    Column("stream", ID, ForeignKey("streams.id"), nullable=False),  # host, run_id and source are there
    Column("sequence", BigInteger, nullable=False),
    Column("idx", Integer, nullable=False),         # position in its batch
    Column("ts", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("metric", String(64), nullable=False),
    Column("data", Text, nullable=False),           # the record as JSON text: compact, ASCII, its fields as sent
    # a stack record's frames, cut out of data (NULL: the record has none)
    Column("stack", LargeBinary(16), ForeignKey("stacks.hash")),
    Column("bucket", Integer),  # a merged stack record's bucket in seconds (retention.py); NULL: as received
    Index("ix_records_stream_ts", "stream", "ts"),
    # a stream's newest records of one kind (the overview's trend lines, a chart's points) without
    # walking past its other kinds: a sysnest stream holds 5 process rows per summary
    Index("ix_records_stream_kind_ts", "stream", "kind", "ts"),
    Index("ix_records_ts", "ts"),
    # a batch's records: deleting an old batch checks that none is left (a foreign key's check without
    # it reads every record)
    Index("ix_records_batch", "batch"),
    # a stack's records: whether a stack is still used, one look-up (compaction deletes those unused);
    # stack records only, so the many records of no stack cost it nothing
    Index("ix_records_stack", "stack", sqlite_where=text("stack IS NOT NULL"), postgresql_where=text("stack IS NOT NULL")),
)

counters = Table(
    "counters", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)


compactions = Table(
    "compactions", metadata,  # one row per compaction pass (compaction.py), the newest kept
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float, nullable=False),
    Column("merged", BigInteger, nullable=False),   # stack records merged away (rows before - rows after)
    Column("expired", BigInteger, nullable=False),  # records deleted past the last tier's age
    Column("evicted", BigInteger, nullable=False),  # records deleted, oldest first, by the size bound
    Column("batches", BigInteger, nullable=False),  # batch rows deleted (no record left)
    Column("db_bytes", BigInteger),                 # the database's size after the pass (compaction.py says how)
)

retention_marks = Table(
    "retention_marks", metadata,  # how far each bucket length has been merged: a pass starts a little before
    Column("bucket_s", Integer, primary_key=True, autoincrement=False),
    Column("done_until", Float, nullable=False),  # every record before this time ...
    Column("done_id", BigInteger, nullable=False),  # ... up to this id (a later one may be a late batch's)
)
