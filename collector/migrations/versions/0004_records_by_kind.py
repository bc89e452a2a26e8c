"""Records found by stream and kind (commit of issue 17's overview work): an index on records (stream,
kind, ts), so a stream's newest records of one kind are read without walking past its other kinds."""

from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_index("ix_records_stream_kind_ts", "records", ["stream", "kind", "ts"])
