"""The POST /data contract (docs/collector.md) as msgspec types, and the usual body read by them: the
payload's keys typed and bounded, and each record's envelope (metric, kind, ts) checked, in msgspec's C
decoder as it reads the JSON; each record's JSON text is cut out of the body as sent, which is what the
store keeps when it is already compact ASCII. A compact body of flat records (no list or object inside a
record: most metrics' rows and summaries) is read in one pass, any other usual body in two.

decode() gives None for any body it does not prove valid (a wrong or missing key, an unusual shape, a
text that needs a closer look): payload.py's checks then decide and name what is wrong with the messages
they always gave. msgspec's own would name the first error in the text's order rather than the
contract's, and it knows no printable rule, no depth bound and no infinite number hidden in a record.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from operator import attrgetter
from typing import Annotated, Any, Literal, NamedTuple

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from client.wire import SCHEMAS, batch_names, may_overflow, number_shapes
from collector.body import MAX_DEPTH
from collector.stacks import ascii_json

MAX_SEQUENCE = 2**53 - 1  # the largest integer every JSON implementation keeps exact
MAX_RECORDS = 100_000  # per batch
MAX_TIMESTAMP = 1e11  # year 5138: anything later is a unit mistake (ms, ns)
# the longest names, in characters: the stream's and batch's names (host, its own), a record's
NAME_LEN, HOST_LEN, METRIC_LEN, KIND_LEN = 128, 255, 64, 32

Name = Annotated[str, Meta(min_length=1, max_length=NAME_LEN)]
Count = Annotated[int, Meta(ge=0, le=MAX_SEQUENCE)]  # not bool, not 3.0: msgspec's int is strict
Time = Annotated[float, Meta(ge=0, lt=MAX_TIMESTAMP)]  # an integer too, as a float


class Envelope(Struct):
    """What the collector reads of a record of schema 1 or 2 (docs/ndjson.md); its other keys stay in
    its text, unread. metric and kind are required (decode checks: a record of the original client,
    which needs neither, is read by this type too when its batch is read in one pass)."""
    metric: Annotated[str, Meta(min_length=1, max_length=METRIC_LEN)] | UnsetType = UNSET
    kind: Annotated[str, Meta(min_length=1, max_length=KIND_LEN)] | UnsetType = UNSET
    ts: Time | UnsetType = UNSET  # the batch's timestamp when left out


class AnyObject(Struct):
    """A record of the original client: any object."""


class Payload(Struct, forbid_unknown_fields=True):
    """Every key of the three payloads, each as its contract types it; which are required goes with the
    schema (decode). A key none of them knows sends the body to payload.py's checks, which ignore it
    but walk its value."""
    schema: Literal[SCHEMAS] | UnsetType = UNSET  # 1 or 2; left out by the original client
    timestamp: Time | UnsetType = UNSET
    metric: Name | UnsetType = UNSET  # schema 2
    source_script: Name | UnsetType = UNSET  # schema 1 and the original client
    batch_id: Name | UnsetType = UNSET
    sequence: Count | UnsetType = UNSET
    host: Annotated[str, Meta(min_length=1, max_length=HOST_LEN)] | UnsetType = UNSET
    run_id: Name | UnsetType = UNSET
    dropped: Count = 0
    records: list[Raw] | UnsetType = UNSET  # schema 2
    metrics: list[Raw] | UnsetType = UNSET  # schema 1 and the original client


class FlatPayload(Payload, forbid_unknown_fields=True):
    """A payload whose records are read in the same pass, their texts cut out of the body apart (decode)."""
    records: list[Envelope] | UnsetType = UNSET
    metrics: list[Envelope] | UnsetType = UNSET


def _records_decoder(schema: int) -> msgspec.json.Decoder:
    """The body read a second time for its records only, each as its schema makes it (0: any object)."""
    records_key = batch_names(schema or None)[1]
    item = Envelope if schema else AnyObject
    return msgspec.json.Decoder(msgspec.defstruct(f"RecordsOfSchema{schema}", [(records_key, list[item])]))


def _required(schema: int) -> tuple[str, ...]:
    metric_key, records_key = batch_names(schema or None)
    ours = ("host", "run_id") if schema else ()
    return ("timestamp", metric_key, "batch_id", "sequence", *ours, records_key)


_PAYLOAD, _FLAT_PAYLOAD = msgspec.json.Decoder(Payload), msgspec.json.Decoder(FlatPayload)
_RECORDS = {schema: _records_decoder(schema) for schema in (0, *SCHEMAS)}
_REQUIRED = {schema: _required(schema) for schema in (0, *SCHEMAS)}
# a record's text with whitespace or an escape may not be the text the store keeps (compact, ASCII, each
# string as json.dumps writes it); one without either is, up to how its numbers are written
_SPACE_OR_ESCAPE = (" ", "\t", "\n", "\r", "\\")
_SPACE_OR_ESCAPE_BYTES = tuple(map(str.encode, _SPACE_OR_ESCAPE))
_RECORD_BRACKETS = MAX_DEPTH - 2  # a record is at depth 3: this many brackets in its text cannot be too deep
_metric, _kind, _ts = attrgetter("metric"), attrgetter("kind"), attrgetter("ts")


class Decoded(NamedTuple):
    payload: Payload
    schema: int  # 0 for the original client's
    metrics: list[str]  # per record (schema 0: empty, the batch's)
    kinds: list[str]
    ts: list[float | UnsetType]  # UNSET: the batch's timestamp
    texts: list[str]  # each record's JSON text, as stored
    records: Records  # each record as a dict, decoded when asked for


class Records:
    """A batch's records as dicts, each decoded from its stored text when asked for: the store needs only
    the texts, the trend line a few records and stacks.py the stack records."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts

    def __len__(self) -> int:
        return len(self._texts)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return msgspec.json.decode(self._texts[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(msgspec.json.decode, self._texts)


def decode(body: bytes) -> Decoded | None:
    """The body's payload and records, valid by the contract; None: payload.py's checks decide."""
    if not body.isascii():  # a record's text is stored ASCII; msgspec checks no UTF-8 in what it skips
        return None
    compact = not any(map(body.__contains__, _SPACE_OR_ESCAPE_BYTES))
    if compact and _flat(body):
        decoded = _decode_flat(body)
        if decoded is not None:
            return decoded
    return _decode_in_two_passes(body, compact)


def _flat(body: bytes) -> bool:
    """The body's only list is its records' and no object is a key's value: flat records, depth 3.
    (Brackets inside strings only make it say False.)"""
    start = body.find(b"[")
    return (start >= 0 and body.find(b"[", start + 1) < 0 and body.find(b"]") == body.rfind(b"]")
            and b":{" not in body)


def _decode_flat(body: bytes) -> Decoded | None:
    """A compact body of flat records in one pass: payload and envelopes read by msgspec, each record's
    text cut out of the list's text at "},{" (a record's end and the next one's start, in compact JSON)."""
    read = _payload(_FLAT_PAYLOAD, body)
    if read is None:
        return None
    payload, schema, records = read
    listed = body[body.find(b"[") + 1:body.rfind(b"]")]
    # a string holding "},{" would make one part more than there are records
    texts = listed.replace(b"},{", b"}\n{").decode().split("\n") if records else []
    if len(texts) != len(records) or may_overflow(number_shapes(listed)):
        return None
    return _decoded(payload, schema, records, texts)


def _decode_in_two_passes(body: bytes, compact: bool) -> Decoded | None:
    """Any usual body: the payload with each record's text (msgspec.Raw) in one pass, the records' envelopes
    in a second."""
    read = _payload(_PAYLOAD, body)
    if read is None:
        return None
    payload, schema, raws = read
    joined = b"\n".join(raws)
    # the payload's numbers are typed, the records' others are not read: 1e999 there would be inf. Only
    # the records are looked at: a batch_id of hex digits such as "...0e123..." looks like an exponent
    if may_overflow(number_shapes(joined)):
        return None
    records = _read(_RECORDS[schema], body)
    if records is None:
        return None
    records = getattr(records, batch_names(schema or None)[1])
    texts = _texts(raws, joined, compact)
    if not _shallow(body, texts):
        return None
    return _decoded(payload, schema, records, texts)


def _read(decoder: msgspec.json.Decoder, body: bytes) -> Any:
    """What decoder reads of body; None when msgspec refuses it."""
    try:
        return decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None


def _payload(decoder: msgspec.json.Decoder, body: bytes) -> tuple[Payload, int, list] | None:
    """The payload, its schema and its list of records; None when msgspec refuses it, a key the schema
    requires is missing, a name is not printable or the records are too many."""
    payload = _read(decoder, body)
    if payload is None:
        return None
    schema = 0 if payload.schema is UNSET else payload.schema
    metric_key, records_key = batch_names(schema or None)
    other_list = "records" if records_key == "metrics" else "metrics"
    if (any(getattr(payload, key) is UNSET for key in _REQUIRED[schema])
            or getattr(payload, other_list) is not UNSET  # a list nobody reads: its values unchecked
            or not all(map(str.isprintable, _names(payload, metric_key, schema)))
            or len(getattr(payload, records_key)) > MAX_RECORDS):
        return None
    return payload, schema, getattr(payload, records_key)


def _decoded(payload: Payload, schema: int, records: list, texts: list[str]) -> Decoded | None:
    """The Decoded batch, once its records' envelopes are complete and their names printable."""
    if schema:
        metrics, kinds = list(map(_metric, records)), list(map(_kind, records))
        if UNSET in metrics or UNSET in kinds or not all(map(str.isprintable, {*metrics, *kinds})):
            return None
        ts = list(map(_ts, records))
    else:
        metrics, kinds, ts = [], [], []
    return Decoded(payload, schema, metrics, kinds, ts, texts, Records(texts))


def _names(payload: Payload, metric_key: str, schema: int) -> list[str]:
    names = [getattr(payload, metric_key), payload.batch_id]
    return names + [payload.host, payload.run_id] if schema else names


def _texts(raws: list[Raw], joined: bytes, compact: bool) -> list[str]:
    """Each record's text as the store keeps it: as sent when it is, else encoded again. joined: the
    texts joined by newlines; compact: the body holds no whitespace and no escape."""
    if compact:  # no text holds a newline: cut apart at one, in two calls instead of two per record
        return joined.decode().split("\n") if raws else []
    return [ascii_json(msgspec.json.decode(text)) if any(map(text.__contains__, _SPACE_OR_ESCAPE)) else text
            for text in map(str, map(memoryview, raws), repeat("ascii"))]


def _shallow(body: bytes, texts: list[str]) -> bool:
    """No record nests deeper than MAX_DEPTH, judged by its brackets (strings holding brackets only make
    it stricter): the whole body's, less the payload's "{", the list's "[" and each record's "{"."""
    if body.count(b"{") + body.count(b"[") - 2 - len(texts) < _RECORD_BRACKETS:
        return True
    return (max(map(str.count, texts, ["{"] * len(texts)), default=0)
            + max(map(str.count, texts, ["["] * len(texts)), default=0)) <= _RECORD_BRACKETS
