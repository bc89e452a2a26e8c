"""POST /data bodies -> a validated Batch, or Rejected with a status and a one-line JSON reason.

Two payloads are accepted (docs/collector.md has the contract):
  schema 1 (our transport): schema, timestamp, source_script, batch_id, sequence, host, run_id,
           metrics = NDJSON envelopes (docs/ndjson.md), optional dropped;
  legacy   (the original client, no `schema` key): timestamp, source_script, batch_id, sequence,
           metrics = any objects (it sent {"type": ..., "data": "<raw line>"}); the server supplies
           host (the remote address) and run_id (derived, see legacy_runs.py).
Everything is bounded (size, depth, counts, numbers) so no body can make the server fail."""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

MAX_SEQUENCE = 2**53 - 1  # the largest integer every JSON implementation keeps exact
MAX_DEPTH = 32  # containers inside containers; a hist record is 5 deep
MAX_RECORDS = 100_000  # per batch
MAX_TIMESTAMP = 1e11  # year 5138: anything later is a unit mistake (ms, ns)
LEGACY_KIND = "legacy"  # records of the original client are stored with this kind

# Reasons a request is rejected; a fixed set, because they label a Prometheus counter.
REASONS = ("unauthorized", "too_large", "unsupported_encoding", "bad_gzip", "not_json", "too_deep",
           "bad_unicode", "wrong_type", "missing_key", "bad_value", "bad_record")


class Rejected(Exception):
    def __init__(self, status: int, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


def bad(reason: str, detail: str) -> Rejected:
    return Rejected(413 if reason == "too_large" else 400, reason, detail)


@dataclass
class Record:
    ts: float
    kind: str
    metric: str
    json: str  # the record exactly as received, re-encoded (ASCII-safe)


@dataclass
class Batch:
    schema: int  # 0 for the original client's payload
    batch_id: str
    source: str
    sequence: int
    timestamp: float
    host: str | None
    run_id: str | None
    records: list[Record] = field(default_factory=list)
    dropped: int = 0

    @property
    def legacy(self) -> bool:
        return self.schema == 0


# --- bytes -> JSON -----------------------------------------------------------------------------------
def decode_body(raw: bytes, content_encoding: str | None, max_body: int) -> bytes:
    """The body, gunzipped when it says so; the size limit holds for the decompressed size too."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise Rejected(415, "unsupported_encoding", f"Content-Encoding {encoding[:40]!r} is not supported (gzip is)")
    inflater = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
    try:
        body = inflater.decompress(raw, max_body + 1)
    except zlib.error as e:
        raise bad("bad_gzip", f"body is not valid gzip ({e})") from None
    if len(body) > max_body or inflater.unconsumed_tail:
        raise bad("too_large", f"decompressed body is over the limit of {max_body} bytes")
    if not inflater.eof:
        raise bad("bad_gzip", "gzip body is truncated")
    if inflater.unused_data:
        raise bad("bad_gzip", "data after the end of the gzip stream")
    return body


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not_json", "body is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise bad("not_json", f"body is not JSON ({str(e)[:120]})") from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Depth and text: strings must be encodable (a lone surrogate escape is valid JSON but not text)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_DEPTH:
                raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels")
            for key, item in node.items():
                _check_text(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_DEPTH:
                raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels")
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            _check_text(node)
        elif isinstance(node, float) and not math.isfinite(node):
            raise bad("bad_value", "a number is out of range")  # 1e999 parses to inf


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad("bad_unicode", "a string holds an unpaired surrogate escape") from None


# --- JSON -> Batch -----------------------------------------------------------------------------------
def _required(obj: dict, key: str, where: str = "payload") -> Any:
    if key not in obj:
        raise bad("missing_key", f"{where} has no {key!r}")
    return obj[key]


def _text(value: Any, key: str, max_len: int, where: str = "payload") -> str:
    if not isinstance(value, str):
        raise bad("wrong_type", f"{where} {key!r} must be a string")
    if not 0 < len(value) <= max_len or not value.isprintable():
        raise bad("bad_value", f"{where} {key!r} must be 1..{max_len} printable characters")
    return value


def _int(value: Any, key: str, maximum: int, where: str = "payload") -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad("wrong_type", f"{where} {key!r} must be an integer")
    if not 0 <= value <= maximum:
        raise bad("bad_value", f"{where} {key!r} must be between 0 and {maximum}")
    return value


def _time(value: Any, key: str, where: str = "payload") -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise bad("wrong_type", f"{where} {key!r} must be a number (unix seconds)")
    if not 0 <= value < MAX_TIMESTAMP:
        raise bad("bad_value", f"{where} {key!r} must be unix seconds")
    return float(value)


def _encode(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def parse_batch(payload: Any) -> Batch:
    if not isinstance(payload, dict):
        raise bad("wrong_type", "payload must be a JSON object")
    schema = 0
    if "schema" in payload:
        if payload["schema"] != 1 or isinstance(payload["schema"], bool):
            raise bad("bad_value", "unsupported schema (this server speaks schema 1, or none for the original client)")
        schema = 1
    batch = Batch(
        schema=schema,
        timestamp=_time(_required(payload, "timestamp"), "timestamp"),
        source=_text(_required(payload, "source_script"), "source_script", 128),
        batch_id=_text(_required(payload, "batch_id"), "batch_id", 128),
        sequence=_int(_required(payload, "sequence"), "sequence", MAX_SEQUENCE),
        host=_text(_required(payload, "host"), "host", 255) if schema else None,
        run_id=_text(_required(payload, "run_id"), "run_id", 128) if schema else None,
        dropped=_int(payload.get("dropped", 0), "dropped", MAX_SEQUENCE) if schema else 0,
    )
    metrics = _required(payload, "metrics")
    if not isinstance(metrics, list):
        raise bad("wrong_type", "payload 'metrics' must be a list")
    if len(metrics) > MAX_RECORDS:
        raise bad("bad_value", f"more than {MAX_RECORDS} records in one batch")
    for index, record in enumerate(metrics):
        where = f"metrics[{index}]"
        if not isinstance(record, dict):
            raise bad("bad_record", f"{where} must be an object")
        batch.records.append(_envelope(record, batch, where) if schema else
                             Record(batch.timestamp, LEGACY_KIND, batch.source, _encode(record)))
    return batch


def _envelope(record: dict, batch: Batch, where: str) -> Record:
    try:
        metric = _text(_required(record, "metric", where), "metric", 64, where)
        kind = _text(_required(record, "kind", where), "kind", 32, where)
        ts = _time(record["ts"], "ts", where) if "ts" in record else batch.timestamp
    except Rejected as e:
        raise bad("bad_record", e.detail) from None
    return Record(ts, kind, metric, _encode(record))
