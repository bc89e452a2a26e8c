#!/usr/bin/env python3
"""The collector an instructor runs for a lab: every machine POSTs its metric batches to /data; each
batch is stored exactly once (SQLite file by default, PostgreSQL for several server processes), gaps
are tracked per (host, run, source), and / shows the lab's data. See docs/collector.md.

EXAMPLES:
    python server.py                                   # 127.0.0.1:5000, ./collector.db
    python server.py --host 0.0.0.0 --tokens-file lab-tokens.txt --log-file server_data.log
    python server.py --db postgresql://lab@dbhost/lab --port 5001
"""

from __future__ import annotations

import argparse
import itertools
import logging
import logging.handlers
import queue
import sys
from collections.abc import Mapping
from typing import Any

from flask import Flask, jsonify, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException

from collector import api, dashboard, httpserver, ingest
from collector import settings as settings_mod
from collector.state import EXTENSION, Collector
from collector.store import Store
from collector.tokens import load_tokens

JSON_PATHS = ("/data", "/api/", "/metrics", "/healthz")
_app_numbers = itertools.count(1)


def _batch_log(log_file: str | None) -> logging.Logger:
    """This app's batch log: the console (through the 'collector' logger) and, if asked, a plain file
    with one line per batch, like the original's server_data.log."""
    log = logging.getLogger(f"collector.batches.{next(_app_numbers)}")
    log.setLevel(logging.INFO)
    if log_file:
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
    return log


def _console_log() -> logging.handlers.QueueListener:
    """Log lines go to stderr from a thread of their own; a request only queues its line. (A handler
    writes under a lock, and under load the request threads would queue on it, one per batch.)"""
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    lines: queue.SimpleQueue = queue.SimpleQueue()
    # what no line shows, not gathered for each (the logging HOWTO's "Optimization"): the caller's
    # file and line (a walk up the stack), thread and process names
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.root.addHandler(logging.handlers.QueueHandler(lines))
    logging.root.setLevel(logging.INFO)
    listener = logging.handlers.QueueListener(lines, console)
    listener.start()
    return listener


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The collector app. config keys are collector.settings.Settings fields (db_url, log_file, tokens,
    max_body, legacy_slack_s); None reads COLLECTOR_* environment variables (for gunicorn)."""
    settings = settings_mod.from_mapping(config)
    app = Flask(__name__, template_folder="collector/templates", static_folder="collector/static")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body
    app.extensions[EXTENSION] = Collector(settings, Store(settings.db_url), _batch_log(settings.log_file))
    for blueprint in (ingest.bp, api.bp, dashboard.bp):
        app.register_blueprint(blueprint)

    @app.before_request
    def _refuse_nul_in_query():
        # PostgreSQL text cannot hold NUL: refuse it here rather than fail in the database
        if any("\x00" in key or "\x00" in value for key, value in request.args.items(multi=True)):
            return jsonify({"status": "error", "reason": "bad_query", "detail": "NUL in the query string"}), 400
        return None

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException):
        if request.path.startswith(JSON_PATHS):
            return jsonify({"status": "error", "reason": (e.name or "error").lower().replace(" ", "_"),
                            "detail": e.description}), e.code
        return e

    @app.errorhandler(SQLAlchemyError)
    def _storage_error(e: SQLAlchemyError):
        app.extensions[EXTENSION].log.error("storage error on %s: %s", request.path, type(e).__name__)
        return jsonify({"status": "error", "reason": "storage_unavailable", "detail": type(e).__name__}), 503

    return app


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="server.py", description=__doc__.split("\n\n")[0],
                                     epilog="examples:" + __doc__.split("EXAMPLES:")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000)")
    parser.add_argument("--db", default=settings_mod.DEFAULT_DB,
                        help="database: an SQLite file path or URL (default ./collector.db), or postgresql://...")
    parser.add_argument("--log-file", help="also write one line per batch to this file")
    parser.add_argument("--token", help="require this upload token, named 'token' (visible in ps: prefer --tokens-file)")
    parser.add_argument("--tokens-file", help="require one of these tokens: lines 'name token', or JSON {name: token}")
    parser.add_argument("--max-body", type=int, default=settings_mod.DEFAULT_MAX_BODY,
                        help="largest request body in bytes, before and after gunzip (default 8 MiB)")
    parser.add_argument("--threads", type=int, default=8, help="waitress worker threads (default 8)")
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error("--port must be 1..65535")
    if args.max_body < 1024:
        parser.error("--max-body must be at least 1024")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    try:
        args.tokens = load_tokens(args.token, args.tokens_file)
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = _console_log()
    try:
        return _serve(args)
    finally:
        console.stop()  # writes out the lines still queued


def _serve(args: argparse.Namespace) -> int:
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" chatter under load
    try:
        app = create_app({"db_url": args.db, "log_file": args.log_file, "tokens": args.tokens,
                          "max_body": args.max_body})
    except (SQLAlchemyError, ValueError, OSError) as e:
        print(f"server.py: cannot open the database or log: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    store = app.extensions[EXTENSION].store
    try:
        server = httpserver.make_server(app, args.host, args.port, args.threads, args.max_body)
    except OSError as e:
        print(f"server.py: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        store.close()
        return 1
    logging.getLogger("collector").info(
        "collector on http://%s:%d/ storing in %s%s", args.host, args.port, store.engine.url.render_as_string(),
        f", {len(args.tokens)} token(s) required" if args.tokens else " (no tokens: anyone may post)")
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C is how an instructor stops it
        pass
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
