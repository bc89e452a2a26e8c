"""Stack records for the collector and window tests: a metric's recorded sample, cpuprofile-shaped stacks,
offcpu rows of folded lines, and the same records posted as consecutive batches (a metric's stacks recur
from interval to interval)."""

from __future__ import annotations

import json
import os

from collector_payloads import ours
from helpers import SAMPLES


def sample(metric: str) -> list[dict]:
    with open(os.path.join(SAMPLES, f"{metric}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpuprofile_stacks(ts: float) -> list[dict]:
    """cpuprofile's stack records: frames root first, kernel and user marked, a count."""
    user = [{"name": "main", "module": "work", "kind": "user"}, {"name": "work", "module": "work", "kind": "user"}]
    return [{"metric": "cpuprofile", "ts": ts, "kind": "stack", "interval": 1, "pid": 42, "comm": "work",
             "count": 30 + n, "frames": [*user, {"name": f"hot_{n}", "module": "work", "kind": "user"},
                                         {"name": "asm_sysvec_apic_timer_interrupt", "module": "", "kind": "kernel"}]}
            for n in range(3)]


def offcpu_like(folded: str, interval: int = 1, ts: float = 100.0) -> list[dict]:
    """offcpu stack rows for folded lines (weights in ms): comm, user frames innermost first."""
    records = []
    for line in folded.splitlines():
        frames, weight = line.rsplit(" ", 1)
        comm, *rest = frames.split(";")
        records.append({"kind": "row", "level": "stack", "interval": interval, "ts": ts, "comm": comm,
                        "user_frames": rest[::-1], "kernel_frames": [], "total_ms": float(weight)})
    return records



def cpu_stack(ts: float, interval: int, leaf: str, count: int, comm: str = "work", cgroup: str = "/lab/a") -> dict:
    """One cpuprofile stack record: comm;main;LEAF, `count` samples."""
    return {"metric": "cpuprofile", "ts": ts, "kind": "stack", "interval": interval, "pid": 42, "comm": comm,
            "cgroup": cgroup, "count": count,
            "frames": [{"name": "main", "module": "work", "kind": "user"}, {"name": leaf, "module": "work", "kind": "user"}]}


def post_stacks(client, host: str, run_id: str, intervals: list[list[dict]], first_sequence: int = 0) -> None:
    """Each interval's records as one cpuprofile batch of the stream (host, run_id)."""
    for n, records in enumerate(intervals):
        answer = client.post("/data", data=json.dumps(ours(first_sequence + n, host=host, run_id=run_id,
                                                           source="cpuprofile", records=records)),
                             content_type="application/json")
        assert answer.status_code == 200, answer.get_json()


def post_intervals(client, source: str, records: list[dict], intervals: int) -> list[dict]:
    """The same records posted as `intervals` batches, 10 s apart (a metric's stacks recur)."""
    posted = []
    for seq in range(intervals):
        # each batch a later interval of the same run (the sample holds intervals 0..2)
        batch = [{**r, "ts": r["ts"] + 10 * seq, **({"interval": r["interval"] + 10 * seq} if "interval" in r else {})}
                 for r in records]
        # as the transport sends it (the test client's json= would sort the keys)
        answer = client.post("/data", data=json.dumps(ours(seq, source=source, records=batch)),
                             content_type="application/json")
        assert answer.status_code == 200, answer.get_json()
        posted += batch
    return sorted(posted, key=lambda r: r["ts"])  # as the API lists them (stable: then as stored)
