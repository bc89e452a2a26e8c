"""Alembic's environment for the collector: migrations run on the connection collector/migrate.py
passes in (inside its transaction), against the tables of collector/schema.py."""

from alembic import context

from collector.schema import metadata

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
