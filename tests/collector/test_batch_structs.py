"""The usual POST /data body is read by msgspec's types (collector/batch_structs.py); every other body, and
every refused one, by payload.py's checks. The two must agree: the same Batch from the same body, and a
refusal names what the checks always named (msgspec's own messages, in the text's order, never reach
a client)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from collector_payloads import as_schema_1, envelope, original, ours
from hypothesis import HealthCheck, given, settings
from payload_strategies import valid_batches

from collector import batch_structs
from collector.body import parse_json
from collector.payload import parse_batch, parse_body
from collector.rejections import Rejected


def compact(payload) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


BASE = ours(0, batch_id="b", timestamp=1_750_000_000.0)
STACK = envelope("cpuprofile", 1.0, 1, kind="stack", comm="a b", count=3,
                 frames=[{"name": "operator new(unsigned long)", "module": "libstdc++.so.6"}])
USUAL = {
    "schema 2": ours(3, timestamp=1_750_000_000.0),
    "schema 1": as_schema_1(ours(3, timestamp=1_750_000_000.0)),
    "original client": original(3, 1_750_000_000.0, batch_id="b"),
    "records without ts": {**BASE, "records": [{"metric": "m", "kind": "row", "x": [1, {"y": 2}]}]},
    "no records": {**BASE, "records": []},
    "stack records": {**BASE, "metric": "cpuprofile", "records": [STACK, {**STACK, "count": 4}]},
    "string with a space": {**BASE, "records": [envelope("m", 1.0, 1, comm="Web Content")]},
    "ids that look like huge numbers": {**BASE, "batch_id": "9e999", "run_id": "1" * 120},
    "strings holding brackets": {**BASE, "batch_id": "[b]", "records": [envelope("m", 1.0, 1, comm="a},{b:{"),
                                                                       envelope("m", 2.0, 1, comm="]")]},
}


def checked(body: bytes):
    """The Batch of payload.py's checks alone."""
    return parse_batch(parse_json(body), may_hold_stacks=b'"stack"' in body)


@pytest.mark.parametrize("payload", USUAL.values(), ids=USUAL)
def test_usual_bodies_are_read_by_the_structs_into_the_checks_batch(payload):
    for body in (compact(payload), json.dumps(payload).encode()):  # as the transport sends it, and spaced
        assert batch_structs.decode(body) is not None
        assert dataclasses.asdict(parse_body(body)) == dataclasses.asdict(checked(body))


def test_a_compact_batch_of_flat_records_is_read_in_one_pass():
    # the usual batch of most metrics (stack and hist records nest: they take two passes)
    for payload in (USUAL["schema 2"], USUAL["schema 1"], USUAL["original client"]):
        assert batch_structs._decode_flat(compact(payload)) is not None


def test_a_record_sent_spaced_or_escaped_is_stored_compact_and_ascii():
    body = b'{"schema":2,"timestamp":1,"metric":"m","batch_id":"b","sequence":0,"host":"h","run_id":"r",' \
           b'"records":[{"metric": "m", "kind":"row","cgroup":"\\/x","comm":"\\u00e9"},{"metric":"m","kind":"row"}]}'
    assert parse_body(body).data == ['{"metric":"m","kind":"row","cgroup":"/x","comm":"\\u00e9"}',
                                     '{"metric":"m","kind":"row"}']


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=valid_batches())
def test_any_valid_batch_gives_the_checks_batch(payload):
    for body in (compact(payload), json.dumps(payload).encode()):
        fast, slow = dataclasses.asdict(parse_body(body)), dataclasses.asdict(checked(body))
        # a number's text may be written as sent ("1.50") rather than as Python writes it ("1.5")
        assert list(map(json.loads, fast.pop("data"))) == list(map(json.loads, slow.pop("data")))
        assert fast == slow


