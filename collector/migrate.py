"""The database's schema, brought up to date on start (and by `server.py db upgrade`) with Alembic: the
migrations in collector/migrations/versions are the first collector's tables and every change since, so
a database made by any earlier collector is upgraded in place. One made before Alembic was used has no
version row: its tables say which collector made it, and it is stamped with that revision first. A
database this collector cannot understand (not a collector's, made by a newer one, or missing a table,
column or unique key it needs) is refused with one line, before anything is served."""

from __future__ import annotations

import logging
import os

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, func, inspect, select

from collector.schema import metadata
from collector.writer import write_transaction

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
SCHEMA_LOCK = 7_461_801  # PostgreSQL advisory lock id while migrating: processes starting together wait
TABLES = {"batches", "records", "counters", "streams", "gaps", "stacks"}
# what a database may not lack: a table, a column, a unique key (the idempotency key, a stream's key);
# an index or a foreign key less costs speed or a check, not correctness, and an extra one nothing
MISSING = {"add_table", "add_column", "add_constraint"}


class SchemaError(ValueError):
    """The database is not one this collector can use; the message is one line saying why."""


def _config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPTS)
    config.attributes["connection"] = conn
    return config


def head() -> str:
    """The revision of the schema this collector writes."""
    return ScriptDirectory(SCRIPTS).get_current_head()


def _unversioned(conn: Connection) -> str | None:
    """The revision of a database made before the collector used Alembic, from its tables (None: it has
    none of the collector's tables yet)."""
    tables = set(inspect(conn).get_table_names())
    ours = tables & TABLES
    if not ours:
        return None
    columns = {c["name"] for c in inspect(conn).get_columns("records")} if "records" in ours else set()
    if ours == {"batches", "records", "counters"} and "host" in columns:
        return "0001"
    if ours == {"batches", "records", "counters", "streams", "gaps"} and "stream" in columns:
        return "0002"
    if ours == TABLES and "stack" in columns:
        if "trend" in {c["name"] for c in inspect(conn).get_columns("streams")}:
            return "0006" if "bucket" in columns else "0005"
        indexes = {i["name"] for i in inspect(conn).get_indexes("records")}
        return "0004" if "ix_records_stream_kind_ts" in indexes else "0003"
    raise SchemaError(f"its tables ({', '.join(sorted(ours))}) are not those of any collector version")


def upgrade(conn: Connection) -> tuple[str | None, str]:
    """Bring the database on conn (in a transaction) to the current schema; (revision before, after).
    Raises SchemaError."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(SCHEMA_LOCK)))
    config = _config(conn)
    scripts = ScriptDirectory.from_config(config)
    before = MigrationContext.configure(conn).get_current_revision()
    if before is None:
        before = _unversioned(conn)
        if before is not None:
            command.stamp(config, before)
    elif before not in {s.revision for s in scripts.walk_revisions()}:
        raise SchemaError(f"it was made by a newer collector (schema revision {before}; this one knows up to "
                          f"{scripts.get_current_head()})")
    command.upgrade(config, "head")
    lacking = [_describe(d) for d in _flatten(compare_metadata(MigrationContext.configure(conn), metadata))
               if d[0] in MISSING]
    if lacking:
        raise SchemaError(f"it lacks {', '.join(lacking)} (made by a collector version this one cannot upgrade)")
    return before, scripts.get_current_head()


def _flatten(diffs: list) -> list[tuple]:
    return [d for diff in diffs for d in (diff if isinstance(diff, list) else [diff]) if isinstance(d, tuple)]


def _describe(diff: tuple) -> str:
    """One of Alembic's differences (something the database lacks) in a few words."""
    kind, *rest = diff
    if kind == "add_column":
        return f"column {rest[1]}.{rest[2].name}"
    thing = rest[0]
    if kind == "add_table":
        return f"table {thing.name}"
    return f"unique key {thing.table.name}({', '.join(c.name for c in thing.columns)})"


def upgrade_engine(engine: Engine) -> tuple[str | None, str]:
    """upgrade() in a transaction of its own (a write transaction: SQLite's lock is taken up front)."""
    with write_transaction(engine) as conn:
        before, after = upgrade(conn)
    if before != after:
        logging.getLogger("collector").info("database schema upgraded from %s to %s", before or "nothing", after)
    return before, after
