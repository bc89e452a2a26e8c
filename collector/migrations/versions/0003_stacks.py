"""Stacks stored once (commit af34d32): a stacks table keyed by the hash of a stack's frames, and
records.stack referring to it (NULL in the records stored before)."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "stacks",
        sa.Column("hash", sa.LargeBinary(16), primary_key=True),
        sa.Column("frames", sa.Text, nullable=False),
    )
    if op.get_bind().dialect.name == "sqlite":  # alembic adds no foreign key there; SQLite takes it inline
        op.execute("ALTER TABLE records ADD COLUMN stack BLOB REFERENCES stacks (hash)")
    else:
        op.add_column("records", sa.Column("stack", sa.LargeBinary(16), sa.ForeignKey("stacks.hash")))
