"""Benchmark 4: how many batches the collector stores per second, against the framework's ceiling.

wrk (bench/post_batches.lua) posts 100-record schema-1 batches, each with a new batch_id, from 8
connections for a fixed time to: server.py on SQLite, server.py on PostgreSQL (a private cluster with
PostgreSQL's default, durable settings), a no-op Flask endpoint, one that only validates the body as
server.py does (collector.payload) and one that logs every record like the original paper's server —
all five served by waitress with server.py's 8 threads, each started fresh per repetition, in a
rotated order. Beside them, the storage ceilings (bench/ingest_ceiling.py): plain sqlite3 and psycopg
writers putting the same batches into the same schema with the same durability, no HTTP; and the
collector's own writer given the same batches already parsed, in one thread (what its storage code
costs when it shares no GIL with request threads). The targets are the collector's batches/s over its
database's ceiling in the same repetition; ratios to the no-op endpoint are shown too, and to what one
process pays validating and then storing one after the other (1 / (1/validate-only + 1/ceiling), per
repetition: not a hard limit, as the database's own work can run beside Python's on the second CPU). After each collector run the database is checked: every batch wrk saw
answered 200 is stored, with its 100 records.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

import harness
import ingest_ceiling
import requests
import stats
from harness import PYTHON
from server_fixtures import ServerProcess, free_port, private_pg_cluster
from stats import BenchError

RECORDS = 100
CONNECTIONS = 8
APPS = os.path.join(harness.BENCH, "ingest_apps.py")
LUA = os.path.join(harness.BENCH, "post_batches.lua")
SQLITE_CEILING, PG_CEILING = "SQLite ceiling (plain sqlite3)", "PostgreSQL ceiling (plain psycopg)"
SQLITE_WRITER, PG_WRITER = "collector's writer alone, SQLite", "collector's writer alone, PostgreSQL"
CONFIGS = ["no-op Flask", "collector, SQLite", "collector, PostgreSQL", "validate only, store nothing",
           "log every record (original)", SQLITE_CEILING, PG_CEILING, SQLITE_WRITER, PG_WRITER]
# not measured: what one process pays when it validates (the "validate only" row) and then stores (the
# ceiling) one after the other, per repetition: 1 / (1/validate + 1/ceiling)
SQLITE_SERIAL, PG_SERIAL = "one process, validate then store: SQLite", "one process, validate then store: PostgreSQL"
SERIAL_OF = {SQLITE_SERIAL: SQLITE_CEILING, PG_SERIAL: PG_CEILING}
REF_APPS = {"no-op Flask": "noop", "validate only, store nothing": "validate", "log every record (original)": "logonly"}
TARGET = 0.8  # of the database's ceiling
CEILING_OF = {"collector, SQLite": SQLITE_CEILING, "collector, PostgreSQL": PG_CEILING,
              SQLITE_WRITER: SQLITE_CEILING, PG_WRITER: PG_CEILING, SQLITE_SERIAL: SQLITE_CEILING,
              PG_SERIAL: PG_CEILING}
BOUND_OF = {"collector, SQLite": SQLITE_SERIAL, "collector, PostgreSQL": PG_SERIAL}
TARGETED = ("collector, SQLite", "collector, PostgreSQL")


class RefApp:
    """bench/ingest_apps.py as a process, ready once /healthz answers."""

    def __init__(self, kind: str, workdir: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([PYTHON, APPS, kind, str(self.port), os.path.join(workdir, f"{kind}.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(self.url + "/healthz", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise BenchError(f"ingest_apps.py {kind} did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def wrk(url: str, seconds: float) -> dict:
    """Run wrk against url/data; requests/s, 2xx answered, errors."""
    out = subprocess.run(["wrk", "-t", "2", "-c", str(CONNECTIONS), "-d", f"{seconds:g}s", "--timeout", "10s",
                          "-s", LUA, url + "/data"], capture_output=True, text=True, timeout=seconds + 60,
                         env={**os.environ, "BENCH_RECORDS": str(RECORDS)})
    if out.returncode != 0:
        raise BenchError(f"wrk failed: {out.stderr.strip()[-300:]}")
    text = out.stdout
    total = int(re.search(r"(\d+) requests in", text).group(1))
    non2xx = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", text)) else 0
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    return {"per_s": rate, "ok": total - non2xx, "non2xx": non2xx, "socket_errors": errors}


def run(quick: bool = False, reps: int | None = None) -> dict:
    if not shutil.which("wrk"):
        return {"skipped": "wrk is not installed (scripts/apt-packages.txt lists it; run make setup)", "targets": []}
    reps = reps or (3 if quick else 5)
    seconds = 3 if quick else 6
    workdir = tempfile.mkdtemp(prefix="bench-ingest-")
    problems: list[str] = []
    counter = iter(range(10**6))

    with private_pg_cluster(durable=True) as pg:
        def one(config: str, rep: int) -> float:
            n = next(counter)
            if config == SQLITE_CEILING:
                return ingest_ceiling.sqlite_ceiling(os.path.join(workdir, f"c{n}.db"), seconds, RECORDS, CONNECTIONS)
            if config == PG_CEILING:
                return ingest_ceiling.postgres_ceiling(pg.create_database(), seconds, RECORDS, CONNECTIONS)
            if config in (SQLITE_WRITER, PG_WRITER):
                url = pg.create_database() if config == PG_WRITER else f"sqlite:///{os.path.join(workdir, f'w{n}.db')}"
                return ingest_ceiling.collector_writer(url, seconds, RECORDS, CONNECTIONS)
            if config in REF_APPS:
                app = RefApp(REF_APPS[config], workdir)
                try:
                    result = wrk(app.url, seconds)
                finally:
                    app.stop()
            else:
                db = pg.create_database() if "PostgreSQL" in config else os.path.join(workdir, f"c{n}.db")
                server = ServerProcess("--db", db, output=os.path.join(workdir, f"server{n}.log"))
                try:
                    result = wrk(server.url, seconds)
                    streams = requests.get(server.url + "/api/streams", timeout=60).json()["streams"]
                finally:
                    server.stop()
                stored = sum(s["batches"] for s in streams)
                if stored < result["ok"] or sum(s["records"] for s in streams) != stored * RECORDS:
                    problems.append(f"{config} rep {rep + 1}: {result['ok']} answered 200, {stored} stored")
            if result["non2xx"] or result["socket_errors"]:
                problems.append(f"{config} rep {rep + 1}: {result['non2xx']} non-2xx, {result['socket_errors']} socket errors")
            return result["per_s"]

        harness.log(f"collector ingest: {reps} repetitions of {len(CONFIGS)} endpoints, {seconds} s of wrk each")
        values = stats.alternate(CONFIGS, one, reps, harness.log)
    shutil.rmtree(workdir, ignore_errors=True)
    for serial, ceiling in SERIAL_OF.items():
        values[serial] = [1 / (1 / v + 1 / c) if v and c else None
                          for v, c in zip(values["validate only, store nothing"], values[ceiling], strict=True)]
    ratios = stats.paired(values, "no-op Flask", "ratio")
    rows = []
    for c in [*CONFIGS, *SERIAL_OF]:
        row = {"config": c, "batches_per_s": stats.summary(values[c]),
               "records_per_s": stats.summary([v * RECORDS for v in values[c] if v is not None]),
               "vs_noop": stats.summary(ratios[c], 2), "vs_ceiling": None, "vs_serial": None}
        for key, of in (("vs_ceiling", CEILING_OF), ("vs_serial", BOUND_OF)):
            if c in of:
                row[key] = stats.summary([v / b for v, b in zip(values[c], values[of[c]], strict=True)
                                          if v is not None and b], 2)
        rows.append(row)
    by = {r["config"]: r for r in rows}
    return {"title": "Collector ingest", "reps": reps, "seconds": seconds, "connections": CONNECTIONS,
            "records_per_batch": RECORDS, "rows": rows, "problems": problems,
            "targets": [stats.target(f"{c} vs {CEILING_OF[c]}", f">= {TARGET}x", by[c]["vs_ceiling"]["median"],
                                     TARGET, higher_is_better=True, unit="x") for c in TARGETED]}


def table(result: dict) -> str:
    rows = [[r["config"], stats.fmt(r["batches_per_s"]), stats.fmt(r["records_per_s"]),
             stats.fmt(r["vs_noop"], "x", 2), stats.fmt(r.get("vs_ceiling"), "x", 2) if r.get("vs_ceiling") else "",
             stats.fmt(r.get("vs_serial"), "x", 2) if r.get("vs_serial") else ""]
            for r in result["rows"]]
    out = stats.md_table([f"endpoint ({result['connections']} connections, {result['seconds']} s)", "batches/s",
                            f"records/s ({result['records_per_batch']} a batch)", "vs no-op",
                            "vs its database's ceiling", "vs one process, validate then store"], rows)
    if result.get("problems"):
        out += "\n\nProblems seen: " + "; ".join(result["problems"])
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
