#!/usr/bin/env python3
"""Reference endpoints for the collector ingest benchmark, served by waitress exactly as server.py is
(same threads): `noop` reads the body and answers {"status": "ok"} (the framework's ceiling);
`validate` also runs the collector's own check of the body (collector.payload.parse_body) and stores
nothing (the ceiling of any collector that validates in the request, as server.py does); `logonly`
parses the JSON and logs every record to a file, as the original paper's server did.

usage: ingest_apps.py noop|validate|logonly PORT [LOGFILE]
"""

import json
import logging
import os
import sys

import waitress
from flask import Flask, Response, jsonify, request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collector.payload import parse_body  # noqa: E402 - the checkout's own package
from collector.rejections import Rejected  # noqa: E402

kind, port = sys.argv[1], int(sys.argv[2])
app = Flask(kind)
log = logging.getLogger("original")
if kind == "logonly":
    log.setLevel(logging.INFO)
    log.addHandler(logging.FileHandler(sys.argv[3] if len(sys.argv) > 3 else "/dev/null"))


@app.post("/data")
def data() -> Response | tuple[Response, int]:
    if kind == "noop":
        request.get_data()
        return jsonify({"status": "ok"})
    if kind == "validate":
        try:
            parse_body(request.get_data())
        except Rejected as e:
            return jsonify({"status": "error", "reason": e.reason}), e.status
        return jsonify({"status": "ok"})
    batch = json.loads(request.get_data())
    log.info("batch %s from %s seq=%s", batch.get("batch_id"), batch.get("source_script"), batch.get("sequence"))
    for record in batch.get("metrics", []):
        log.info("metric %s", json.dumps(record))
    return jsonify({"status": "ok"})


@app.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


waitress.serve(app, host="127.0.0.1", port=port, threads=8, ident=kind)
