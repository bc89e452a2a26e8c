"""Retention and downsampling (collector/compaction.py): records.bucket (a merged stack record's bucket
length; NULL in every record stored before, as received), an index on records by batch (an emptied old
batch is deleted without reading every record), the compactions log and the retention marks."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("records", sa.Column("bucket", sa.Integer))
    op.create_index("ix_records_batch", "records", ["batch"])
    op.create_table(
        "compactions",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=False),
        sa.Column("merged", sa.BigInteger, nullable=False),
        sa.Column("expired", sa.BigInteger, nullable=False),
        sa.Column("evicted", sa.BigInteger, nullable=False),
        sa.Column("batches", sa.BigInteger, nullable=False),
        sa.Column("db_bytes", sa.BigInteger),
    )
    op.create_table(
        "retention_marks",
        sa.Column("bucket_s", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("done_until", sa.Float, nullable=False),
        sa.Column("done_id", sa.BigInteger, nullable=False),
    )
