"""A POST /data body's bytes -> JSON, checked: gunzipped within the size limit, parsed (orjson where it
agrees with json.loads, json's own scanner otherwise), no nesting deeper than MAX_DEPTH, no unpaired
surrogate, no infinite number. What the JSON must hold is payload.py's business.

Besides the value, the parser gives each record of the body's list of records ("records", or "metrics"
before schema 2: client/wire.py batch_names) as compact JSON text, so the store need not encode every
record again; and what the text alone proves about the tree (no surrogate escape, no overflowing
number, too few brackets to be too deep) spares walking it.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from itertools import repeat
from json.decoder import scanstring
from typing import Any

import orjson

from client.wire import batch_names, may_overflow, number_shapes
from collector.rejections import Rejected, bad

MAX_DEPTH = 32  # containers inside containers; a hist record is 5 deep


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
# numbers are judged by their shapes (client/wire.py number_shapes: every digit 0): an infinite one, and
_LONG_INTEGER = b"0" * 19  # an integer past 64 bits, which orjson reads as a float (18 digits are safe)
_IS_DICT = frozenset({dict}).__contains__
_RECORDS_KEYS = frozenset({"records", "metrics"})  # the records' key in either schema (wire.batch_names)
_RECORD_BRACKETS = MAX_DEPTH - 2  # a record is at depth 3: this many brackets in its text cannot be too deep


def parse_json(body: bytes) -> tuple[Any, list[str] | None]:
    """The body as JSON, checked for depth and text, and a JSON text for each element of its list of
    records, ready to store (None when the body is not the usual shape: the records are encoded later)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not_json", "body is not UTF-8 text") from None
    numbers = number_shapes(body)
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
        records_key = _records_key(value)
        _check_tree([(item, 2) for key, item in value.items() if key != records_key])
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
    records = value.get(_records_key(value)) if type(value) is dict else None
    if type(records) is not list or not all(map(_IS_DICT, map(type, records))):
        return value, None
    return value, [encoded.decode() for encoded in map(orjson.dumps, records)]


def _records_key(payload: dict) -> str:
    return batch_names(payload.get("schema"))[1]


def _scan_payload(text: str) -> tuple[dict, list[str] | None]:
    """json.loads for a top-level object (json's own scanner), with the stored text of each record of its
    list of records: for the bodies orjson does not take (long integers, or something wrong). Raises
    ValueError/IndexError/StopIteration on anything unusual; the caller then asks json.loads."""
    i = _WHITESPACE.match(text, 0).end()
    if text[i] != "{":
        raise ValueError("not an object")
    payload: dict = {}
    texts: dict[str, list[str]] = {}  # per key that may hold the records (which one does: the schema's)
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
            if key in _RECORDS_KEYS and text[i] == "[":
                payload[key], texts[key], i = _scan_list(text, i)
            else:
                payload[key], i = _scan_value(text, i)
                texts.pop(key, None)  # a later value of the key replaces an earlier one, as in json.loads
            i = _WHITESPACE.match(text, i).end()
            if text[i] == "}":
                i += 1
                break
            if text[i] != ",":
                raise ValueError("expected ',' or '}'")
            i = _WHITESPACE.match(text, i + 1).end()
    if _WHITESPACE.match(text, i).end() != len(text):
        raise ValueError("extra data")
    return payload, texts.get(_records_key(payload))


def _stored_text(record: Any) -> str:
    """A record's text as every record is stored: compact and ASCII, whatever spacing and escapes it was
    sent with (the cgroup query finds a record by its text `"cgroup":"PATH"` before parsing it: a batch
    sent as `"cgroup": "/x"` or `"\\/x"` and stored as sent was missing from /api/records?cgroup=/x).
    ValueError on an infinite number: json.loads then decides."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _scan_list(text: str, i: int) -> tuple[list, list[str], int]:
    """The list starting at text[i] == "[": its items, the stored text of each, and the index after it."""
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
        texts.append(_stored_text(item))
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
    if may_overflow(numbers):
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
