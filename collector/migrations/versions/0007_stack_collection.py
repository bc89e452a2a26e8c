"""Stacks no record uses are deleted (collector/compaction.py): stacks.unused_since (when a pass first
found no record using the stack; NULL in every stack stored before, as in use) and an index on records
by stack (stack records only), so whether a stack is still used is one index look-up, not a walk of
the records; and an index on the batches that came with no record, by time, so expiry finds them."""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.add_column("stacks", sa.Column("unused_since", sa.Float))
    op.create_index("ix_records_stack", "records", ["stack"], sqlite_where=sa.text("stack IS NOT NULL"),
                    postgresql_where=sa.text("stack IS NOT NULL"))
    op.create_index("ix_batches_empty", "batches", ["received_at"], sqlite_where=sa.text("n_records = 0"),
                    postgresql_where=sa.text("n_records = 0"))
