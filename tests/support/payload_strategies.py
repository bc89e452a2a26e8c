"""Hypothesis strategies for POST /data bodies: any JSON value, valid batches (ours, of either schema,
and the original client's) and valid batches with one key removed or replaced; the collector's property test and the
bad-input test over HTTP both draw from them."""

from __future__ import annotations

import string

from collector_payloads import as_schema_1, envelope, original, ours
from hypothesis import strategies as st

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=5), max_leaves=25)
# inside a batch: every record's value, and a legacy batch's metrics (up to 20 values), is one of these;
# drawing them with json_values' 25 leaves was two thirds of the 10,000-request test's 140 s
record_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=6)
printable = st.text(st.characters(blacklist_categories=("C", "Zl", "Zp", "Zs")) | st.just(" "), min_size=1,
                    max_size=40)
ident = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=32)


@st.composite
def valid_batches(draw) -> dict:
    ts = draw(st.floats(min_value=0, max_value=4e9))
    records = draw(st.lists(st.builds(envelope, ident, st.floats(min_value=0, max_value=4e9), st.integers(0, 10**6),
                                      st.sampled_from(["row", "summary", "event", "hist", "meta", "lost"]),
                                      value=record_values), max_size=5))
    if draw(st.booleans()):
        payload = ours(draw(st.integers(0, 2**53 - 1)), host=draw(printable), run_id=draw(printable),
                       source=draw(printable), records=records, batch_id=draw(printable),
                       dropped=draw(st.none() | st.integers(0, 10**9)))
        payload["timestamp"] = ts
        return as_schema_1(payload) if draw(st.booleans()) else payload
    legacy = original(draw(st.integers(0, 10**6)), ts, source=draw(printable), batch_id=draw(printable))
    legacy["metrics"] = draw(st.lists(st.dictionaries(st.text(max_size=10), record_values, max_size=4), max_size=5))
    return legacy


@st.composite
def mutated_batches(draw) -> dict:
    """A valid batch with one key removed or given an arbitrary value."""
    payload = draw(valid_batches())
    key = draw(st.sampled_from(sorted(payload) + ["extra"]))
    if draw(st.booleans()) and key in payload:
        del payload[key]
    else:
        payload[key] = draw(json_values)
    return payload
