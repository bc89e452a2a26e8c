"""Property test of POST /data: whatever JSON or bytes arrive, the collector answers without a 5xx,
accepts every well-formed batch, and its stored counts move only by what an accepted batch carried."""

from __future__ import annotations

import gzip
import json
import string

from collector_payloads import envelope, original, ours, stored
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from collector.body import MAX_DEPTH

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=5), max_leaves=25)
printable = st.text(st.characters(blacklist_categories=("C", "Zl", "Zp", "Zs")) | st.just(" "), min_size=1,
                    max_size=40)
ident = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=32)


@st.composite
def valid_batches(draw) -> dict:
    ts = draw(st.floats(min_value=0, max_value=4e9))
    records = draw(st.lists(st.builds(envelope, ident, st.floats(min_value=0, max_value=4e9), st.integers(0, 10**6),
                                      st.sampled_from(["row", "summary", "event", "hist", "meta", "lost"]),
                                      value=json_values), max_size=5))
    if draw(st.booleans()):
        payload = ours(draw(st.integers(0, 2**53 - 1)), host=draw(printable), run_id=draw(printable),
                       source=draw(printable), records=records, batch_id=draw(printable),
                       dropped=draw(st.none() | st.integers(0, 10**9)))
        payload["timestamp"] = ts
        return payload
    legacy = original(draw(st.integers(0, 10**6)), ts, source=draw(printable), batch_id=draw(printable))
    legacy["metrics"] = draw(st.lists(st.dictionaries(st.text(max_size=10), json_values, max_size=4), max_size=5))
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


def _send(client, body: bytes, compress: bool):
    headers = {"Content-Type": "application/json"}
    if compress:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return client.post("/data", data=body, headers=headers)


def _check(client, payload, body: bytes, compress: bool, must_accept: bool) -> None:
    before = stored(client)
    reply = _send(client, body, compress)
    assert reply.status_code in (200, 400, 413, 415), reply.get_data(as_text=True)
    answer = reply.get_json()
    assert answer["status"] == ("ok" if reply.status_code == 200 else "error")
    after = stored(client)
    if must_accept:
        assert reply.status_code == 200, answer
    if reply.status_code == 200 and not answer["duplicate"]:
        assert after == (before[0] + 1, before[1] + len(payload["metrics"]))
    else:
        assert after == before


@FUZZ
@given(payload=valid_batches() | mutated_batches() | json_values, compress=st.booleans())
def test_arbitrary_json_never_5xx_and_counts_move_only_for_valid_batches(collector_client, payload, compress):
    _check(collector_client, payload, json.dumps(payload).encode(), compress, must_accept=False)


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@FUZZ
@given(payload=valid_batches(), compress=st.booleans())
def test_every_well_formed_batch_is_accepted(collector_client, payload, compress):
    assume(depth(payload) <= MAX_DEPTH)
    _check(collector_client, payload, json.dumps(payload).encode(), compress, must_accept=True)


@FUZZ
@given(body=st.binary(max_size=3000), compress=st.booleans())
def test_arbitrary_bytes_never_5xx(collector_client, body, compress):
    before = stored(collector_client)
    reply = _send(collector_client, body, compress)
    assert reply.status_code in (200, 400, 413, 415)
    assert reply.get_json()["status"] in ("ok", "error")
    added = len(json.loads(body)["metrics"]) if reply.status_code == 200 and not reply.get_json()["duplicate"] else None
    after = stored(collector_client)
    assert after == (before if added is None else (before[0] + 1, before[1] + added))
