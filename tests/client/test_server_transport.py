"""Our transport (client/transport.py) against the real collector (server.py as a process): every record
submitted arrives exactly once, in gapless sequences, gzip-compressed once the collector says it can."""

from __future__ import annotations

import time

import pytest
import requests
from collector_payloads import envelope
from server_fixtures import ServerProcess

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

TOKEN = "transport-test-token-5e6f"


def test_transport_delivers_every_record_once(tmp_path):
    from client.transport import Transport

    server = ServerProcess("--db", str(tmp_path / "lab.db"), "--token", TOKEN)
    transport = None
    try:
        transport = Transport(server.url + "/data", token=TOKEN, outbox_path=str(tmp_path / "outbox.sqlite"),
                              host="pc-int", run_id="run-int", flush_interval=0.2, batch_records=400)
        sent = {"sysnest": 0, "mystery": 0}
        for round_ in range(10):
            for source in sent:
                records = [envelope(source, time.time(), round_ + 1, "row", pid=i, comm="stress", count=i,
                                    note="x" * 40) for i in range(300)]
                transport.submit(source, records)
                sent[source] += len(records)
            time.sleep(0.05)
        transport.close(timeout=30)
        status = transport.status()
        assert status["dropped"] == 0 and status["pending_outbox"] == 0, status
        assert status["gzip"] is True  # learned from the collector's Accept-Encoding
        streams = {s["source"]: s for s in requests.get(server.url + "/api/streams", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()["streams"]}
        for source, count in sent.items():
            stream = streams[source]
            assert (stream["host"], stream["run_id"], stream["records"], stream["missing_count"]) == (
                "pc-int", "run-int", count, 0)
            assert stream["batches"] == status["sources"][source]["sent_batches"] == stream["highest"] + 1
            assert stream["token_name"] == "token"
    finally:
        if transport is not None:
            transport.close(timeout=1)
        server.stop()
