#!/usr/bin/env python3
"""Bytes a stack record costs in the collector's SQLite database, with its frames stored once (the
stacks table) and as before (the whole record in records.data), over an offcpu-like run: one interval
a second for 10 minutes, each a summary, 10 thread rows and 10 stack rows drawn from 40 distinct stacks
(the recorded sample's frames, varied); and the time of that run's folded export and stream page.
Part of `make bench` (bench/suite.py); by hand it prints its result as JSON:

    .venv/bin/python bench/stack_storage.py [--quick]
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from unittest import mock

import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from collector import create_app, payload  # noqa: E402 - the checkout's own package

STACKS, ROWS = 40, 10


def sample() -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", "offcpu.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def stack_pool(records: list[dict]) -> list[dict]:
    """STACKS distinct stack rows: the sample's, each with its innermost user frame varied."""
    templates = [r for r in records if r.get("level") == "stack"]
    pool = []
    for n in range(STACKS):
        row = dict(templates[n % len(templates)])
        row["user_frames"] = [f"handler_{n} [app]", *row["user_frames"]]
        row["folded"] = row["folded"].split(";", 1)[0] + f";handler_{n} [app];" + row["folded"].split(";", 1)[1]
        pool.append(row)
    return pool


def intervals(minutes: float, with_stacks: bool) -> list[list[dict]]:
    records = sample()
    summary = next(r for r in records if r["kind"] == "summary")
    thread = next(r for r in records if r.get("level") == "thread")
    pool, rng = stack_pool(records), random.Random(1)
    out = []
    for i in range(int(minutes * 60)):
        ts = 1_795_307_000.0 + i
        batch = [{**summary, "ts": ts, "interval": i + 1}]
        batch += [{**thread, "ts": ts, "interval": i + 1, "tid": thread["tid"] + n, "rank": n + 1,
                   "total_ms": round(rng.uniform(1, 900), 3)} for n in range(ROWS)]
        if with_stacks:
            batch += [{**row, "ts": ts, "interval": i + 1, "rank": n + 1, "total_ms": round(rng.uniform(1, 900), 3),
                       "count": rng.randint(1, 200)} for n, row in enumerate(rng.sample(pool, ROWS))]
        out.append(batch)
    return out


def db_bytes(minutes: float, with_stacks: bool, dedup: bool, timings: dict | None = None) -> int:
    """The SQLite file's size after the run (checkpointed, vacuumed); timings, if given, gets the best of
    three times of the run's folded export and stream page (seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "collector.db")
        app = create_app({"db_url": f"sqlite:///{path}"})
        client = app.test_client()
        split = mock.patch.object(payload, "_split_stacks", lambda *_: None) if not dedup else mock.MagicMock()
        with split:
            for seq, batch in enumerate(intervals(minutes, with_stacks)):
                body = {"schema": 2, "timestamp": batch[0]["ts"], "metric": "offcpu",
                        "batch_id": uuid.uuid4().hex, "sequence": seq, "host": "h", "run_id": "r", "records": batch}
                assert client.post("/data", json=body).status_code == 200
        if timings is not None:
            query = "host=h&run_id=r&source=offcpu&range=run"
            for name, url in (("export_s", f"/api/profile?{query}&format=folded"), ("page_s", f"/stream?{query}")):
                times = []
                for _ in range(3):
                    started = time.perf_counter()
                    assert client.get(url).status_code == 200
                    times.append(time.perf_counter() - started)
                timings[name] = min(times)
        app.extensions["collector"].store.close()
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.close()
        return os.path.getsize(path)


def run(quick: bool = False) -> dict:
    """make bench's entry (bench/suite.py): quick runs 2 minutes instead of 10."""
    minutes = 2 if quick else 10
    n = int(minutes * 60) * ROWS
    timings: dict = {}
    base = db_bytes(minutes, False, True)
    before = db_bytes(minutes, True, False)
    after = db_bytes(minutes, True, True, timings)
    per_before, per_after = round((before - base) / n), round((after - base) / n)
    return {
        "title": "Collector: stack records stored once",
        "minutes": minutes, "stack_records": n, "distinct_stacks": STACKS,
        "db_bytes_without_stack_records": base, "db_bytes_frames_in_each_record": before,
        "db_bytes_stacks_stored_once": after,
        "bytes_per_stack_record_before": per_before, "bytes_per_stack_record_after": per_after,
        "export_s": round(timings["export_s"], 3), "page_s": round(timings["page_s"], 3),
        "targets": [stats.target("SQLite bytes per offcpu stack record, stacks stored once vs frames in each record",
                                 "<= 0.5x", round(per_after / per_before, 2), 0.5, higher_is_better=False, unit="x")],
    }


def table(result: dict) -> str:
    rows = [["frames in every record (before)", f"{result['db_bytes_frames_in_each_record']:,}",
             f"{result['bytes_per_stack_record_before']:,}"],
            ["stacks stored once (stacks table)", f"{result['db_bytes_stacks_stored_once']:,}",
             f"{result['bytes_per_stack_record_after']:,}"],
            ["no stack records at all", f"{result['db_bytes_without_stack_records']:,}", "—"]]
    out = stats.md_table(["offcpu-like run", "SQLite file (bytes)", "bytes per stack record"], rows)
    return out + (f"\n\n{result['minutes']} minutes, {result['stack_records']:,} stack records from "
                  f"{result['distinct_stacks']} distinct stacks. The run's folded export: "
                  f"{result['export_s'] * 1000:.0f} ms; its stream page with the flame graph: "
                  f"{result['page_s'] * 1000:.0f} ms (best of 3, in-process).")


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=1))
