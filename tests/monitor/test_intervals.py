"""A run's summaries added up for an opened session's headline (counts summed, rates recomputed over the
time covered, means weighted, extremes kept, states as they were last), and the final partial interval
of a session recorded before the scripts marked it."""

from __future__ import annotations

import glob
import json
import os

import pytest
from helpers import ROOT

from monitor.intervals import DISTINCT, RunTotals, mark_final_partial, nominal_interval, rule, span_text

ENVELOPE = ("metric", "ts", "kind", "interval")


def _summaries(path: str) -> list[dict]:
    with open(path) as f:
        return [r for r in map(json.loads, filter(str.strip, f)) if r["kind"] == "summary"]


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "tests", "samples", "*.ndjson"))),
                         ids=os.path.basename)
def test_every_numeric_summary_field_of_every_metric_has_a_rule(path):
    """A field without a rule is left out of the whole-session headline: a new one must be given one
    (or be a distinct count, which no total can state)."""
    for summary in _summaries(path):
        for field, value in summary.items():
            if field in ENVELOPE or isinstance(value, (dict, list, str, bool)):
                continue
            assert rule(field) is not None or field in DISTINCT, f"{os.path.basename(path)}: {field} has no rule"


def test_a_session_total_adds_counts_and_recomputes_rates_over_the_time_covered():
    # tcpconnlat: 20 and 28 connects in whole seconds, then the stop's 0.09 s with one
    conn = [{"kind": "summary", "interval": 1, "connects": 20, "failed": 1, "avg_ms": 0.05, "max_ms": 0.2, "interval_s": 1.0},
            {"kind": "summary", "interval": 2, "connects": 28, "failed": 0, "avg_ms": 0.08, "max_ms": 0.9, "interval_s": 1.001},
            {"kind": "summary", "interval": 3, "connects": 1, "failed": 0, "avg_ms": 0.5, "max_ms": 0.5, "interval_s": 0.09,
             "partial": True}]
    totals = RunTotals()
    for s in conn:
        totals.add(s)
    record = totals.record()
    assert list(record) == ["connects", "failed", "avg_ms", "max_ms", "interval_s"]     # the summaries' order
    assert record["connects"] == 49 and record["failed"] == 1 and record["max_ms"] == 0.9
    assert record["avg_ms"] == pytest.approx((20 * 0.05 + 28 * 0.08 + 0.5) / 49, abs=1e-3)
    assert record["interval_s"] == pytest.approx(2.091)
    assert totals.intervals == 3 and totals.partial == 1
    # sysnest: per_sec over the run is every syscall over every second, whatever each interval's length
    sysnest = [{"syscalls": 1000, "per_sec": 1000.0, "processes": 5, "interval_s": 1.0},
               {"syscalls": 3000, "per_sec": 1500.0, "processes": 9, "interval_s": 2.0},
               {"syscalls": 6351, "per_sec": 21170.0, "processes": 40, "interval_s": 0.3}]
    totals = RunTotals()
    for s in sysnest:
        totals.add(s)
    record = totals.record()
    assert record["per_sec"] == pytest.approx(10351 / 3.3, abs=0.01) and record["syscalls"] == 10351
    assert "processes" not in record                    # no total says how many processes the run saw


def test_states_are_as_they_were_last_and_extremes_kept():
    totals = RunTotals()
    for outstanding, low, high in ((100, 5, 50), (300, 3, 40), (200, 9, 70)):
        totals.add({"outstanding_bytes": outstanding, "min_time_ns": low, "max_time_ns": high, "frequency_hz": 99})
    assert totals.record() == {"outstanding_bytes": 200, "min_time_ns": 3, "max_time_ns": 70, "frequency_hz": 99}


def _session(final_seconds: float, marked: bool | None = None) -> list[dict]:
    meta = {"metric": "sysnest", "kind": "meta", "interval": 0, "ts": 1.0, "args": {"interval": 1.0}}
    rows = [meta]
    for i, seconds in enumerate((1.0, 1.001, final_seconds), 1):
        rows.append({"metric": "sysnest", "kind": "summary", "interval": i, "ts": 1.0 + i, "interval_s": seconds})
        rows.append({"metric": "sysnest", "kind": "row", "interval": i, "ts": 1.0 + i})
    if marked is not None:
        rows[-2]["partial"] = marked
    return rows


def test_an_old_sessions_short_final_interval_is_marked_partial_on_a_copy():
    records = _session(0.09)
    marked = mark_final_partial(records)
    assert [r.get("partial") for r in marked if r["kind"] == "summary"] == [None, None, True]
    assert "partial" not in records[-2]                  # the records read are not changed
    assert marked[:-2] == records[:-2] and marked[-1] is records[-1]
    assert nominal_interval(records) == 1.0


@pytest.mark.parametrize(("records", "why"), [
    (_session(0.95), "a final interval of 95 % is whole"),
    (_session(0.09, marked=False), "the script said it was whole"),
    (_session(0.09)[1:], "no meta: no interval to compare with"),
])
def test_what_is_not_marked(records, why):
    assert mark_final_partial(records) is records, why


def test_span_text_names_both_ends_and_the_length():
    assert span_text(0.0, 127.0).endswith("(2 min 7 s)")
    assert span_text(0.0, 0.5).endswith("(0.5 s)")
    assert span_text(0.0, 7200.0).endswith("(2 h 0 min)")
