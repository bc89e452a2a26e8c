"""Stored records as an answer's body, written while they are read (store.iter_records): JSON, NDJSON
or CSV, a piece of about PIECE_BYTES at a time, so an export's memory does not grow with its length
(300k records built whole in memory took 3.9 GB). JSON and NDJSON splice each record's stored JSON
text as it is (it was validated and made compact on the way in); only CSV parses records."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

FIXED_COLUMNS = ("id", "host", "run_id", "source", "sequence", "batch_id", "ts", "kind", "metric")
PIECE_BYTES = 256 * 1024
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a text cell as a formula


def item(row: dict) -> bytes:
    """A stored record as the API shows it: where it came from, and the record itself."""
    return orjson.dumps({k: row[k] for k in FIXED_COLUMNS})[:-1] + b',"record":' + row["data"].encode() + b"}"


def _pieces(parts: Iterable[bytes]) -> Iterator[bytes]:
    buffer: list[bytes] = []
    size = 0
    for part in parts:
        buffer.append(part)
        size += len(part)
        if size >= PIECE_BYTES:
            yield b"".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield b"".join(buffer)


def ndjson(rows: Iterable[dict]) -> Iterator[bytes]:
    return _pieces(item(row) + b"\n" for row in rows)


def json_page(count: int, next_cursor: str | None, rows: Iterable[dict]) -> Iterator[bytes]:
    def parts() -> Iterator[bytes]:
        yield b'{"count":%d,"next_cursor":%s,"records":[' % (count, orjson.dumps(next_cursor))
        for n, row in enumerate(rows):
            yield (b"," if n else b"") + item(row)
        yield b"]}"
    return _pieces(parts())


def neutral(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula gets a leading ' (a
    process named "=cmd|' /C calc'!A0" must not run anything on the instructor's machine)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _cell(value: Any) -> Any:
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else neutral(value)


def csv_rows(read: Callable[[], Iterable[dict]]) -> Iterator[bytes]:
    """One row per record: where it came from, then the union of the records' own fields, which a first
    pass over read() finds (the header comes first); the second pass writes the rows."""
    fields: dict[str, None] = {}
    for row in read():
        fields.update(dict.fromkeys(k for k in orjson.loads(row["data"]) if k not in FIXED_COLUMNS))

    def parts() -> Iterator[bytes]:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([*FIXED_COLUMNS, *map(neutral, fields)])
        for row in read():
            record = orjson.loads(row["data"])
            writer.writerow([_cell(row[k]) for k in FIXED_COLUMNS] + [_cell(record.get(f, "")) for f in fields])
            if out.tell() >= PIECE_BYTES:
                yield out.getvalue().encode()
                out.seek(0)
                out.truncate()
        yield out.getvalue().encode()
    return parts()
