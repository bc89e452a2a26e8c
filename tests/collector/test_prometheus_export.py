"""/metrics exports the measurements: the exposition passes `promtool check metrics` (Prometheus' own
linter), and a real Prometheus server scraping the collector while a headless client posts sysnest and
cpuschedrun answers PromQL with the values stored in the collector's database."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time

import pytest
import requests
from collector_payloads import envelope, ours, prometheus_samples
from helpers import PYTHON, ROOT
from server_fixtures import IN_CI, ServerProcess, free_port

from collector import measurements, prometheus
from collector.measurements import SERIES_TOP
from collector.push_targets import PushStats, parse_targets

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(not (PROMETHEUS and PROMTOOL) and not IN_CI,
                                      reason="Debian's prometheus package is not installed (scripts/setup.sh)")
T0 = 1_750_000_000.0
# the scrape job docs/prometheus-grafana.md gives: its target and token file are replaced by the test's
EXAMPLE_CONFIG = os.path.join(ROOT, "docs", "prometheus", "prometheus.yml")
EXAMPLE_TARGET, EXAMPLE_TOKEN_FILE = "instructor-pc:5000", "/etc/prometheus/lab-collector.token"


def _hist(interval: int, counts: list[int], name: str = "run_time") -> dict:
    buckets = [{"lo": 0 if s == 1 else 1 << (s - 1), "hi": (1 << s) - 1, "count": c} for s, c in enumerate(counts, 1)]
    return envelope("cpuschedrun", T0 + interval, interval, "hist", name=name, unit="us", buckets=buckets)


def promtool_check(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


@needs_prometheus
def test_exposition_passes_promtool_and_holds_the_records(collector_client):
    c = collector_client
    assert c.post("/data", json=ours(0)).status_code == 200            # sysnest summaries: per_sec 500, 501
    assert c.post("/data", json=ours(1)).status_code == 200
    hists = [_hist(1, [3, 1]), _hist(2, [2, 0, 5]), _hist(2, [7], name="runq_latency")]
    assert c.post("/data", json=ours(0, source="cpuschedrun", records=hists[:1])).status_code == 200
    text = c.get("/metrics").get_data(as_text=True)                   # a scrape in between: sums go on from it
    assert c.post("/data", json=ours(1, source="cpuschedrun", records=hists[1:])).status_code == 200
    events = [envelope("tcpconnlat", T0 + 1, 1, "event", latency_ms=v, comm="curl") for v in (0.5, 3.7, 100.0)]
    assert c.post("/data", json=ours(0, source="tcpconnlat", records=events)).status_code == 200
    rows = [envelope("offcpu", T0, 1, "row", comm=f"p{i}", total_ms=float(i + 1)) for i in range(SERIES_TOP + 5)]
    assert c.post("/data", json=ours(0, source="offcpu", records=rows)).status_code == 200

    text = c.get("/metrics").get_data(as_text=True)
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    samples = prometheus_samples(text)
    host = 'host="lab-pc-01"'
    assert samples[f"profiler_sysnest_syscalls_per_second{{{host}}}"] == 501.0   # the newest interval's
    assert f"profiler_sysnest_syscalls_per_second{{{host}}} 501.0 {int((T0 + 1) * 1000)}" in text  # at its time
    run_time = {k: v for k, v in samples.items() if k.startswith("profiler_cpuschedrun_run_time_seconds_bucket")}
    assert run_time == {f'profiler_cpuschedrun_run_time_seconds_bucket{{{host},le="1e-06"}}': 5.0,
                        f'profiler_cpuschedrun_run_time_seconds_bucket{{{host},le="3e-06"}}': 6.0,
                        f'profiler_cpuschedrun_run_time_seconds_bucket{{{host},le="7e-06"}}': 11.0,
                        f'profiler_cpuschedrun_run_time_seconds_bucket{{{host},le="+Inf"}}': 11.0}
    assert samples[f'profiler_cpuschedrun_runq_latency_seconds_bucket{{{host},le="+Inf"}}'] == 7.0
    # events: log2 slots of us (le 2^s - 1 us) whatever the field's unit, exact sum and count
    assert samples[f'profiler_tcpconnlat_latency_seconds_bucket{{{host},le="1e-06"}}'] == 0.0
    assert samples[f'profiler_tcpconnlat_latency_seconds_bucket{{{host},le="0.000255"}}'] == 0.0
    assert samples[f'profiler_tcpconnlat_latency_seconds_bucket{{{host},le="0.000511"}}'] == 1.0   # 0.5 ms
    assert samples[f'profiler_tcpconnlat_latency_seconds_bucket{{{host},le="0.002047"}}'] == 1.0   # 3.7 ms above
    assert samples[f'profiler_tcpconnlat_latency_seconds_bucket{{{host},le="0.004095"}}'] == 2.0
    assert samples[f'profiler_tcpconnlat_latency_seconds_bucket{{{host},le="0.131071"}}'] == 3.0   # 100 ms
    assert samples[f"profiler_tcpconnlat_latency_seconds_count{{{host}}}"] == 3.0
    assert samples[f"profiler_tcpconnlat_latency_seconds_sum{{{host}}}"] == pytest.approx(0.1042)
    # per process: the top SERIES_TOP names, the rest summed into one label value
    offcpu = {k: v for k, v in samples.items() if k.startswith("profiler_offcpu_total_seconds")}
    assert len(offcpu) == SERIES_TOP + 1
    assert offcpu[f'profiler_offcpu_total_seconds{{comm="other",{host}}}'] == pytest.approx(sum(range(1, 6)) / 1e3)
    assert sum(offcpu.values()) == pytest.approx(sum(range(1, SERIES_TOP + 6)) / 1e3)
    assert samples["collector_batches_total"] == 6                    # the collector's own health, alongside


@needs_prometheus
def test_push_families_pass_promtool():
    """The push targets' counts (collector/pusher.py), as /metrics appends them."""
    targets = parse_targets([{"kind": "otlp", "url": "http://otel:4318"}, {"kind": "pyroscope", "url": "http://p"}])
    text = prometheus.render_push([PushStats(targets[0], sent=3, last_success=T0), PushStats(targets[1], failures=2)])
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    samples = prometheus_samples(text)
    assert samples['collector_push_profiles_sent_total{target="otlp-1",kind="otlp"}'] == 3
    assert samples['collector_push_failures_total{target="pyroscope-2",kind="pyroscope"}'] == 2


