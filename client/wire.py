"""The wire format, defined once for every side that speaks it: the metric scripts (bcctool), the
registry's output parser, the transport, the collector and the tests.

A record is one NDJSON envelope (docs/ndjson.md) of one of RECORD_KINDS; a batch is the transport's POST
/data body (docs/collector.md): batch_head() below, plus `records`, the records (batch_json()). Nothing
here imports anything of the project, so a metric script can use it without loading the app.
"""

from __future__ import annotations

import json
import time
from typing import Any

# The batch's schema. 2 named two keys for what they hold: the metric's name `metric` (1: source_script)
# and the list of records `records` (1: metrics). A collector takes 1 and the original client's (no
# schema, schema 1's names) too: an outbox written before the change still delivers.
SCHEMA_VERSION = 2
SCHEMAS = (1, SCHEMA_VERSION)
RECORD_SCHEMA = 1        # the records' own (their meta record's `schema`): unchanged by the batch's
RECORD_KINDS = ("meta", "row", "hist", "event", "summary", "lost", "end", "stack", "note")

# A JSON float literal reaches infinity (> 1.8e308) only with a 3-digit exponent or 100+ digits in a row:
# seen with every digit as 0, E as e and no "+" (deleting a character can only add matches, never hide one)
_NUMBER_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")
_OVERFLOW_SHAPES = (b"0e000", b"0" * 100)


def is_record(value: Any) -> bool:
    """A decoded JSON value is a record: an object of one of RECORD_KINDS that names its metric (what
    the registry's parse_ndjson, the worker's parse_records and an opened session hold a line to)."""
    return isinstance(value, dict) and value.get("kind") in RECORD_KINDS and isinstance(value.get("metric"), str)


def batch_names(schema: Any) -> tuple[str, str]:
    """The keys of a batch's metric name and of its records under this schema (None: the original client's)."""
    return ("metric", "records") if schema == 2 else ("source_script", "metrics")


def batch_head(*, metric: str, batch_id: str, sequence: int, host: str, run_id: str,
               dropped: int | None = 0, timestamp: float | None = None) -> dict[str, Any]:
    """A batch's envelope without its records; `dropped` None leaves the key out."""
    head: dict[str, Any] = {"schema": SCHEMA_VERSION, "timestamp": time.time() if timestamp is None else timestamp,
                            "metric": metric, "batch_id": batch_id, "sequence": sequence, "host": host,
                            "run_id": run_id}
    if dropped is not None:
        head["dropped"] = dropped
    return head


def batch_json(head: dict[str, Any], records: bytes) -> bytes:
    """A batch's JSON text: the head (batch_head's) and `records`, the records' JSON texts joined by commas,
    placed in the text as they are (the transport sends a script's lines without encoding them again)."""
    return json.dumps(head, separators=(",", ":")).encode()[:-1] + b',"records":[' + records + b"]}"


def number_shapes(text: bytes) -> bytes:
    """The text with its numbers' digits all 0 (see may_overflow)."""
    return text.translate(_NUMBER_SHAPES, b"+")


def may_overflow(shapes: bytes) -> bool:
    """Could a number in the text whose number_shapes() these are parse to infinity? False: certainly not."""
    return any(shape in shapes for shape in _OVERFLOW_SHAPES)


def may_be_nonfinite(text: bytes) -> bool:
    """Could json.loads read a number in this JSON text as NaN or an infinity, which a strict reader (the
    collector) refuses? False: certainly not; True also for such a word inside a string."""
    return b"NaN" in text or b"Infinity" in text or may_overflow(number_shapes(text))
