"""What one collector app holds (settings, store, batch log) and the JSON error shape every endpoint
uses: {"status": "error", "reason": <code>, "detail": <one line>} — or, for a browser asking for one of
the dashboard's pages, the same reason as an HTML page (templates/error.html) with the same status."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Response, current_app, has_request_context, jsonify, make_response, render_template, request
from werkzeug.http import HTTP_STATUS_CODES

from collector.settings import Settings
from collector.store import Store

EXTENSION = "collector"
PUSH_EXTENSION = "collector.push"  # the app's Pusher (collector/pusher.py), None without push targets
JSON_PATHS = ("/data", "/api/", "/metrics", "/healthz")    # every answer JSON (or the exposition format)
# RFC 7694: a server lists in Accept-Encoding the codings it takes in request bodies
ACCEPTS = {"Accept-Encoding": "gzip"}


@dataclass
class Collector:
    settings: Settings
    store: Store
    log: logging.Logger  # one line per batch; never sees a token


def state() -> Collector:
    return current_app.extensions[EXTENSION]


def push_stats() -> list:
    """The push targets' PushStats (collector/pusher.py); [] when none is configured."""
    pusher = current_app.extensions.get(PUSH_EXTENSION)
    return pusher.stats() if pusher else []


def error_body(reason: str, detail: str) -> dict[str, str]:
    """The one JSON error shape, for replies made outside a Flask request too (httpserver.py)."""
    return {"status": "error", "reason": reason, "detail": detail}


def error(status: int, reason: str, detail: str) -> tuple[Response, int]:
    if wants_html():
        page = render_template("error.html", code=status, name=HTTP_STATUS_CODES.get(status, "Error"),
                               description=detail, reason=reason)
        return make_response(page, status), status
    return jsonify(error_body(reason, detail)), status


def wants_html() -> bool:
    """A browser asking for a page: not one of the JSON paths, and text/html preferred to JSON in its
    Accept header. curl (*/*), scripts (no Accept) and API clients get JSON."""
    if not has_request_context() or request.path.startswith(JSON_PATHS):
        return False
    return request.accept_mimetypes.best_match(("application/json", "text/html")) == "text/html"
