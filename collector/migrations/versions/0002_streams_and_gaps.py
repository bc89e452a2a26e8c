"""Streams and gaps (commit 429a250): each (host, run_id, source) gets a streams row with its running
totals and a gaps row per missing range of sequences, both computed here from the stored batches; a
record names its stream by id instead of host, run_id and source."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
GAP_ROWS = 1000  # inserted at a time


def upgrade() -> None:
    op.create_table(
        "streams",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("batches", sa.BigInteger, nullable=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("received", sa.BigInteger, nullable=False),
        sa.Column("highest", sa.BigInteger, nullable=False),
        sa.Column("lowest", sa.BigInteger, nullable=False),
        sa.Column("dropped", sa.BigInteger, nullable=False),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.Column("legacy", sa.Boolean, nullable=False),
        sa.Column("token_name", sa.String(255)),
        sa.UniqueConstraint("host", "run_id", "source", name="uq_streams_key"),
    )
    op.create_table(
        "gaps",
        sa.Column("stream", ID, sa.ForeignKey("streams.id"), primary_key=True, autoincrement=False),
        sa.Column("lo", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("hi", sa.BigInteger, nullable=False),
    )
    conn = op.get_bind()
    conn.exec_driver_sql(
        "INSERT INTO streams (host, run_id, source, batches, records, received, highest, lowest, dropped,"
        " first_seen, last_seen, legacy, token_name)"
        " SELECT host, run_id, source, count(*), sum(n_records), count(DISTINCT sequence), max(sequence),"
        " min(sequence), sum(dropped), min(received_at), max(received_at),"
        " max(CASE WHEN schema = 0 THEN 1 ELSE 0 END) = 1, max(token_name)"
        " FROM batches GROUP BY host, run_id, source")
    _fill_gaps(conn)
    op.create_table(
        "records_by_stream",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("batch", ID, sa.ForeignKey("batches.id"), nullable=False),
        sa.Column("stream", ID, sa.ForeignKey("streams.id"), nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    conn.exec_driver_sql(
        "INSERT INTO records_by_stream (id, batch, stream, sequence, idx, ts, kind, metric, data)"
        " SELECT r.id, r.batch, s.id, r.sequence, r.idx, r.ts, r.kind, r.metric, r.data FROM records r"
        " JOIN streams s ON s.host = r.host AND s.run_id = r.run_id AND s.source = r.source")
    op.drop_table("records")
    op.rename_table("records_by_stream", "records")
    if conn.dialect.name == "postgresql":  # the ids were copied: the sequence continues after them
        conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('records', 'id'),"
                             " coalesce((SELECT max(id) FROM records), 0) + 1, false)")
    op.create_index("ix_records_stream_ts", "records", ["stream", "ts"])
    op.create_index("ix_records_ts", "records", ["ts"])


def _fill_gaps(conn: sa.Connection) -> None:
    """A gap row per range of sequences below a stream's highest that no batch holds."""
    rows: list[dict] = []
    stream, expected = None, 0
    found = conn.exec_driver_sql(
        "SELECT DISTINCT s.id, b.sequence FROM batches b JOIN streams s"
        " ON s.host = b.host AND s.run_id = b.run_id AND s.source = b.source ORDER BY s.id, b.sequence")
    for stream_id, sequence in found:
        if stream_id != stream:
            stream, expected = stream_id, 0
        if sequence > expected:
            rows.append({"stream": stream_id, "lo": expected, "hi": sequence - 1})
        expected = sequence + 1
        if len(rows) >= GAP_ROWS:
            _insert_gaps(conn, rows)
            rows = []
    if rows:
        _insert_gaps(conn, rows)


def _insert_gaps(conn: sa.Connection, rows: list[dict]) -> None:
    conn.execute(sa.text("INSERT INTO gaps (stream, lo, hi) VALUES (:stream, :lo, :hi)"), rows)
