"""POST /data bodies -> a validated Batch, or Rejected with a status and a one-line JSON reason. The usual
body is read by the contract's msgspec structs (batch_structs.py) in one pass; any other becomes JSON in
body.py and is checked here rule by rule, in the contract's order, naming the first rule it breaks.

Three payloads are accepted (docs/collector.md has the contract):
  schema 2 (our transport): schema, timestamp, metric, batch_id, sequence, host, run_id,
           records = NDJSON envelopes (docs/ndjson.md), optional dropped;
  schema 1 (our transport before 2: an outbox may still hold its batches): the same, with the metric
           in source_script and the records in metrics;
  legacy   (the original client, no `schema` key): timestamp, source_script, batch_id, sequence,
           metrics = any objects (it sent {"type": ..., "data": "<raw line>"}); the server supplies
           host (the remote address) and run_id (derived, see legacy_runs.py).
Our two schemas differ only in those names: a batch is stored the same in either (its row notes which).
Everything is bounded (size, depth, counts, numbers) so no body can make the server fail."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET

from client.wire import SCHEMAS, batch_names
from collector import batch_structs, stacks, trend
from collector.batch_structs import (
    HOST_LEN,
    KIND_LEN,
    MAX_RECORDS,
    MAX_SEQUENCE,
    MAX_TIMESTAMP,
    METRIC_LEN,
    NAME_LEN,
    Decoded,
)
from collector.body import parse_json
from collector.rejections import Rejected, bad

LEGACY_KIND = "legacy"  # records of the original client are stored with this kind


@dataclass
class Batch:
    schema: int  # 0 for the original client's payload
    batch_id: str
    source: str
    sequence: int
    timestamp: float
    host: str | None
    run_id: str | None
    dropped: int = 0
    # the records as columns, one item per record (the store inserts them as rows without reshaping)
    ts: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)  # each record's JSON text, ASCII only
    # stack records: data holds the record without its frames, stack_keys[i] the hash of record i's
    # frames (None: no stack), stack_frames each distinct hash's frames (see stacks.py); None: no stack
    stack_keys: list[bytes | None] | None = None
    stack_frames: dict[bytes, str] = field(default_factory=dict)
    figures: list[tuple[float, float]] = field(default_factory=list)  # (ts, key figure): see trend.py

    @property
    def legacy(self) -> bool:
        return self.schema == 0

    @property
    def n_records(self) -> int:
        return len(self.data)


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


def parse_body(body: bytes) -> Batch:
    """A validated Batch: the usual body read by msgspec's types (batch_structs.py), any other by the
    checks below, which also name what is wrong."""
    # a body without the word cannot hold a stack record: most batches skip the look at each record
    may_hold_stacks = b'"stack"' in body
    decoded = batch_structs.decode(body)
    if decoded is None:
        return parse_batch(parse_json(body), may_hold_stacks=may_hold_stacks)
    return _decoded_batch(decoded, may_hold_stacks)


def _decoded_batch(decoded: Decoded, may_hold_stacks: bool) -> Batch:
    payload, schema, n = decoded.payload, decoded.schema, len(decoded.texts)
    timestamp = payload.timestamp
    batch = Batch(schema=schema, timestamp=timestamp, source=getattr(payload, batch_names(schema or None)[0]),
                  batch_id=payload.batch_id, sequence=payload.sequence, host=payload.host if schema else None,
                  run_id=payload.run_id if schema else None, dropped=payload.dropped if schema else 0,
                  data=decoded.texts)
    if schema:
        batch.ts = [timestamp if t is UNSET else t for t in decoded.ts]
        batch.kinds, batch.metrics = decoded.kinds, decoded.metrics
    else:
        batch.ts, batch.kinds, batch.metrics = [timestamp] * n, [LEGACY_KIND] * n, [batch.source] * n
    _stacks_and_figures(batch, decoded.records, may_hold_stacks)
    return batch


def parse_batch(payload: Any, may_hold_stacks: bool = True) -> Batch:
    """A validated Batch, or Rejected naming the first rule broken, in the contract's order."""
    if not isinstance(payload, dict):
        raise bad("wrong_type", "payload must be a JSON object")
    schema = 0
    if "schema" in payload:
        if payload["schema"] not in SCHEMAS or isinstance(payload["schema"], bool):
            raise bad("bad_value", f"unsupported schema (this server speaks schemas {', '.join(map(str, SCHEMAS))}, "
                      "or none for the original client)")
        schema = int(payload["schema"])
    metric_key, records_key = batch_names(schema or None)
    batch = Batch(
        schema=schema,
        timestamp=_time(_required(payload, "timestamp"), "timestamp"),
        source=_text(_required(payload, metric_key), metric_key, NAME_LEN),
        batch_id=_text(_required(payload, "batch_id"), "batch_id", NAME_LEN),
        sequence=_int(_required(payload, "sequence"), "sequence", MAX_SEQUENCE),
        host=_text(_required(payload, "host"), "host", HOST_LEN) if schema else None,
        run_id=_text(_required(payload, "run_id"), "run_id", NAME_LEN) if schema else None,
        dropped=_int(payload.get("dropped", 0), "dropped", MAX_SEQUENCE) if schema else 0,
    )
    records = _required(payload, records_key)
    if not isinstance(records, list):
        raise bad("wrong_type", f"payload {records_key!r} must be a list")
    if len(records) > MAX_RECORDS:
        raise bad("bad_value", f"more than {MAX_RECORDS} records in one batch")
    _check_records(batch, records, records_key)
    _stacks_and_figures(batch, records, may_hold_stacks)
    return batch


def _stacks_and_figures(batch: Batch, records: Sequence[dict], may_hold_stacks: bool) -> None:
    if may_hold_stacks and batch.schema:
        _split_stacks(batch, records)
    if batch.schema:
        batch.figures = trend.figures(batch.source, batch.kinds, records, batch.ts)


def _split_stacks(batch: Batch, records: Sequence[dict]) -> None:
    """Cut the frames out of the batch's stack records, to be stored once each (stacks.py)."""
    keys: list[bytes | None] | None = None
    for index, record in enumerate(records):
        parts = stacks.split(record)
        if parts is None:
            continue
        if keys is None:
            keys = [None] * len(records)
        batch.data[index], frames, keys[index] = parts
        batch.stack_frames[keys[index]] = frames
    batch.stack_keys = keys


def _check_records(batch: Batch, records: list, records_key: str) -> None:
    """Each record checked and stored as a row of the batch's columns; the first wrong one is named."""
    for index, record in enumerate(records):
        where = f"{records_key}[{index}]"
        if not isinstance(record, dict):
            raise bad("bad_record", f"{where} must be an object")
        if batch.schema:
            ts, kind, metric = _envelope(record, batch, where)
        else:
            ts, kind, metric = batch.timestamp, LEGACY_KIND, batch.source
        batch.ts.append(ts)
        batch.kinds.append(kind)
        batch.metrics.append(metric)
        batch.data.append(_encode(record))


def _envelope(record: dict, batch: Batch, where: str) -> tuple[float, str, str]:
    try:
        metric = _text(_required(record, "metric", where), "metric", METRIC_LEN, where)
        kind = _text(_required(record, "kind", where), "kind", KIND_LEN, where)
        ts = _time(record["ts"], "ts", where) if "ts" in record else batch.timestamp
    except Rejected as e:
        raise bad("bad_record", e.detail) from None
    return ts, kind, metric