# Refusals: (body, reason, detail), each detail as the checks have always given it. msgspec would name
# the first error in the text (`Expected str, got int - at $.batch_id`), here often a different one.
REFUSED = {
    "two wrong keys: the contract's first": (compact({**BASE, "sequence": "3", "batch_id": 5}), "wrong_type",
                                             "payload 'batch_id' must be a string"),
    "keys in another order": (compact({"records": [], "sequence": -1, "timestamp": "now", "schema": 2}),
                              "wrong_type", "payload 'timestamp' must be a number (unix seconds)"),
    "the first wrong record": (compact({**BASE, "records": [envelope("m", 1.0, 1), {"metric": "m", "ts": 1.0},
                                                            {"kind": "k"}]}), "bad_record", "records[1] has no 'kind'"),
    "record ts a string": (compact({**BASE, "records": [envelope("m", 1.0, 1) | {"ts": "x"}]}), "bad_record",
                           "records[0] 'ts' must be a number (unix seconds)"),
    "record ts null": (compact({**BASE, "records": [envelope("m", 1.0, 1) | {"ts": None}]}), "bad_record",
                       "records[0] 'ts' must be a number (unix seconds)"),
    "record kind too long": (compact({**BASE, "records": [envelope("m", 1.0, 1, kind="k" * 33)]}), "bad_record",
                             "records[0] 'kind' must be 1..32 printable characters"),
    "record metric not printable": (compact({**BASE, "records": [envelope("m\u200b", 1.0, 1)]}), "bad_record",
                                    "records[0] 'metric' must be 1..64 printable characters"),
    "batch_id not printable": (compact({**BASE, "batch_id": "a\nb"}), "bad_value",
                               "payload 'batch_id' must be 1..128 printable characters"),
    "host too long": (compact({**BASE, "host": "h" * 256}), "bad_value",
                      "payload 'host' must be 1..255 printable characters"),
    "schema true": (compact({**BASE, "schema": True}), "bad_value",
                    "unsupported schema (this server speaks schemas 1, 2, or none for the original client)"),
    "sequence 3.0": (compact({**BASE, "sequence": 3.0}), "wrong_type", "payload 'sequence' must be an integer"),
    "dropped -1": (compact({**BASE, "dropped": -1}), "bad_value",
                   "payload 'dropped' must be between 0 and 9007199254740991"),
    "timestamp in ms": (compact({**BASE, "timestamp": 1.7e12}), "bad_value", "payload 'timestamp' must be unix seconds"),
    "records an object": (compact({**BASE, "records": {"a": 1}}), "wrong_type", "payload 'records' must be a list"),
    "record a list (original client)": (compact({**original(0, 1.0, batch_id="b"), "metrics": [[]]}), "bad_record",
                                        "metrics[0] must be an object"),
    "a number too big in a record": (compact(BASE).replace(b'"records":[', b'"records":[{"metric":"m","kind":"k","x":1e999},'),
                                     "bad_value", "a number is out of range"),
    "a lone surrogate in a record": (compact(BASE).replace(b'"records":[', b'"records":[{"metric":"m","kind":"k","x":"\\ud800"},'),
                                     "bad_unicode", "a string holds an unpaired surrogate escape"),
    "a record too deep": (compact({**BASE, "records": [envelope("m", 1.0, 1) | {"x": json.loads("[" * 31 + "]" * 31)}]}),
                          "too_deep", "nesting deeper than 32 levels"),
    "not JSON": (b'{"schema": 2,', "not_json",
                 "body is not JSON (Expecting property name enclosed in double quotes: line 1 column 14 (char 13))"),
}


@pytest.mark.parametrize("body,reason,detail", REFUSED.values(), ids=REFUSED)
def test_a_refusal_names_what_the_checks_name(body, reason, detail):
    assert batch_structs.decode(body) is None
    with pytest.raises(Rejected) as refused:
        parse_body(body)
    assert (refused.value.status, refused.value.reason, refused.value.detail) == (400, reason, detail)


def test_a_record_at_the_depth_limit_is_taken():
    # the record is at depth 3, its 29 nested lists reach 32 ("a record too deep" above: 31 of them)
    at_limit = compact({**BASE, "records": [envelope("m", 1.0, 1) | {"x": json.loads("[" * 29 + "]" * 29)}]})
    assert batch_structs.decode(at_limit) is not None and parse_body(at_limit).n_records == 1
