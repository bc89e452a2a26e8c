"""A record's JSON fields read by the database itself (SQLite's JSON1, PostgreSQL's json operators), so a
page that wants one number from each of thousands of records never parses them in Python: a field's
value, a string field tested against values (a cgroup and its tree), a number field summed."""

from __future__ import annotations

import json
from collections.abc import Sequence

import orjson
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    Numeric,
    Text,
    and_,
    case,
    cast,
    func,
    or_,
    type_coerce,
)
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



def of_cgroup(dialect: str, data: ColumnElement, path: str, tree: bool) -> ColumnElement:
    """Records whose top-level `cgroup` field is `path` (tree: or a group below it). No column of its
    own: see field_in."""
    if not tree:
        return field_in(dialect, data, "cgroup", (path,))
    below = path if path.endswith("/") else path + "/"
    field = field_text(dialect, data, "cgroup")
    return and_(_near(data, "cgroup", path, prefix=True), or_(field == path, func.substr(field, 1, len(below)) == below))


def field_in(dialect: str, data: ColumnElement, name: str, values: tuple[str, ...]) -> ColumnElement:
    """Records whose top-level string field `name` is one of `values`. No column of its own: a substring
    test on the stored text (compact JSON, so the field reads `"name":"VALUE"`) skips the other records
    before the JSON is parsed, and the parsed field settles it (the text may be nested, a meta
    record's filters, or a longer value)."""
    return and_(or_(*(_near(data, name, v) for v in values)), field_text(dialect, data, name).in_(values))


def _near(data: ColumnElement, name: str, value: str, prefix: bool = False) -> ColumnElement:
    # as the collector stored it (body.py, payload.py): json's text, or orjson's when ASCII (DEL unescaped)
    texts = dict.fromkeys(q for q in (json.dumps(value, ensure_ascii=True), orjson.dumps(value).decode())
                          if q.isascii())
    return or_(*(data.contains(f'"{name}":' + (q[:-1] if prefix else q), autoescape=True) for q in texts))

# number_sums adds integers in two halves on SQLite, whose sum() of integers fails past 64 bits: the high
# and the low 32 bits of each, so no sum of fewer than 2**31 values can overflow
HALF_BITS = 32
INT64_END = 2.0**63  # the first float past a 64-bit integer


def number_field(dialect: str, data: ColumnElement, field: str) -> tuple[ColumnElement, ColumnElement]:
    """The record's top-level field `field` read for number_sums: (its JSON type, its value as SQL)."""
    if dialect == "postgresql":
        node = cast(data, JSON)[field]
        return func.json_typeof(node), node.astext
    path = _path(field)
    # typed Integer for its operators only: SQLite gives integers and floats as they are, converted by nothing
    return func.json_type(data, path), type_coerce(data.op("->>")(path), Integer)


def number_sums(dialect: str, kind: ColumnElement, value: ColumnElement, scale: int | None = None) -> list[ColumnElement]:
    """Aggregates over number_field's two columns whose values summed() makes the sum of the numbers, as
    Python's json reads them (a bool, a string or a missing field is no number): the integers' sum exact
    whatever its length (SQLite reads an integer past 64 bits as a float), an int when every value was
    one; with a scale, each value times the scale rounded to an integer first (half to even, as Python's
    round). The floats are summed in the database's order, so their sum may differ in its last bits."""
    if dialect == "postgresql":
        return _pg_number_sums(kind, value, scale)
    number = kind.in_(("integer", "real"))
    if scale is not None:
        value = value * scale  # an integer times an integer stays one (past 64 bits: a float)
    integer = func.typeof(value) == "integer"
    if scale is None:
        integers, floats = case((and_(number, integer), value)), case((and_(number, ~integer), value))
    else:
        big = func.abs(value) >= INT64_END
        integers = case((and_(number, integer), value), (and_(number, ~big), _rounded(value)))
        floats = case((and_(number, ~integer, big), value))
    return [func.sum(integers.op(">>")(HALF_BITS)), func.sum(integers.op("&")(2**HALF_BITS - 1)), func.sum(floats)]


def _rounded(value: ColumnElement) -> ColumnElement:
    """SQLite: a float below 2**63 rounded half to even, as an integer (SQLite's own round() adds 0.5
    and rounds away from zero, and past 2**52 the addition itself rounds)."""
    whole = cast(value, Integer)  # towards zero
    part = value - whole  # exact: a float's fraction is a float
    odd = whole % 2 != 0
    return whole + case((or_(part > 0.5, and_(part == 0.5, odd)), 1), (or_(part < -0.5, and_(part == -0.5, odd)), -1),
                        else_=0)


def _pg_number_sums(kind: ColumnElement, text: ColumnElement, scale: int | None) -> list[ColumnElement]:
    """PostgreSQL: an integer's text as numeric (exact, any length); a float (a '.' or an exponent in its
    text, as Python's json reads it) as float8, scaled and cast to bigint (which rounds half to even)."""
    number = kind == "number"
    is_float = text.regexp_match("[.eE]")
    integer = cast(text, Numeric)
    real = case((number, cast(text, Float(53))))  # cast only a number: PostgreSQL may test `big` before `number`
    if scale is None:
        return [func.sum(case((and_(number, ~is_float), integer))), func.sum(case((and_(number, is_float), real)))]
    real = real * scale
    big = func.abs(real) >= INT64_END
    return [func.sum(case((and_(number, ~is_float), integer * scale), (and_(number, ~big), cast(real, BigInteger)))),
            func.sum(case((and_(number, is_float, big), real)))]


def summed(parts: Sequence) -> int | float | None:
    """The sum number_sums' aggregates give (None: no number): an int when every value was one."""
    *halves, floats = parts
    if halves[0] is None:
        return floats
    exact = sum(int(half) << (HALF_BITS * i) for i, half in enumerate(reversed(halves)))
    return exact if floats is None else exact + floats