def test_many_hosts_read_together_each_newest_run_and_interval(collector_client, monkeypatch):
    """The grouped reads: every host's newest run alone, each its own newest interval and sums, also when a
    stream's backlog takes several reads (READ_CHUNK made tiny here)."""
    monkeypatch.setattr(measurements, "READ_CHUNK", 2)
    c = collector_client
    for h in range(3):
        host = f"pc-{h}"
        old = [envelope("sysnest", T0 - 100, 1, "summary", per_sec=1.0)]
        assert c.post("/data", json=ours(0, host=host, run_id="old", records=old)).status_code == 200
        summaries = [envelope("sysnest", T0 + i, i + 1, "summary", per_sec=100.0 * h + i) for i in range(4)]
        assert c.post("/data", json=ours(0, host=host, run_id="new", records=summaries)).status_code == 200
        events = [envelope("tcpconnlat", T0 + i, 0, "event", latency_ms=1.0 + h) for i in range(h + 4)]
        assert c.post("/data", json=ours(0, host=host, run_id="new", source="tcpconnlat",
                                         records=events[:3])).status_code == 200
        samples = prometheus_samples(c.get("/metrics").get_data(as_text=True))   # a scrape between two batches
        assert c.post("/data", json=ours(1, host=host, run_id="new", source="tcpconnlat",
                                         records=events[3:])).status_code == 200
    odd = [envelope("tcpconnlat", T0, 0, "event", latency_ms=v) for v in ("slow", True, None, -1.0, [2])]
    assert c.post("/data", json=ours(2, host="pc-0", run_id="new", source="tcpconnlat", records=odd)).status_code == 200
    assert c.post("/data", json=ours(0, host="pc-odd", source="tcpconnlat", records=odd)).status_code == 200
    reply = c.get("/metrics")
    assert reply.status_code == 200
    samples = prometheus_samples(reply.get_data(as_text=True))
    assert not [k for k in samples if 'host="pc-odd"' in k and k.startswith("profiler_")]   # no number: no histogram
    for h in range(3):
        label = f'host="pc-{h}"'
        assert samples[f"profiler_sysnest_syscalls_per_second{{{label}}}"] == 100.0 * h + 3
        assert samples[f"profiler_tcpconnlat_latency_seconds_count{{{label}}}"] == h + 4
        assert samples[f"profiler_tcpconnlat_latency_seconds_sum{{{label}}}"] == pytest.approx((h + 4) * (1.0 + h) / 1e3)


