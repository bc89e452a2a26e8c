"""Property test of POST /data: whatever JSON or bytes arrive, the collector answers without a 5xx,
accepts every well-formed batch, and its stored counts move only by what an accepted batch carried."""

from __future__ import annotations

import gzip
import json

import pytest
from collector_payloads import records_of, stored
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from payload_strategies import json_values, mutated_batches, valid_batches

from collector.body import MAX_DEPTH

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])

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
        assert after == (before[0] + 1, before[1] + len(records_of(payload)))
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
    added = len(records_of(json.loads(body))) if reply.status_code == 200 and not reply.get_json()["duplicate"] else None
    after = stored(collector_client)
    assert after == (before if added is None else (before[0] + 1, before[1] + added))
