"""The default output parser: a metric script's stdout line as a record of the NDJSON envelope
(docs/ndjson.md), or None for anything else (a log line)."""

from __future__ import annotations

import json

from client.wire import is_record


def parse_ndjson(line: str) -> dict | None:
    """The default output_parser: one NDJSON envelope line -> dict; anything else -> None (a log line)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if is_record(record) else None
