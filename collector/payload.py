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
import re
import zlib
from dataclasses import dataclass, field
from itertools import repeat
from json.decoder import scanstring
from typing import Any

import orjson

from collector import stacks

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

    @property
    def legacy(self) -> bool:
        return self.schema == 0

    @property
    def n_records(self) -> int:
        return len(self.data)


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


_DECODER = json.JSONDecoder(parse_constant=_no_constants)
_scan_value = _DECODER.scan_once  # the C scanner json.loads itself runs
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SPACE = " \t\n\r"
# What the body's text proves about its tree, so that a usual batch needs no walk over every value:
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # UTF-8 text gets a surrogate only from an escape
# a float literal reaches inf (> 1.8e308) only with a 3-digit exponent or 100+ digits in a row; seen
# with every digit as 0, E as e and no "+" (deleting a character can only add matches, never hide one)
_NUMBER_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")
_OVERFLOW_SHAPES = (b"0e000", b"0" * 100)
_LONG_INTEGER = b"0" * 19  # orjson reads an integer past 64 bits as a float (18 digits are safe)
_IS_DICT = frozenset({dict}).__contains__
_RECORD_BRACKETS = MAX_DEPTH - 2  # a record is at depth 3: this many brackets in its text cannot be too deep


def parse_json(body: bytes) -> tuple[Any, list[str] | None]:
    """The body as JSON, checked for depth and text, and a JSON text for each element of its "metrics"
    list, ready to store (None when the body is not the usual shape: the records are encoded later)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not_json", "body is not UTF-8 text") from None
    numbers = body.translate(_NUMBER_SHAPES, b"+")
    try:
        try:
            value, record_texts = _fast_payload(text, numbers) or _scan_payload(text)
        except (ValueError, IndexError, StopIteration):
            # not the usual shape, or not JSON: json.loads decides, with its own error message
            value, record_texts = json.loads(text, parse_constant=_no_constants), None
    except RecursionError:
        raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise bad("not_json", f"body is not JSON ({str(e)[:120]})") from None
    if _clean_by_text(text, numbers, record_texts):
        # nothing in the records can fail the walk: walk only the payload's other values
        _check_tree([(item, 2) for key, item in value.items() if key != "metrics"])
    else:
        _check_tree([(value, 1)])
    return value, record_texts


def _fast_payload(text: str, numbers: bytes) -> tuple[Any, list[str] | None] | None:
    """orjson's parse (a third of json's time), where it gives what json.loads would, and each record
    encoded again by orjson (a tenth of json.dumps's time); None leaves the body to the slower paths,
    which also name what is wrong with it."""
    if _LONG_INTEGER in numbers:
        return None
    try:
        value = orjson.loads(text)  # refuses NaN, inf, lone surrogates, depth > 1024: json's path decides
    except orjson.JSONDecodeError:
        return None
    metrics = value.get("metrics") if type(value) is dict else None
    if type(metrics) is not list or not all(map(_IS_DICT, map(type, metrics))):
        return value, None
    return value, [encoded.decode() for encoded in map(orjson.dumps, metrics)]


def _scan_payload(text: str) -> tuple[dict, list[str] | None]:
    """json.loads for a top-level object (json's own scanner), keeping the text of each record of its
    "metrics" list so that it need not be encoded again: for the bodies orjson does not take (long
    integers, or something wrong). Raises ValueError/IndexError/StopIteration on anything unusual;
    the caller then asks json.loads."""
    i = _WHITESPACE.match(text, 0).end()
    if text[i] != "{":
        raise ValueError("not an object")
    payload: dict = {}
    record_texts = None
    i = _WHITESPACE.match(text, i + 1).end()
    if text[i] == "}":
        i += 1
    else:
        while True:
            if text[i] != '"':
                raise ValueError("expected a key")
            key, i = scanstring(text, i + 1)
            i = _WHITESPACE.match(text, i).end()
            if text[i] != ":":
                raise ValueError("expected ':'")
            i = _WHITESPACE.match(text, i + 1).end()
            if key == "metrics" and text[i] == "[":
                payload[key], record_texts, i = _scan_list(text, i)
            else:
                payload[key], i = _scan_value(text, i)
                if key == "metrics":
                    record_texts = None  # a later "metrics" replaces an earlier one, as in json.loads
            i = _WHITESPACE.match(text, i).end()
            if text[i] == "}":
                i += 1
                break
            if text[i] != ",":
                raise ValueError("expected ',' or '}'")
            i = _WHITESPACE.match(text, i + 1).end()
    if _WHITESPACE.match(text, i).end() != len(text):
        raise ValueError("extra data")
    return payload, record_texts


def _scan_list(text: str, i: int) -> tuple[list, list[str], int]:
    """The list starting at text[i] == "[": its items, the text of each, and the index after it."""
    items: list = []
    texts: list[str] = []
    i += 1
    if text[i] in _SPACE:
        i = _WHITESPACE.match(text, i).end()
    if text[i] == "]":
        return items, texts, i + 1
    while True:
        item, end = _scan_value(text, i)
        items.append(item)
        texts.append(text[i:end])
        if text[end] in _SPACE:
            end = _WHITESPACE.match(text, end).end()
        if text[end] == "]":
            return items, texts, end + 1
        if text[end] != ",":
            raise ValueError("expected ',' or ']'")
        i = end + 1
        if text[i] in _SPACE:
            i = _WHITESPACE.match(text, i).end()


def _clean_by_text(text: str, numbers: bytes, record_texts: list[str] | None) -> bool:
    """True when the text alone (and its numbers' shapes) shows that no string holds a surrogate, no
    number is inf and no record nests too deep. False only means "walk the tree to know"."""
    if record_texts is None or _SURROGATE_ESCAPE.search(text):
        return False
    if any(shape in numbers for shape in _OVERFLOW_SHAPES):
        return False
    # brackets in a record's text bound its depth (strings holding brackets only make it stricter);
    # first the whole body's, less the payload's own "{", the list's "[" and each object record's "{"
    objects = sum(map(str.startswith, record_texts, repeat("{")))
    if text.count("{") + text.count("[") - 2 - objects < _RECORD_BRACKETS:
        return True
    return (max(map(str.count, record_texts, repeat("{")), default=0)
            + max(map(str.count, record_texts, repeat("[")), default=0)) <= _RECORD_BRACKETS


def _check_tree(stack: list[tuple[Any, int]]) -> None:
    """Depth and text of (value, depth) trees: strings must be encodable (a lone surrogate escape is
    valid JSON but not text), numbers finite."""
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
    if not _name_ok(value, max_len):
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
    # a body without the word cannot hold a stack record: most batches skip the look at each record
    return parse_batch(*parse_json(body), may_hold_stacks=b'"stack"' in body)


def parse_batch(payload: Any, record_texts: list[str] | None = None, may_hold_stacks: bool = True) -> Batch:
    """A validated Batch; record_texts (from parse_json) are stored as the records' JSON when given."""
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
    if record_texts is not None and len(record_texts) != len(metrics):
        record_texts = None
    if not _records_at_once(batch, metrics, record_texts):
        _records_one_by_one(batch, metrics)  # says which record is wrong
    if may_hold_stacks and batch.schema:
        _split_stacks(batch, metrics)
    return batch


def _split_stacks(batch: Batch, records: list) -> None:
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


_NUMBER_TYPES = frozenset({int, float})  # not bool: its type is bool


def _name_ok(value: Any, max_len: int) -> bool:
    """A name or id: 1..max_len printable characters (_text says which rule a wrong one breaks)."""
    return type(value) is str and 0 < len(value) <= max_len and value.isprintable()


def _records_at_once(batch: Batch, records: list, record_texts: list[str] | None) -> bool:
    """Validate and store the records column by column (each check runs once over a column, and
    once per distinct metric or kind name). False if any record is wrong; nothing is set then."""
    n = len(records)
    if not all(map(_IS_DICT, map(type, records))):
        return False
    if batch.schema:
        metrics = list(map(dict.get, records, repeat("metric", n)))
        kinds = list(map(dict.get, records, repeat("kind", n)))
        ts = list(map(dict.get, records, repeat("ts", n), repeat(batch.timestamp, n)))
        try:
            names_ok = (all(_name_ok(m, 64) for m in set(metrics)) and all(_name_ok(k, 32) for k in set(kinds)))
        except TypeError:  # unhashable: a list or an object where a name belongs
            return False
        if not names_ok or not set(map(type, ts)) <= _NUMBER_TYPES or (n and not 0 <= min(ts) <= max(ts) < MAX_TIMESTAMP):
            return False
        ts = list(map(float, ts))
    else:
        metrics, kinds, ts = [batch.source] * n, [LEGACY_KIND] * n, [batch.timestamp] * n
    if record_texts is None:
        data = list(map(_encode, records))
    elif all(map(str.isascii, record_texts)):
        data = record_texts
    else:  # stored text stays ASCII, as before; such a record is encoded again
        data = [t if t.isascii() else _encode(r) for t, r in zip(record_texts, records, strict=True)]
    batch.ts, batch.kinds, batch.metrics, batch.data = ts, kinds, metrics, data
    return True


def _records_one_by_one(batch: Batch, records: list) -> None:
    for index, record in enumerate(records):
        where = f"metrics[{index}]"
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
        metric = _text(_required(record, "metric", where), "metric", 64, where)
        kind = _text(_required(record, "kind", where), "kind", 32, where)
        ts = _time(record["ts"], "ts", where) if "ts" in record else batch.timestamp
    except Rejected as e:
        raise bad("bad_record", e.detail) from None
    return ts, kind, metric