def histogram_quantile(q: float, buckets: dict[str, float]) -> float:
    """PromQL's histogram_quantile over one classic histogram's cumulative {le: count} (promql/quantile.go,
    bucketQuantile): the first bucket whose count reaches q x total, linear between its lower and upper
    bound; the +Inf bucket answers the highest finite bound."""
    bounds = sorted((float(le), count) for le, count in buckets.items())
    rank = q * bounds[-1][1]
    b = next(i for i, (_le, count) in enumerate(bounds) if count >= rank)
    if b == len(bounds) - 1:
        return bounds[-2][0]
    start, below = (bounds[b - 1] if b else (0.0, 0.0))
    end, count = bounds[b]
    return start + (end - start) * (rank - below) / (count - below)


def test_histogram_quantile_resolves_fast_events(collector_client):
    """tcpconnlat's ~50 us loopback connects (its latency_ms field): PromQL's quantiles from the exported
    buckets come within a factor of 2 of the events' own (a first bucket of 1 ms read them as 0.5-1 ms)."""
    latencies_ms = [0.030 + 0.0004 * i for i in range(100)]   # 30-70 us
    events = [envelope("tcpconnlat", T0 + 1, 1, "event", latency_ms=v, comm="curl") for v in latencies_ms]
    assert collector_client.post("/data", json=ours(0, source="tcpconnlat", records=events)).status_code == 200
    samples = prometheus_samples(collector_client.get("/metrics").get_data(as_text=True))
    prefix = 'profiler_tcpconnlat_latency_seconds_bucket{host="lab-pc-01",le="'
    buckets = {k[len(prefix):-2]: v for k, v in samples.items() if k.startswith(prefix)}
    for q in (0.1, 0.5, 0.9, 0.99):
        true = sorted(latencies_ms)[int(q * len(latencies_ms))] / 1e3
        estimate = histogram_quantile(q, buckets)
        print(f"q{q}: {estimate * 1e6:.1f} us, the events' {true * 1e6:.1f} us")
        assert true / 2 <= estimate <= true * 2


def example_scrape_config(tmp_path, collector_port: int, token: str) -> str:
    """docs/prometheus/prometheus.yml as a lab would use it, with the collector's address, the token's
    file (the token written there, 0600) and, for a test, a scrape every second."""
    token_file = tmp_path / "lab-collector.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    with open(EXAMPLE_CONFIG) as f:
        text = f.read()
    for documented, used in ((EXAMPLE_TARGET, f"127.0.0.1:{collector_port}"), (EXAMPLE_TOKEN_FILE, str(token_file)),
                             ("15s", "1s")):
        assert documented in text, documented
        text = text.replace(documented, used)
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    return str(config)


def read_tokens_file(tmp_path, token: str) -> str:
    """The collector's --read-tokens-file naming Prometheus' token."""
    path = tmp_path / "read-tokens.txt"
    path.write_text(f"prometheus {token}\n")
    path.chmod(0o600)
    return str(path)


