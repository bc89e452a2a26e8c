"""What one collector app holds (settings, store, batch log) and the JSON error shape every endpoint
uses: {"status": "error", "reason": <code>, "detail": <one line>}."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Response, current_app, jsonify

from collector.settings import Settings
from collector.store import Store

EXTENSION = "collector"
# RFC 7694: a server lists in Accept-Encoding the codings it takes in request bodies
ACCEPTS = {"Accept-Encoding": "gzip"}


@dataclass
class Collector:
    settings: Settings
    store: Store
    log: logging.Logger  # one line per batch; never sees a token


def state() -> Collector:
    return current_app.extensions[EXTENSION]


def error_body(reason: str, detail: str) -> dict[str, str]:
    """The one JSON error shape, for replies made outside a Flask request too (httpserver.py)."""
    return {"status": "error", "reason": reason, "detail": detail}


def error(status: int, reason: str, detail: str) -> tuple[Response, int]:
    return jsonify(error_body(reason, detail)), status
