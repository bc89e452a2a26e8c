#!/usr/bin/env python3
"""Bytes a stack record costs in the collector's SQLite database, with its frames stored once (the
stacks table) and as before (the whole record in records.data), over an offcpu-like run: one interval
a second for 10 minutes, each a summary, 10 thread rows and 10 stack rows drawn from 40 distinct stacks
(the recorded sample's frames, varied). Prints one JSON object.

    .venv/bin/python bench/stack_storage.py [--minutes 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import uuid
from unittest import mock

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


def db_bytes(minutes: float, with_stacks: bool, dedup: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "collector.db")
        app = create_app({"db_url": f"sqlite:///{path}"})
        client = app.test_client()
        split = mock.patch.object(payload, "_split_stacks", lambda *_: None) if not dedup else mock.MagicMock()
        with split:
            for seq, batch in enumerate(intervals(minutes, with_stacks)):
                body = {"schema": 1, "timestamp": batch[0]["ts"], "source_script": "offcpu",
                        "batch_id": uuid.uuid4().hex, "sequence": seq, "host": "h", "run_id": "r", "metrics": batch}
                assert client.post("/data", json=body).status_code == 200
        app.extensions["collector"].store.close()
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.close()
        return os.path.getsize(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    args = parser.parse_args()
    n = int(args.minutes * 60) * ROWS
    base = db_bytes(args.minutes, False, True)
    before = db_bytes(args.minutes, True, False)
    after = db_bytes(args.minutes, True, True)
    print(json.dumps({"stack_records": n, "distinct_stacks": STACKS, "db_bytes_without_stack_records": base,
                      "db_bytes_frames_in_each_record": before, "db_bytes_stacks_stored_once": after,
                      "bytes_per_stack_record_before": round((before - base) / n),
                      "bytes_per_stack_record_after": round((after - base) / n)}, indent=1))


if __name__ == "__main__":
    main()
