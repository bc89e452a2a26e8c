"""The collector an instructor runs for a lab, as a Flask app: create_app() wires payload validation
(body.py, payload.py), storage (store.py, writer.py), the JSON and Prometheus API (api.py), profiles
(profile_api.py) and the dashboard (dashboard.py, compare.py, explorer.py). server.py at the top
serves it with waitress; gunicorn can import `collector:create_app()` (settings then come from COLLECTOR_* environment variables)."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flask import Flask, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException

from collector import (
    api,
    compare,
    dashboard,
    explorer,
    guard,
    ingest,
    otlp_export,
    profile_api,
    pusher,
    query_params,
    retention,
)
from collector import settings as settings_mod
from collector.state import EXTENSION, JSON_PATHS, PUSH_EXTENSION, Collector, error
from collector.store import Store

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

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


def create_app(settings: Mapping[str, Any] | None = None) -> Flask:
    """The collector app. settings: collector.settings.Settings fields by name (db_url, log_file, tokens,
    max_body, legacy_slack_s, retention, max_db_bytes, compact_every_s, push_targets); None reads COLLECTOR_* environment variables (for gunicorn)."""
    app_settings = settings_mod.from_mapping(settings)
    # named "server" as before the move (Flask names the app's logger after it); files from this package
    app = Flask("server", root_path=os.path.dirname(os.path.abspath(__file__)), template_folder="templates",
                static_folder="static")
    app.config["MAX_CONTENT_LENGTH"] = app_settings.max_body
    store = Store(app_settings.db_url, app_settings.max_streams, retention.parse_policy(app_settings.retention),
                  app_settings.max_db_bytes)
    app.extensions[EXTENSION] = Collector(app_settings, store, _batch_log(app_settings.log_file))
    store.compactor.start(app_settings.compact_every_s)
    for blueprint in (ingest.bp, api.bp, profile_api.bp, otlp_export.bp, dashboard.bp, compare.bp, explorer.bp):
        app.register_blueprint(blueprint)
    guard.install(app, app_settings)

    @app.before_request
    def _refuse_nul_in_query() -> ResponseReturnValue | None:
        # PostgreSQL text cannot hold NUL: refuse it here rather than fail in the database
        if any("\x00" in key or "\x00" in value for key, value in request.args.items(multi=True)):
            return error(400, "bad_query", "NUL in the query string")
        return query_params.refuse_unknown()

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException) -> ResponseReturnValue:
        if request.path.startswith(JSON_PATHS):
            return error(e.code, (e.name or "error").lower().replace(" ", "_"), e.description)
        return dashboard.error_page(e)

    @app.errorhandler(SQLAlchemyError)
    def _storage_error(e: SQLAlchemyError) -> ResponseReturnValue:
        app.extensions[EXTENSION].log.error("storage error on %s: %s", request.path, type(e).__name__)
        return error(503, "storage_unavailable", type(e).__name__)

    # last: its threads start reading the store once the app is whole (server.py stops them)
    app.extensions[PUSH_EXTENSION] = pusher.start(app.extensions[EXTENSION].store, app_settings.push_targets)
    return app
