"""Which run an original-client batch belongs to. That client sends no run id and starts its sequence
at 0 again when restarted, so a run is inferred per (host, source_script): a batch joins the most
recent of the host's last few legacy runs where its sequence is still free and its timestamp fits
between its received neighbours' (a retried or late batch was made before the later ones); otherwise
it starts a new run, named after its own timestamp. Known blind spot: a restarted client whose first batches are all lost
and whose next sequence is above the old run's highest is read as a continuation (with a gap)."""

from __future__ import annotations

import hashlib
import time

from sqlalchemy import Connection, func, select

from collector.payload import Batch
from collector.schema import batches

RUNS_CONSIDERED = 3  # a late batch may belong to a run just before the latest one


def new_run_id(batch: Batch) -> str:
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(batch.timestamp))
    return f"legacy-{started}-{hashlib.sha1(batch.batch_id.encode()).hexdigest()[:8]}"


def _lock_key(host: str, source: str) -> int:
    digest = hashlib.sha1(f"{host}\0{source}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def assign(conn: Connection, batch: Batch, slack_s: float) -> str:
    """run_id for a legacy batch; call inside the transaction that inserts it."""
    if conn.dialect.name == "postgresql":
        # serialise decisions for one (host, source) across server processes until this commits
        conn.execute(select(func.pg_advisory_xact_lock(_lock_key(batch.host, batch.source))))
    recent = conn.execute(
        select(batches.c.run_id)
        .where(batches.c.host == batch.host, batches.c.source == batch.source, batches.c.schema == 0)
        .group_by(batches.c.run_id).order_by(func.max(batches.c.received_at).desc()).limit(RUNS_CONSIDERED)
    ).scalars()
    for run_id in recent:
        if _fits(conn, run_id, batch, slack_s):
            return run_id
    return new_run_id(batch)


def _fits(conn: Connection, run_id: str, batch: Batch, slack_s: float) -> bool:
    stream = (batches.c.host == batch.host, batches.c.run_id == run_id, batches.c.source == batch.source)
    seq = batches.c.sequence
    if conn.execute(select(batches.c.id).where(*stream, seq == batch.sequence).limit(1)).first():
        return False
    before = conn.execute(select(batches.c.client_ts).where(*stream, seq < batch.sequence)
                          .order_by(seq.desc()).limit(1)).scalar()
    after = conn.execute(select(batches.c.client_ts).where(*stream, seq > batch.sequence)
                         .order_by(seq.asc()).limit(1)).scalar()
    return ((before is None or batch.timestamp >= before - slack_s)
            and (after is None or batch.timestamp <= after + slack_s))