@needs_prometheus
def test_example_scrape_config_passes_promtool(tmp_path):
    config = example_scrape_config(tmp_path, 5000, "a-read-token")
    checked = subprocess.run([PROMTOOL, "check", "config", config], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with open(EXAMPLE_CONFIG) as f:
        assert "credentials_file: " + EXAMPLE_TOKEN_FILE in f.read()


def _query(base: str, promql: str, at: float) -> list[dict]:
    answer = requests.get(f"{base}/api/v1/query", params={"query": promql, "time": repr(at)}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _sample_time(base: str, promql: str, newest: float, tmp_path) -> float:
    """The time of the newest sample Prometheus holds at `newest`, once it holds the one of that time."""
    deadline = time.monotonic() + 60
    while True:
        found = _query(base, f"max(timestamp({promql}))", newest)
        at = float(found[0]["value"][1]) if found else 0.0
        if abs(at - newest) < 1e-3 or time.monotonic() > deadline:
            if at == 0.0:
                raise AssertionError((tmp_path / "prometheus.log").read_text()[-2000:])
            return at
        time.sleep(0.5)


@needs_prometheus
@pytest.mark.bpf
@pytest.mark.slow
def test_real_prometheus_returns_the_stored_values(tmp_path):
    """Scraped as docs/prometheus/prometheus.yml says, with a read token: once the collector has tokens,
    /metrics needs one (collector/guard.py)."""
    db = tmp_path / "lab.db"
    token = "prometheus-reads-7f3c9e2a"
    # a read token only: the headless client posts without one, Prometheus reads with it
    server = ServerProcess("--db", str(db), "--read-tokens-file", read_tokens_file(tmp_path, token))
    prom_port = free_port()
    config = example_scrape_config(tmp_path, server.port, token)
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))  # noqa: SIM115
    base = f"http://127.0.0.1:{prom_port}"
    try:
        assert requests.get(server.url + "/metrics", timeout=10).status_code == 401   # the token is needed
        client = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                                 "--metric", "cpuschedrun", "--arg", "sysnest.interval=0.5",
                                 "--arg", "cpuschedrun.interval=0.5", "--duration", "5", "--server", server.url,
                                 "--state-dir", str(tmp_path / "state")],
                                cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert client.returncode == 0, client.stderr
        with sqlite3.connect(db) as conn:
            stored = conn.execute("SELECT s.host, s.source, r.kind, r.ts, r.data FROM records r "
                                  "JOIN streams s ON s.id = r.stream WHERE r.kind IN ('summary', 'hist') "
                                  "ORDER BY r.id").fetchall()
        summaries = [(host, ts, json.loads(d)) for host, src, kind, ts, d in stored if src == "sysnest"]
        hists = [(host, ts, json.loads(d)) for host, src, kind, ts, d in stored if kind == "hist"]
        assert summaries and hists
        host, last_ts, last_summary = summaries[-1]
        hist_ts = max(ts for _h, ts, _d in hists)

        # Prometheus scrapes after the client's last batch: wait until it holds the newest interval
        gauge = f'profiler_sysnest_syscalls_per_second{{host="{host}"}}'
        assert _sample_time(base, gauge, last_ts, tmp_path) == pytest.approx(last_ts, abs=1e-3)
        found = _query(base, gauge, last_ts)
        assert float(found[0]["value"][1]) == pytest.approx(last_summary["per_sec"], rel=1e-9)
        # an earlier interval too, at its own time, when a scrape came while it was the newest
        for _h, ts, summary in summaries[:-1]:
            held = _query(base, f"timestamp({gauge})", ts)
            if held and abs(float(held[0]["value"][1]) - ts) < 1e-3:
                assert float(_query(base, gauge, ts)[0]["value"][1]) == pytest.approx(summary["per_sec"], rel=1e-9)

        # histogram: every le bucket equals the database's cumulative slot counts over the run
        expected: dict[str, dict[float, float]] = {}
        for _h, _ts, record in hists:
            slots = expected.setdefault(record["name"], {})
            for b in record["buckets"]:
                slots[b["hi"]] = slots.get(b["hi"], 0) + b["count"]
        bucket = f'profiler_cpuschedrun_run_time_seconds_bucket{{host="{host}"}}'
        assert _sample_time(base, bucket, hist_ts, tmp_path) == pytest.approx(hist_ts, abs=1e-3)
        got = _query(base, bucket, hist_ts)
        buckets = {g["metric"]["le"]: float(g["value"][1]) for g in got}
        his = sorted(expected["run_time"])
        running = 0.0
        for hi in his:
            running += expected["run_time"][hi]
            assert buckets[repr(hi / 1e6)] == running, (hi, buckets)
        assert buckets["+Inf"] == running > 0
        queue = _query(base, f'profiler_cpuschedrun_runq_latency_seconds_bucket{{host="{host}",le="+Inf"}}', hist_ts)
        assert float(queue[0]["value"][1]) == sum(expected["runq_latency"].values())
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        server.stop()
