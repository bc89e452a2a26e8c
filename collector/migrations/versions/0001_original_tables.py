"""The first collector's tables (commit 44efcbf): batches, records naming their stream by host, run_id
and source, counters."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("batch_id", sa.String(128), nullable=False, unique=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("client_ts", sa.Float, nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("n_records", sa.Integer, nullable=False),
        sa.Column("dropped", sa.BigInteger, nullable=False),
        sa.Column("schema", sa.Integer, nullable=False),
        sa.Column("token_name", sa.String(255)),
        sa.Column("remote_addr", sa.String(64)),
        sa.Index("ix_batches_stream", "host", "run_id", "source", "sequence"),
        sa.Index("ix_batches_legacy", "host", "source", "received_at"),
    )
    op.create_table(
        "records",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("batch", ID, sa.ForeignKey("batches.id"), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Index("ix_records_stream_ts", "host", "run_id", "source", "ts"),
        sa.Index("ix_records_ts", "ts"),
    )
    op.create_table(
        "counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
