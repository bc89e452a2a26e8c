#!/usr/bin/env python3
"""Page and API latency of the collector's dashboard over a lab's hour: 10 and 50 hosts x 10 metrics,
each posting an interval every 10 s for an hour (the metric's recorded sample's first interval, at most
6 records, restamped), into SQLite and into PostgreSQL, in-process; then the overview (/ and
/api/overview), a sysnest stream page over its last hour and a cross-host comparison, each timed
best-of and median of 5 (target <= 300 ms). Part of `make bench` (bench/suite.py); by hand it prints its
result as JSON:

    .venv/bin/python bench/dashboard_pages.py [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import TYPE_CHECKING

import harness  # noqa: F401 - puts tests/support on the path
import stats
from server_fixtures import private_pg_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from client.wire import batch_head  # noqa: E402 - the checkout's own packages
from collector import create_app  # noqa: E402

if TYPE_CHECKING:
    from flask.testing import FlaskClient

METRICS = ("sysnest", "tcpconnlat", "netpack", "pagefault", "cpuschedrun", "biopwise", "offcpu", "compmem",
           "schparm", "cacheraw")
INTERVAL_S, HOUR_S, PER_INTERVAL, PER_BATCH = 10.0, 3600.0, 6, 30
TARGET_MS = 300
REPS, QUICK_REPS = 5, 3
SETUPS = (("SQLite", 10), ("SQLite", 50), ("PostgreSQL", 10), ("PostgreSQL", 50))
QUICK_SETUPS = (("SQLite", 10), ("SQLite", 50))
PAGES = {"overview page (/)": "/", "overview JSON (/api/overview)": "/api/overview",
         "stream page, last hour": "/stream?host=lab-pc-00&run_id=run-bench&source=sysnest&range=1h",
         "stream page, whole run, page 2": "/stream?host=lab-pc-00&run_id=run-bench&source=sysnest&page=2",
         "cpuschedrun stream page (heatmap), last hour":
             "/stream?host=lab-pc-00&run_id=run-bench&source=cpuschedrun&range=1h",
         "sysnest across every host, last hour": "/compare?source=sysnest&range=1h",
         "/metrics": "/metrics"}
UNTARGETED = {"/metrics"}


def interval_records(metric: str) -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", f"{metric}.ndjson")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    body = [r for r in records if r.get("kind") != "meta"]
    first = body[0].get("interval")
    return [r for r in body if r.get("interval") == first][:PER_INTERVAL] or body[:PER_INTERVAL]


def fill(client: FlaskClient, hosts: int, start: float) -> int:
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
                    head = batch_head(metric=metric, batch_id=uuid.uuid4().hex, sequence=seq, host=host,
                                      run_id="run-bench", dropped=None, timestamp=ts)
                    body = {**head, "records": records}
                    reply = client.post("/data", json=body)
                    assert reply.status_code == 200, reply.get_data(as_text=True)
                    n, seq, records = n + len(body["records"]), seq + 1, []
    return n


def timed(client: FlaskClient, url: str, reps: int) -> dict:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        reply = client.get(url)
        reply.get_data()
        times.append((time.perf_counter() - started) * 1000)
        assert reply.status_code == 200, (url, reply.status_code)
    return {"best_ms": round(min(times), 1), "median_ms": round(statistics.median(times), 1)}


def measure(db_url: str, hosts: int, reps: int) -> dict:
    app = create_app({"db_url": db_url})
    try:
        client = app.test_client()
        started = time.perf_counter()
        records = fill(client, hosts, time.time() - HOUR_S)
        fill_s = time.perf_counter() - started
        pages = {name: timed(client, url, reps) for name, url in PAGES.items()}
    finally:
        app.extensions["collector"].store.close()
    return {"hosts": hosts, "records": records, "fill_s": round(fill_s, 1), "pages": pages}


def run(quick: bool = False) -> dict:
    reps = QUICK_REPS if quick else REPS
    runs, setups = [], QUICK_SETUPS if quick else SETUPS
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        pg = stack.enter_context(private_pg_cluster()) if any(d == "PostgreSQL" for d, _h in setups) else None
        for database, hosts in setups:
            url = f"sqlite:///{tmp}/bench{hosts}.db" if database == "SQLite" else pg.create_database()
            runs.append({"database": database, **measure(url, hosts, reps)})
    targets = [stats.target(f"{name}, {r['database']}, {r['hosts']} hosts, median", f"<= {TARGET_MS} ms",
                            t["median_ms"], TARGET_MS, higher_is_better=False, unit=" ms")
               for r in runs for name, t in r["pages"].items() if name not in UNTARGETED]
    return {"title": "Collector: dashboard pages over a lab's hour", "metrics": len(METRICS), "requests": reps,
            "target_ms": TARGET_MS, "runs": runs, "targets": targets}


def table(result: dict) -> str:
    if "runs" not in result:  # a result of the single-setup version of this benchmark
        result = {**result, "runs": [{"database": "SQLite", **result}]}
    runs = result["runs"]
    head = ["page"] + [f"{r['database']}, {r['hosts']} hosts: median (best) ms" for r in runs]
    rows = []
    for name in runs[0]["pages"]:
        cells = []
        for r in runs:
            t = r["pages"].get(name)
            mark = "" if t is None or name in UNTARGETED or t["median_ms"] <= result["target_ms"] else " **over**"
            cells.append("" if t is None else f"{t['median_ms']:.0f} ({t['best_ms']:.0f}){mark}")
        rows.append([name, *cells])
    out = stats.md_table(head, rows)
    filled = "; ".join(f"{r['database']} {r['hosts']} hosts: {r['records']:,} records (filled in {r['fill_s']:.0f} s)"
                       for r in runs)
    return out + (f"\n\nTarget <= {result['target_ms']} ms (median) for every page but /metrics. "
                  f"{result['metrics']} metrics per host, an interval every {INTERVAL_S:.0f} s for an hour; {filled}; "
                  f"in-process (Flask's test client, no network), {result.get('requests', REPS)} requests each.")


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
