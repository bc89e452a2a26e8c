"""Each stream's trend line kept in its row (collector/trend.py): streams.trend, the JSON of its key
figure's newest values, written with each batch. NULL in the rows of streams stored before: the
overview reads those streams' records instead until their trend fills up."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.add_column("streams", sa.Column("trend", sa.Text))
