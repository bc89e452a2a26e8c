"""A minimal collector for the pipeline tests: POST /data, idempotent on batch_id, answering like the
real one ({"status": "ok", "duplicate": bool, "missing": [...]}), and remembering every arrival so a
test can check exactly-once delivery and order. Served by werkzeug on 127.0.0.1 in a thread; it can
be stopped and started again on the same port to simulate an outage."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections import Counter

from flask import Flask, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server


class _Quiet(WSGIRequestHandler):
    def log_request(self, *args, **kwargs) -> None:   # one line per post would drown the test output
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CollectorStub:
    def __init__(self, port: int | None = None, token: str | None = None, gzip_ok: bool = False) -> None:
        self.port = port or free_port()
        self.token = token
        self.gzip_ok = gzip_ok
        self.lock = threading.Lock()
        self.batches: dict[str, dict] = {}           # batch_id -> payload, first arrival
        self.arrivals: list[tuple[str, str, int]] = []   # (run_id, source, sequence) of first arrivals
        self.posts: Counter[str] = Counter()         # batch_id -> how many times it was posted
        self.gzip_posts = 0
        self.fail_with: int | None = None            # answer every post with this status
        self._server = None
        self._thread: threading.Thread | None = None
        self.app = self._make_app()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _make_app(self) -> Flask:
        app = Flask("collector_stub")

        @app.after_request
        def advertise(response):
            if self.gzip_ok:
                response.headers["Accept-Encoding"] = "gzip"
            return response

        @app.get("/healthz")
        def healthz():
            return jsonify(status="ok")

        @app.post("/data")
        def data():
            if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
                return jsonify(status="error", reason="unknown token"), 401
            if self.fail_with:
                return jsonify(status="error", reason="told to fail"), self.fail_with
            body = request.get_data()
            if request.headers.get("Content-Encoding") == "gzip":
                if not self.gzip_ok:
                    return jsonify(status="error", reason="gzip not accepted"), 415
                body = gzip.decompress(body)
                self.gzip_posts += 1
            try:
                payload = json.loads(body)
                key = (payload["run_id"], payload["metric"], int(payload["sequence"]))
                batch_id = payload["batch_id"]
                assert isinstance(payload["records"], list)
            except (ValueError, KeyError, TypeError, AssertionError):
                return jsonify(status="error", reason="bad payload"), 400
            with self.lock:
                self.posts[batch_id] += 1
                duplicate = batch_id in self.batches
                if not duplicate:
                    self.batches[batch_id] = payload
                    self.arrivals.append(key)
                seen = {s for r, src, s in self.arrivals if (r, src) == key[:2]}
                missing = sorted(set(range(max(seen) + 1)) - seen)
            return jsonify(status="ok", batch_id=batch_id, duplicate=duplicate, missing=missing)

        return app

    def start(self) -> CollectorStub:
        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True, request_handler=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = None

    # --- what arrived ----------------------------------------------------------------------------------
    def streams(self) -> dict[tuple[str, str], list[int]]:
        """(run_id, source) -> sequences in order of first arrival."""
        out: dict[tuple[str, str], list[int]] = {}
        with self.lock:
            for run_id, source, seq in self.arrivals:
                out.setdefault((run_id, source), []).append(seq)
        return out

    def records(self, source: str | None = None) -> list[dict]:
        """Every record received, batches in order of arrival."""
        with self.lock:
            payloads = [self.batches[bid] for bid in self.batches]
        return [r for p in payloads if source in (None, p["metric"]) for r in p["records"]]
