"""The dashboard chart: which field the registry picks, and the values drawn (no database needed)."""

from __future__ import annotations

import json

from collector_payloads import envelope

from collector import chart


def rows(*records: dict) -> list[dict]:
    return [{"kind": r["kind"], "ts": r["ts"], "data": json.dumps(r)} for r in records]


def test_registry_timeseries_field():
    sample = rows(envelope("sysnest", 1.0, 0, "meta", pid=5), envelope("sysnest", 2.0, 1, "row", count=3),
                  envelope("sysnest", 2.0, 1, "summary", per_sec=10.0), envelope("sysnest", 3.0, 2, "summary", per_sec=30.0))
    plot = chart.choose("sysnest", sample)
    assert (plot.field, plot.kind, plot.registered, plot.dots) == ("per_sec", "summary", True, False)
    summaries = [r for r in sample if r["kind"] == "summary"]
    assert chart.points(plot, summaries) == {"syscalls/s": [(2.0, 10.0), (3.0, 30.0)]}


def test_histogram_metric_draws_event_counts_of_its_named_hist():
    def hist(ts, name, counts):
        return envelope("cpuschedrun", ts, 1, "hist", name=name, unit="us",
                        buckets=[{"lo": 2**i, "hi": 2**(i + 1) - 1, "count": c} for i, c in enumerate(counts)])

    sample = rows(hist(1.0, "run_time", [1, 2, 3]), hist(1.0, "runq_latency", [50]), hist(2.0, "run_time", [4, 4]))
    plot = chart.choose("cpuschedrun", sample)
    assert plot.hist == "run_time" and plot.registered
    assert list(chart.points(plot, sample).values()) == [[(1.0, 6.0), (2.0, 8.0)]]


def test_scatter_metric_draws_points():
    sample = rows(*(envelope("tcpconnlat", 10.0 + i, 0, "event", latency_ms=0.5 * i) for i in range(5)))
    plot = chart.choose("tcpconnlat", sample)
    assert (plot.field, plot.dots) == ("latency_ms", True)
    svg = chart.svg(plot, chart.points(plot, sample))
    assert svg.count('class="point"') == 5 and "<polyline" not in svg


def test_scatter_split_by_status_puts_failed_events_in_their_own_series():
    sample = rows(*(envelope("tcpconnlat", 10.0 + i, 0, "event", latency_ms=float(i),
                             status="ok" if i % 3 else "failed") for i in range(6)))
    plot = chart.choose("tcpconnlat", sample)
    assert plot.split == "status" and plot.series is None
    assert chart.points(plot, sample) == {"ok": [(11.0, 1.0), (12.0, 2.0), (14.0, 4.0), (15.0, 5.0)],
                                          "failed": [(10.0, 0.0), (13.0, 3.0)]}
    assert list(chart.points(plot, sample, split=False)) == [plot.label]


def test_unregistered_metric_uses_first_numeric_field_skipping_envelope_numbers():
    sample = rows(envelope("mine", 1.0, 1, "row", pid=7, name="a", flag=True, depth=2))
    plot = chart.choose("mine", sample)
    assert (plot.field, plot.kind, plot.registered) == ("depth", "row", False)
    assert chart.choose("mine", rows(envelope("mine", 1.0, 1, "row", name="only text"))) is None


def test_registered_metric_without_its_field_falls_back():
    plot = chart.choose("sysnest", rows(envelope("sysnest", 1.0, 1, "row", count=4)))
    assert (plot.field, plot.registered) == ("count", False)


def test_series_split_lines_and_cap():
    plot = chart.Plot("bytes", "row", "bytes", series="dev")
    sample = rows(*(envelope("x", float(i), 1, "row", dev=f"sd{i % 10}", bytes=i) for i in range(40)))
    lines = chart.points(plot, sample)
    assert len(lines) == chart.MAX_SERIES and lines["sd0"] == [(0.0, 0.0), (10.0, 10.0), (20.0, 20.0), (30.0, 30.0)]
    assert chart.svg(plot, lines).count("<polyline") == chart.MAX_SERIES


def test_many_points_are_thinned_keeping_the_last():
    plot = chart.Plot("v", "row", "v")
    sample = rows(*(envelope("x", float(i), 1, "row", v=i) for i in range(10_000)))
    (pts,) = chart.points(plot, sample).values()
    assert len(pts) == chart.MAX_POINTS + 1 and pts[0] == (0.0, 0.0) and pts[-1] == (9999.0, 9999.0)
