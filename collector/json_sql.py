"""A record's JSON fields read by the database itself (SQLite's JSON1, PostgreSQL's json operators), so a
page that wants one number from each of thousands of records never parses them in Python."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Text, cast
from sqlalchemy.dialects.postgresql import JSON


def _path(field: str) -> str:
    return '$."' + field.replace('"', "") + '"'


def field_json(dialect: str, data: ColumnElement, field: str) -> ColumnElement:
    """The record's top-level field as JSON text ('12.5', '"abc"', 'true'; NULL when missing): the
    record is parsed once, and Python keeps what float() reads (a bool or a string is no number)."""
    if dialect == "postgresql":
        return cast(cast(data, JSON)[field], Text)
    return data.op("->")(_path(field))


def field_text(dialect: str, data: ColumnElement, field: str) -> ColumnElement:
    """The record's top-level field as SQL text (a string's value itself; NULL when missing)."""
    if dialect == "postgresql":
        return cast(data, JSON)[field].astext
    return data.op("->>")(_path(field))
