"""Payloads for the collector tests: the original client's exactly as it sent them, ours with the
envelope client/transport.py writes (client.wire.batch_head) and as it wrote it before schema 2, and
readers for what the collector reports (API totals, /metrics)."""

from __future__ import annotations

import re
import time
import uuid

from client.wire import batch_head, batch_names

# Lines of the original paper's Fig. 2 (sysnest by syscall), as the original client forwarded them.
ORIGINAL_LINES = ("futex\t\t20299\t258074820.348", "3259 code\t\t1300\t42932426.758",
                  "epoll_wait\t\t3176\t127010275.182", "1915 gnome-shell\t\t735\t21393978.605")


def original(sequence: int, timestamp: float | None = None, source: str = "sysnest",
             lines: tuple[str, ...] = ORIGINAL_LINES, batch_id: str | None = None) -> dict:
    """The original client's payload: no schema, no host, no run_id; records are raw lines."""
    return {"timestamp": time.time() if timestamp is None else timestamp, "source_script": source,
            "batch_id": batch_id or str(uuid.uuid4()), "sequence": sequence,
            "metrics": [{"type": "raw_output", "data": line} for line in lines]}


def envelope(metric: str, ts: float, interval: int, kind: str = "summary", **fields) -> dict:
    return {"metric": metric, "ts": ts, "kind": kind, "interval": interval, **fields}


def ours(sequence: int, host: str = "lab-pc-01", run_id: str = "run-a", source: str = "sysnest",
         records: list[dict] | None = None, batch_id: str | None = None, dropped: int | None = None,
         timestamp: float = 1_750_000_000.0) -> dict:
    """Our transport's payload (schema 2); by default two sysnest records per batch."""
    if records is None:
        t = timestamp + sequence
        records = [envelope(source, t, sequence + 1, "row", pid=100 + sequence, comm="stress", syscall="read",
                            count=10 * sequence, total_us=1.5 * sequence),
                   envelope(source, t, sequence + 1, "summary", syscalls=1000 + sequence, per_sec=500.0 + sequence,
                            processes=3, errors=0, interval_s=1.0)]
    head = batch_head(metric=source, batch_id=batch_id or uuid.uuid4().hex, sequence=sequence, host=host,
                      run_id=run_id, dropped=dropped, timestamp=timestamp + sequence)
    return {**head, "records": records}


def as_schema_1(payload: dict) -> dict:
    """Our payload as the transport sent it before schema 2 (and an outbox may still hold it): the metric's
    name in source_script, the records in metrics, keys in the same order."""
    old_names = {"metric": "source_script", "records": "metrics"}
    return {old_names.get(key, key): value for key, value in payload.items()} | {"schema": 1}


def records_of(payload: dict) -> list:
    """A payload's records, under the key its schema gives them."""
    return payload[batch_names(payload.get("schema"))[1]]


def stored(client) -> tuple[int, int]:
    """(batches, records) the collector holds, read through its API."""
    streams = client.get("/api/streams").get_json()["streams"]
    return sum(s["batches"] for s in streams), sum(s["records"] for s in streams)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+-?\d+)?$')  # an optional timestamp (ms)


def prometheus_samples(text: str) -> dict[str, float]:
    """{'name{labels}': value} from a Prometheus text exposition (checks every line parses)."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples
