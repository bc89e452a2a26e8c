"""A metric's records (bcctool/ndjson.py, orjson where it can) read back as json.dumps's would, for any
JSON-shaped record and for the values json.dumps writes through default=str."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bcctool import ndjson

leaves = (st.none() | st.booleans() | st.integers(-(2 ** 80), 2 ** 80) | st.floats(allow_nan=False, allow_infinity=False)
          | st.text())
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(max_size=8) | st.integers(-9, 9), inner, max_size=4), max_leaves=20)
records = st.dictionaries(st.text(max_size=12), values, max_size=8)


def as_json(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), default=str)


@given(records)
def test_any_finite_record_reads_back_as_json_dumps_writes_it(record):
    line = ndjson.encode(record)
    assert "\n" not in line
    assert json.loads(line) == json.loads(as_json(record))


Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Point:
    x: int


def test_what_json_writes_through_default_str_is_written_the_same():
    record = {"pair": Pair(1, (2, 3)), "point": Point(4), "at": datetime.datetime(2026, 11, 29, 15, 0),
              7: "an int key", "big": 2 ** 70, "comm": "ünï", "f": 1e16}
    assert json.loads(ndjson.encode(record)) == json.loads(as_json(record))
    assert ndjson.encode({"pair": Pair(1, 2), "point": Point(4)}) == '{"pair":[1,2],"point":"Point(x=4)"}'


def test_a_float_that_is_not_finite_is_null_as_json_requires():
    line = ndjson.encode({"a": float("inf"), "b": [float("nan")]})
    assert json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in {line}")) == {"a": None, "b": [None]}


def test_a_stdout_that_is_not_utf8_gets_json_escapes(monkeypatch):
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    assert ndjson.encode({"comm": "ünï"}) == '{"comm":"\\u00fcn\\u00ef"}'


@pytest.mark.skipif(ndjson.orjson is None, reason="orjson is in requirements.txt: the venv has it")
def test_orjson_writes_the_records_in_the_venv():
    assert ndjson.orjson.dumps({"a": 1}) == b'{"a":1}'
