#!/usr/bin/env python3
"""Page and API latency of the collector's dashboard over a lab's hour: 50 hosts x 10 metrics, each
posting an interval every 10 s for an hour (the metric's recorded sample's first interval, at most 6
records, restamped), into SQLite in-process; then the overview (/ and /api/overview) and a sysnest
stream page over its last hour, each timed best-of and median of 5 (target <= 300 ms). Part of
`make bench` (bench/suite.py); by hand it prints its result as JSON:

    .venv/bin/python bench/dashboard_pages.py [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid

import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from client.wire import batch_head  # noqa: E402 - the checkout's own packages
from collector import create_app  # noqa: E402

METRICS = ("sysnest", "tcpconnlat", "netpack", "pagefault", "cpuschedrun", "biopwise", "offcpu", "compmem",
           "schparm", "cacheraw")
INTERVAL_S, HOUR_S, PER_INTERVAL, PER_BATCH = 10.0, 3600.0, 6, 30
TARGET_MS = 300
REPS = 5


def interval_records(metric: str) -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", f"{metric}.ndjson")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    body = [r for r in records if r.get("kind") != "meta"]
    first = body[0].get("interval")
    return [r for r in body if r.get("interval") == first][:PER_INTERVAL] or body[:PER_INTERVAL]


def fill(client, hosts: int, start: float) -> int:
    """Post the hour; returns the records stored."""
    n = 0
    intervals = int(HOUR_S / INTERVAL_S)
    for metric in METRICS:
        template = interval_records(metric)
        for h in range(hosts):
            host, records, seq = f"lab-pc-{h:02d}", [], 0
            for i in range(intervals):
                ts = start + i * INTERVAL_S
                records += [{**r, "ts": ts, "interval": i + 1} for r in template]
                if (i + 1) % PER_BATCH == 0 or i == intervals - 1:
                    head = batch_head(source=metric, batch_id=uuid.uuid4().hex, sequence=seq, host=host,
                                      run_id="run-bench", dropped=None, timestamp=ts)
                    body = {**head, "metrics": records}
                    reply = client.post("/data", json=body)
                    assert reply.status_code == 200, reply.get_data(as_text=True)
                    n, seq, records = n + len(body["metrics"]), seq + 1, []
    return n


def timed(client, url: str) -> dict:
    times = []
    for _ in range(REPS):
        started = time.perf_counter()
        reply = client.get(url)
        reply.get_data()
        times.append((time.perf_counter() - started) * 1000)
        assert reply.status_code == 200, (url, reply.status_code)
    return {"best_ms": round(min(times), 1), "median_ms": round(statistics.median(times), 1)}


def run(quick: bool = False) -> dict:
    hosts = 10 if quick else 50
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app({"db_url": f"sqlite:///{tmp}/bench.db"})
        client = app.test_client()
        started = time.perf_counter()
        records = fill(client, hosts, time.time() - HOUR_S)
        fill_s = time.perf_counter() - started
        pages = {"overview page (/)": "/", "overview JSON (/api/overview)": "/api/overview",
                 "stream page, last hour": "/stream?host=lab-pc-00&run_id=run-bench&source=sysnest&range=1h",
                 "stream page, whole run, page 2": "/stream?host=lab-pc-00&run_id=run-bench&source=sysnest&page=2",
                 "/metrics": "/metrics"}
        timings = {name: timed(client, url) for name, url in pages.items()}
        app.extensions["collector"].store.close()
    return {"title": "Collector: dashboard pages over a lab's hour", "hosts": hosts, "metrics": len(METRICS),
            "records": records, "fill_s": round(fill_s, 1), "target_ms": TARGET_MS, "pages": timings,
            "targets": [stats.target(f"{name}, median", f"<= {TARGET_MS} ms", t["median_ms"], TARGET_MS,
                                     higher_is_better=False, unit=" ms")
                        for name, t in timings.items() if name != "/metrics"]}


def table(result: dict) -> str:
    rows = [[name, f"{t['best_ms']:.0f}", f"{t['median_ms']:.0f}",
             "" if name == "/metrics" else ("met" if t["median_ms"] <= result["target_ms"] else "not met")]
            for name, t in result["pages"].items()]
    out = stats.md_table(["page", "best (ms)", "median (ms)", f"target <= {result['target_ms']} ms"], rows)
    return out + (f"\n\n{result['hosts']} hosts x {result['metrics']} metrics, an interval every "
                  f"{INTERVAL_S:.0f} s for an hour: {result['records']:,} records on SQLite, in-process "
                  f"(Flask's test client, no network), {REPS} requests each.")


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
