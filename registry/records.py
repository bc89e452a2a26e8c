"""The default output parser: a metric script's stdout line as a record of the NDJSON envelope
(docs/ndjson.md), or None for anything else (a log line)."""

from __future__ import annotations

import json

from client.wire import RECORD_KINDS


def parse_ndjson(line: str) -> dict | None:
    """The default output_parser: one NDJSON envelope line -> dict; anything else -> None (a log line)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("kind") not in RECORD_KINDS or "metric" not in record:
        return None
    return record
