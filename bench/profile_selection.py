#!/usr/bin/env python3
"""Merged profiles and diffs of a lab's hour (issue 29): 50 hosts running cpuprofile for an hour, each
posting an interval every 10 s with 10 stack records drawn from 200 distinct stacks, twice (runs A and
B, B's weights shifted), into SQLite in-process; then GET /api/profile of run A's 50 hosts over the
hour (format=json: the functions with their shares; and folded) and GET /api/profile/diff of run A
against run B (format=json), each timed best-of and median of 5: wall time and the process's CPU time
(the request runs in this process, SQLite's work included). Target: <= 1 s each. Part of `make bench`
(bench/suite.py); by hand it prints its result as JSON:

    .venv/bin/python bench/profile_selection.py [--quick]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from typing import TYPE_CHECKING
from urllib.parse import quote

import harness  # noqa: F401 - puts the checkout on the path
import stats

from client.wire import batch_head
from collector import create_app

if TYPE_CHECKING:
    from flask.testing import FlaskClient

HOSTS, INTERVAL_S, HOUR_S, PER_INTERVAL, PER_BATCH = 50, 10.0, 3600.0, 10, 30
STACKS, COMMS = 200, ("serve", "worker", "python3", "postgres", "make")
RUNS = ("run-a", "run-b")
TARGET_S = 1.0
REPS, QUICK_REPS = 5, 3
SELECTION = "source=cpuprofile&run_id={run}&range=1h"
REQUESTS = {
    "merged profile, 50 hosts x 1 h (json)": "/api/profile?" + SELECTION.format(run="run-a") + "&format=json",
    "merged profile, 50 hosts x 1 h (folded)": "/api/profile?" + SELECTION.format(run="run-a") + "&format=folded",
    "diff of two such selections (json)": (f"/api/profile/diff?base={quote(SELECTION.format(run='run-a'))}"
                                           f"&target={quote(SELECTION.format(run='run-b'))}&format=json"),
}
UNTARGETED = {"merged profile, 50 hosts x 1 h (folded)"}  # the target names the profile and the diff once each


def stack_pool() -> list[list[dict]]:
    """STACKS distinct stacks, root first, 8 to 30 frames of a few programs' functions."""
    rng = random.Random(29)
    modules = ("serve", "libc.so.6", "libssl.so.3", "python3.11", "postgres")
    names = [f"fn_{i}" for i in range(400)]
    start = [{"name": "_start", "module": "serve", "kind": "user"},
             {"name": "__libc_start_main", "module": "libc.so.6", "kind": "user"}]
    pool = []
    for _ in range(STACKS):
        frames = start + [{"name": rng.choice(names), "module": rng.choice(modules), "kind": "user"}
                          for _ in range(rng.randint(6, 22))]
        if rng.random() < 0.3:
            frames += [{"name": f"k_{rng.randint(0, 99)}", "module": "", "kind": "kernel"} for _ in range(6)]
        pool.append(frames)
    return pool


def fill(client: FlaskClient, start: float) -> int:
    """Post both runs' hour; returns the stack records stored."""
    pool, n = stack_pool(), 0
    for r, run in enumerate(RUNS):
        rng = random.Random(r)
        for h in range(HOSTS):
            host, records, seq = f"lab-pc-{h:02d}", [], 0
            for i in range(int(HOUR_S / INTERVAL_S)):
                ts = start + i * INTERVAL_S
                for k in rng.sample(range(STACKS), PER_INTERVAL):
                    # run B: the second half of the pool weighs more, so the diff has changes to show
                    weight = rng.randint(1, 60) * (3 if r and k >= STACKS // 2 else 1)
                    records.append({"metric": "cpuprofile", "ts": ts, "kind": "stack", "interval": i + 1,
                                    "pid": 1000 + k % 40, "comm": COMMS[k % len(COMMS)], "cgroup": "/lab",
                                    "count": weight, "frames": pool[k]})
                if (i + 1) % PER_BATCH == 0:
                    head = batch_head(metric="cpuprofile", batch_id=uuid.uuid4().hex, sequence=seq, host=host,
                                      run_id=run, dropped=None, timestamp=ts)
                    reply = client.post("/data", json={**head, "records": records})
                    assert reply.status_code == 200, reply.get_data(as_text=True)
                    n, seq, records = n + len(records), seq + 1, []
    return n


def timed(client: FlaskClient, url: str, reps: int) -> dict:
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        reply = client.get(url)
        reply.get_data()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
        assert reply.status_code == 200, (url, reply.status_code, reply.get_data(as_text=True)[:300])
    return {"best_s": round(min(walls), 3), "median_s": round(statistics.median(walls), 3),
            "cpu_median_s": round(statistics.median(cpus), 3)}


def run(quick: bool = False) -> dict:
    reps = QUICK_REPS if quick else REPS
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app({"db_url": f"sqlite:///{tmp}/profiles.db"})
        try:
            client = app.test_client()
            started = time.perf_counter()
            records = fill(client, time.time() - HOUR_S)
            fill_s = time.perf_counter() - started
            client.get(next(iter(REQUESTS.values())))  # warm: the page cache, as a dashboard that was used
            requests = {name: timed(client, url, reps) for name, url in REQUESTS.items()}
        finally:
            app.extensions["collector"].store.close()
    targets = [stats.target(f"{name}, SQLite, median", f"<= {TARGET_S:g} s", t["median_s"], TARGET_S,
                            higher_is_better=False, unit=" s")
               for name, t in requests.items() if name not in UNTARGETED]
    return {"title": "Collector: merged profiles and diffs of a lab's hour", "hosts": HOSTS, "records": records,
            "records_per_selection": records // len(RUNS), "distinct_stacks": STACKS, "fill_s": round(fill_s, 1),
            "requests_each": reps, "target_s": TARGET_S, "requests": requests, "targets": targets}


def table(result: dict) -> str:
    rows = [[name, f"{t['median_s'] * 1000:.0f} ({t['best_s'] * 1000:.0f})", f"{t['cpu_median_s'] * 1000:.0f}"]
            for name, t in result["requests"].items()]
    out = stats.md_table(["request (SQLite)", "median (best) ms", "CPU, median ms"], rows)
    return out + (f"\n\nTarget <= {result['target_s']:g} s (median) for the merged profile (json) and the diff. "
                  f"{result['hosts']} hosts, an interval every {INTERVAL_S:.0f} s for an hour, {PER_INTERVAL} stack "
                  f"records an interval from {result['distinct_stacks']} distinct stacks: "
                  f"{result['records_per_selection']:,} records a selection, two runs "
                  f"(filled in {result['fill_s']:.0f} s); in-process (Flask's test client, no network), "
                  f"{result['requests_each']} requests each, CPU time of the process.")


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
