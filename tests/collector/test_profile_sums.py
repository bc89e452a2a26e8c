"""A selection's stack records are summed by the database (Store.selection_stack_sums), on SQLite and
PostgreSQL: the profile is the one Python's own reading of the same records gives (summed per stack and
comm, then added, as the collector summed them before the database did), for
every shape of weight a client can send (integers whose sum passes 64 bits, floats, halves that round to
even once scaled to ns, bools, strings, nulls and missing fields that are no number, zero, negatives) and
of comm (missing, empty, a number); past the record limit the newest records are summed, as they were
read before; and a range counts back from each stream's newest stack record."""

from __future__ import annotations

import json

import pytest
from collector_payloads import ours

from collector import profiles
from collector.profiles import selection_profile
from profile_data import Profile, stack_of
from profile_data.records import weight_of

T0 = 1_750_000_000.0
FRAMES = {"a": [{"name": "main", "module": "w", "kind": "user"}, {"name": "a", "module": "w", "kind": "user"}],
          "b": [{"name": "main", "module": "w", "kind": "user"}, {"name": "b", "module": "w", "kind": "kernel"}]}
# (stack, comm, count): every weight a cpuprofile record might carry; None: no count field
CPU_WEIGHTS = [("a", "work", 5), ("a", "work", 7), ("a", "work", 0), ("a", "work", -3), ("a", "work", True),
               ("a", "work", "9"), ("a", "work", None), ("a", 42, 4), ("a", "", 6), ("a", None, 2),
               ("b", "work", 1.5), ("b", "work", 2.0), ("b", "work", 5), ("b", "other", 2.0),
               ("b", "big", 2**62), ("b", "big", 2**62), ("b", "big", 2**62 - 1), ("b", "neg", -(2**62)),
               ("b", "neg", -(2**62)), ("b", "neg", -(2**62)), ("b", "false", False), ("b", "null", "null")]
# offcpu's total_ms, scaled to ns and rounded half to even: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2
OFF_WEIGHTS = [0.0000025, 0.0000035, -0.0000025, 1.25, 3, 3000000000.0000005, 4503599627.370497, 0.0004995, True,
               "7", None, 2**40]


