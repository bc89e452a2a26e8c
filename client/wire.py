"""The wire format, defined once for every side that speaks it: the metric scripts (bcctool), the
registry's output parser, the transport, the collector and the tests.

A record is one NDJSON envelope (docs/ndjson.md) of one of RECORD_KINDS; a batch is the transport's POST
/data body (docs/collector.md): batch_head() below, plus `metrics`, the records. Nothing here imports
anything, so a metric script can use it without loading the app.
"""

from __future__ import annotations

import time
from typing import Any

SCHEMA_VERSION = 1
RECORD_KINDS = ("meta", "row", "hist", "event", "summary", "lost", "end", "stack")


def is_record(value: Any) -> bool:
    """A decoded JSON value is a record: an object of one of RECORD_KINDS that names its metric (what
    the registry's parse_ndjson and the worker's parse_records both hold a line to)."""
    return isinstance(value, dict) and value.get("kind") in RECORD_KINDS and "metric" in value


def batch_head(*, source: str, batch_id: str, sequence: int, host: str, run_id: str,
               dropped: int | None = 0, timestamp: float | None = None) -> dict[str, Any]:
    """A batch's envelope without its records (`metrics`); `dropped` None leaves the key out."""
    head: dict[str, Any] = {"schema": SCHEMA_VERSION, "timestamp": time.time() if timestamp is None else timestamp,
                            "source_script": source, "batch_id": batch_id, "sequence": sequence, "host": host,
                            "run_id": run_id}
    if dropped is not None:
        head["dropped"] = dropped
    return head
