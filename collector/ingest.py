"""POST /data: authenticate, read and validate the batch, store it once, answer with the stream's
gaps. A rejected request stores nothing (only a rejection counter moves) and gets a 4xx JSON reason.
Served by httpserver.py, a request was authorized on its headers before its body was read; served
otherwise (gunicorn, a test client), it is authorized here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import orjson
from flask import Blueprint, Response, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import RequestEntityTooLarge

from collector.body import decode_body
from collector.payload import Batch, parse_body
from collector.rejections import Rejected, bad
from collector.settings import Settings
from collector.state import ACCEPTS, Collector, error, state
from collector.tokens import TOKEN_QUERY_PARAM, authenticate
from collector.writer import Ingest, IngestResult

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

bp = Blueprint("ingest", __name__)


# what a web page may post to any site without asking first (a CORS "simple request")
FORM_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
# the WSGI environ's key for the HTTP server's verdict on the headers, (token name,): no header can set
# it (waitress names those HTTP_*)
AUTHORIZED = "collector.authorized"


def authorize(settings: Settings, header: Callable[[str], str | None], query_token: str | None) -> str | None:
    """The name of the request's token (None when no tokens are configured); raises Rejected. Judged on
    the headers alone (header(name) gives one): the HTTP server calls it before reading the body
    (httpserver.py). A post from a web page, one with another site's Origin or a form's content type,
    is refused: with no tokens (the default) any page on the lab network could post otherwise."""
    token_name = None
    if settings.auth_required:
        token_name = authenticate(header("Authorization"), query_token, settings.tokens)
        if token_name is None:
            raise Rejected(401, "unauthorized", "missing or unknown token (send Authorization: Bearer <token>)")
    origin = header("Origin")
    if origin is not None and urlsplit(origin).netloc.lower() != (header("Host") or "").lower():
        raise Rejected(403, "forbidden", "a web page of another site may not post here")
    if (header("Content-Type") or "").split(";")[0].strip().lower() in FORM_TYPES:
        raise Rejected(415, "bad_content_type", "send the batch as application/json")
    return token_name


def note_rejection(app: Collector, e: Rejected, remote: str) -> None:
    """Count (in memory: no database write per rejection) and log a refused request."""
    app.store.reject(e.reason)
    app.log.warning("rejected %s from %s: %s", e.reason, remote, e.detail)


def _read(app: Collector) -> tuple[Batch, str | None]:
    settings = app.settings
    authorized = request.environ.get(AUTHORIZED)
    if authorized is not None:
        (token_name,) = authorized
    else:
        token_name = authorize(settings, request.headers.get, request.args.get(TOKEN_QUERY_PARAM))
    try:
        raw = request.get_data(cache=False)
    except RequestEntityTooLarge:
        raise bad("too_large", f"body is over the limit of {settings.max_body} bytes") from None
    body = decode_body(raw, request.headers.get("Content-Encoding"), settings.max_body)
    return parse_body(body), token_name


@bp.post("/data")
def receive() -> ResponseReturnValue:
    app = state()
    remote = request.remote_addr or "unknown"
    try:
        batch, token_name = _read(app)
    except Rejected as e:
        note_rejection(app, e, remote)
        response, status = error(e.status, e.reason, e.detail)
        if e.status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response, status, ACCEPTS
    if batch.legacy:
        batch.host = remote  # the original client says nothing about itself
    try:
        result = app.store.writer.ingest(Ingest(batch, token_name, remote, app.settings.legacy_slack_s))
    except SQLAlchemyError as db_error:
        # not the client's fault: 503 so it keeps the batch and retries
        app.log.error("storage failed for batch %s: %s", batch.batch_id, db_error.__class__.__name__)
        return (*error(503, "storage_unavailable", "the database did not take the batch; retry later"), ACCEPTS)
    if result.full:
        e = Rejected(429, "too_many_streams", f"the collector holds {app.settings.max_streams} streams, its limit"
                     " (server.py --max-streams)")
        note_rejection(app, e, remote)
        return (*error(e.status, e.reason, e.detail), ACCEPTS)
    if result.owner is not None:
        e = Rejected(403, "forbidden", f"stream {result.host}/{result.run_id}/{result.source} belongs to another token")
        note_rejection(app, e, remote)
        return (*error(e.status, e.reason, e.detail), ACCEPTS)
    _log_batch(app, batch.batch_id, result, token_name, remote)
    return Response(orjson.dumps(_answer(batch.batch_id, result)), 200, ACCEPTS, mimetype="application/json")


def _answer(batch_id: str, result: IngestResult) -> dict:
    """The acknowledgement: the client counts its batch delivered only on an answer naming batch_id."""
    missing = result.stream.missing()
    return {"status": "ok", "batch_id": batch_id, "duplicate": result.duplicate, "host": result.host, "run_id": result.run_id,
            "source": result.source, "sequence": result.sequence, "stored_records": result.stored_records,
            "highest": result.stream.highest, "missing": missing, "missing_count": result.stream.missing_count,
            "missing_truncated": len(missing) < result.stream.missing_count}


def _log_batch(app: Collector, batch_id: str, result: IngestResult, token_name: str | None, remote: str) -> None:
    missing = result.stream.missing_count
    line = (f"batch {batch_id} seq={result.sequence} source={result.source} host={result.host} run={result.run_id} "
            f"records={result.stored_records} from={remote}")
    if token_name:
        line += f" by={token_name}"
    if result.duplicate:
        line += " duplicate"
    if missing:
        line += f" missing={missing}"
        app.log.warning(line)
    else:
        app.log.info(line)