def cpu_record(n: int, stack: str, comm: object, count: object) -> dict:
    record = {"metric": "cpuprofile", "ts": T0 + n // 4, "kind": "stack", "interval": n // 4 + 1, "pid": 7}
    if comm is not None:
        record["comm"] = comm
    if count is not None:
        record["count"] = None if count == "null" else count
    return {**record, "frames": FRAMES[stack]}


def off_record(n: int, total_ms: object) -> dict:
    record = {"metric": "offcpu", "ts": T0 + n // 3, "kind": "row", "level": "stack", "interval": n // 3 + 1,
              "comm": "sleeper" if n % 2 else "waiter", "user_frames": [f"f{n % 3} [app]", "main [app]"],
              "kernel_frames": ["schedule"]}
    return record if total_ms is None else {**record, "total_ms": total_ms}


def post(client, source: str, host: str, records: list[dict], per_batch: int = 4) -> None:
    for seq, start in enumerate(range(0, len(records), per_batch)):
        body = ours(seq, host=host, run_id="r", source=source, records=records[start:start + per_batch])
        answer = client.post("/data", data=json.dumps(body), content_type="application/json")
        assert answer.status_code == 200, answer.get_json()


def from_records(records: list[dict], field: str, unit: str) -> Profile:
    """The records' profile as Python reads them: each record's weight summed per stack and comm (a
    negative one too), each sum then added."""
    sums: dict[tuple, float] = {}
    stacks = {}
    for record in records:
        value = weight_of(record, field, unit)
        if value:
            key = (stack_of(record), record.get("comm"))
            sums[key] = sums.get(key, 0) + value
            stacks[key] = key[0]
    profile = Profile(unit)
    for key, value in sums.items():
        profile.add(stacks[key], value)
    return profile


def typed(profile) -> dict:
    """Each stack's weight with its type: an int sum must stay an int, a float one a float."""
    return {stack: (type(weight), weight) for stack, weight in profile.stacks.items()}


@pytest.fixture
def store(collector_app):
    return collector_app.extensions["collector"].store


def test_sums_are_pythons_for_every_weight_and_comm(collector_client, store):
    records = [cpu_record(n, *weights) for n, weights in enumerate(CPU_WEIGHTS)]
    post(collector_client, "cpuprofile", "pc-a", records[:12])
    post(collector_client, "cpuprofile", "pc-b", records[12:])
    result = selection_profile(store, "cpuprofile", range_text="1h")
    expected = from_records(records, "count", "samples")
    assert typed(result.profile) == typed(expected)
    assert result.profile.total == expected.total
    big = [w for stack, w in result.profile.stacks.items() if stack[0].name == "big"]
    assert big == [3 * 2**62 - 1]  # past 2**63: exact, an int
    assert (result.records, result.truncated, result.since, result.until) == (len(records), False, T0, T0 + 5)


def test_time_weights_are_rounded_half_to_even_in_ns(collector_client, store):
    records = [off_record(n, total_ms) for n, total_ms in enumerate(OFF_WEIGHTS)]
    post(collector_client, "offcpu", "pc-a", records)
    result = selection_profile(store, "offcpu", range_text="run")
    expected = from_records(records, "total_ms", "ns")
    assert result.profile.unit == "ns" and typed(result.profile) == typed(expected)
    assert round(0.0000025 * 1e6) == 2 and round(0.0000035 * 1e6) == 4  # what the sums had to match


def test_past_the_limit_the_newest_records_are_summed(collector_client, store, monkeypatch):
    # 4 intervals of 3 records each, an interval's records at one time: the limit cuts through interval 2
    records = [cpu_record(n, "ab"[n % 2], f"c{n % 3}", 10 + n) for n in range(16) if n % 4 != 3]
    post(collector_client, "cpuprofile", "pc-a", records, per_batch=3)
    monkeypatch.setattr(profiles, "MAX_RECORDS", 5)
    result = selection_profile(store, "cpuprofile")
    newest = records[-5:]  # posted in time order: the newest 5 are the last (the later of interval 2's too)
    assert typed(result.profile) == typed(from_records(newest, "count", "samples"))
    assert (result.records, result.truncated, result.since, result.until) == (5, True, T0 + 2, T0 + 3)
    monkeypatch.setattr(profiles, "MAX_RECORDS", len(records))
    whole = selection_profile(store, "cpuprofile")
    assert (whole.records, whole.truncated) == (len(records), False)
    assert typed(whole.profile) == typed(from_records(records, "count", "samples"))


def test_a_range_counts_back_from_each_streams_newest_stack_record(collector_client, store):
    post(collector_client, "cpuprofile", "pc-a", [cpu_record(n, "a", "w", 1) for n in range(8)])  # T0 .. T0+1
    late = [{**cpu_record(n, "b", "w", 1), "ts": T0 + 100 + n // 4} for n in range(8)]  # T0+100 .. T0+101
    post(collector_client, "cpuprofile", "pc-b", late)
    a, b = store.selection_streams("cpuprofile", ("pc-a",))[0], store.selection_streams("cpuprofile", ("pc-b",))[0]
    assert store.newest_stack_times([a, b]) == {a: T0 + 1, b: T0 + 101}
    assert store.newest_stack_times([a, b], until=T0 + 100.5) == {a: T0 + 1, b: T0 + 100}
    assert store.newest_stack_times([a, b], until=T0 - 1) == {}
    result = selection_profile(store, "cpuprofile", range_text="50s")  # from the selection's newest on
    assert (result.records, result.since, result.until) == (8, T0 + 100, T0 + 101)
