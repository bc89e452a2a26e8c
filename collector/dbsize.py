"""How big the collector's database is, as the size bound (--max-db-bytes) counts it. SQLite: the pages
in use, (page_count - freelist_count) * page_size: a deleted row's pages go to the freelist and take
the next data, so the file stops growing there (it does not shrink without VACUUM; the WAL, truncated
past 64 MB by the writer, is not counted). PostgreSQL: pg_total_relation_size of the collector's tables
(their heap, indexes and TOAST), not the whole database, which may hold other things."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.exc import DBAPIError

from collector.schema import metadata


def measure(engine: Engine) -> int | None:
    """The database's size in bytes as above; None for a database of another kind."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
            free = conn.exec_driver_sql("PRAGMA freelist_count").scalar()
            size = conn.exec_driver_sql("PRAGMA page_size").scalar()
            return (pages - free) * size
        if conn.dialect.name == "postgresql":
            sizes = [func.coalesce(func.pg_total_relation_size(func.to_regclass(name)), 0)
                     for name in sorted(metadata.tables)]
            return int(conn.execute(select(sum(sizes[1:], sizes[0]))).scalar())
    return None


# the tables the size bound deletes rows from; what the others take (the stacks above all) it cannot free
EVICTED_FROM = ("records", "batches")


def kept_bytes(engine: Engine) -> int:
    """The bytes of every table but EVICTED_FROM's, with their indexes, as measure() counts them: stacks
    (those in use, and those unused until a pass deletes them), streams, gaps and the logs. SQLite reads
    them from its dbstat table (a walk of those tables' pages only; without dbstat, the stacks' text is
    the estimate); PostgreSQL from pg_total_relation_size."""
    kept = sorted(set(metadata.tables) - set(EVICTED_FROM))
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            sizes = [func.coalesce(func.pg_total_relation_size(func.to_regclass(name)), 0) for name in kept]
            return int(conn.execute(select(sum(sizes[1:], sizes[0]))).scalar())
        try:
            return int(conn.exec_driver_sql(
                "SELECT coalesce(sum(pgsize), 0) FROM dbstat('main', 1) WHERE name IN (SELECT name FROM"
                f" sqlite_schema WHERE tbl_name NOT IN ({', '.join(repr(t) for t in EVICTED_FROM)}))").scalar())
        except DBAPIError:  # an SQLite built without dbstat
            conn.rollback()
            return int(conn.exec_driver_sql("SELECT coalesce(sum(length(frames) + 40), 0) FROM stacks").scalar())


def estimated_rows(conn: Connection, table: str) -> int:
    """A table's rows: PostgreSQL's estimate (its statistics: no count(*) over millions of rows), else
    counted (SQLite counts them on its smallest index)."""
    found = None
    if conn.dialect.name == "postgresql":
        found = conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = to_regclass(:t)"), {"t": table}).scalar()
    if found is None or found < 0:  # never analysed yet, or SQLite
        found = conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar()
    return int(found)


def vacuum(engine: Engine) -> None:
    """PostgreSQL: VACUUM the tables rows are deleted from, so the next data reuses their space (a plain
    VACUUM: it takes no lock that stops ingest)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in (*EVICTED_FROM, "stacks"):
            conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")
