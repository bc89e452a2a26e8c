"""Reading endpoints: /api/streams, /api/records (JSON, CSV or NDJSON), /metrics, /healthz."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from client.wire import SCHEMAS
from collector import export, prometheus
from collector.measurements import Measurements
from collector.payload import MAX_RECORDS
from collector.state import ACCEPTS, error, push_stats, state
from collector.store import Cursor, RecordFilters

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue
    from werkzeug.datastructures import MultiDict

bp = Blueprint("api", __name__)

LIMIT_DEFAULT = {"json": 1000, "csv": 100_000, "ndjson": 100_000}
LIMIT_MAX = 1_000_000
PAGE_BYTES = 64 * 2**20  # of stored record text in one answer; the rest is on the next page
MEASUREMENTS = "collector.measurements"
MIMETYPES = {"json": "application/json", "csv": "text/csv", "ndjson": "application/x-ndjson"}


class BadQuery(ValueError):
    pass


def _number(name: str) -> float | None:
    value = request.args.get(name)
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except ValueError:
        raise BadQuery(f"{name} must be unix seconds") from None
    if not math.isfinite(number):
        raise BadQuery(f"{name} must be unix seconds")
    return number


def _stream_filters() -> dict[str, str | None]:
    return {k: request.args.get(k) or None for k in ("host", "run_id", "source")}


CGROUP_MATCHES = ("exact", "tree")
CGROUP_MAX = 4096  # PATH_MAX


def cgroup_filter(args: MultiDict[str, str]) -> dict:
    """cgroup=PATH (a v2 path as records carry it, '/' first) and cgroup_match=exact (default: that group
    only) or tree (that group and every group below it), as RecordFilters fields."""
    path, match = args.get("cgroup") or None, args.get("cgroup_match") or "exact"
    if match not in CGROUP_MATCHES:
        raise BadQuery("cgroup_match must be exact or tree")
    if path is None:
        if args.get("cgroup_match") and "cgroup" not in args:  # (a form's empty cgroup box: no filter)
            raise BadQuery("cgroup_match needs a cgroup")
        return {}
    return {"cgroup": cgroup_path(path), "cgroup_tree": match == "tree"}


def cgroup_path(path: str) -> str:
    """A cgroup v2 path as records carry it ('/' first, no trailing '/'); BadQuery for anything else."""
    if not path.startswith("/") or len(path) > CGROUP_MAX or any(ord(c) < 32 for c in path):
        raise BadQuery("cgroup must be a cgroup v2 path as records carry it, '/' first "
                       "(e.g. /system.slice/nginx.service)")
    return (path.rstrip("/") or "/") if len(path) > 1 else path


def _cursor() -> Cursor | None:
    """The cursor query parameter: where the previous page ended, as its next_cursor gave it."""
    text = request.args.get("cursor")
    if not text:
        return None
    ts, _, row_id = text.partition(":")
    try:
        cursor = Cursor(float(ts), int(row_id))
    except ValueError:
        raise BadQuery("cursor must be a next_cursor this API gave") from None
    if not math.isfinite(cursor.ts) or not 0 <= cursor.id < 2**63 or not row_id.isascii():
        raise BadQuery("cursor must be a next_cursor this API gave")
    return cursor


def _limit(fmt: str) -> int:
    text = request.args.get("limit") or str(LIMIT_DEFAULT[fmt])
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= LIMIT_MAX:
        raise BadQuery(f"limit must be an integer from 1 to {LIMIT_MAX}")
    return int(text)


@bp.get("/api/streams")
def streams() -> ResponseReturnValue:
    return jsonify({"streams": [s.as_dict() for s in state().store.streams(**_stream_filters())]})


@bp.get("/api/records")
def records() -> ResponseReturnValue:
    """A page of records: at most `limit` of them and PAGE_BYTES of their text, written as they are read;
    when more may follow, the next_cursor (in the X-Next-Cursor header, a Link header and, in JSON, the
    body) asks for the next page."""
    fmt = request.args.get("format", "json")
    try:
        if fmt not in LIMIT_DEFAULT:
            raise BadQuery("format must be json, csv or ndjson")
        filters = RecordFilters(**_stream_filters(), kind=request.args.get("kind") or None,
                                since=_number("since"), until=_number("until"), **cgroup_filter(request.args))
        after, limit = _cursor(), _limit(fmt)
    except BadQuery as e:
        return error(400, "bad_query", str(e))
    store = state().store
    page = store.record_page(filters, after, limit, PAGE_BYTES)
    headers = {}
    next_cursor = f"{page.last.ts!r}:{page.last.id}" if page.more else None
    if next_cursor:
        headers["X-Next-Cursor"] = next_cursor
        headers["Link"] = f'<{request.path}?{urlencode({**request.args, "cursor": next_cursor})}>; rel="next"'
    if fmt != "json":
        headers["Content-Disposition"] = f"attachment; filename=records.{fmt}"

    def rows() -> Iterator[dict]:
        return store.iter_records(filters, after, page.last) if page.last else iter(())

    body = {"json": lambda: export.json_page(page.rows, next_cursor, rows()),
            "ndjson": lambda: export.ndjson(rows()), "csv": lambda: export.csv_rows(rows)}[fmt]()
    return Response(body, mimetype=MIMETYPES[fmt], headers=headers)


@bp.get("/metrics")
def metrics() -> ResponseReturnValue:
    store = state().store
    batches, records_n = store.totals()
    text = prometheus.render(batches, records_n, store.counters(), store.streams())
    text += prometheus.render_push(push_stats())
    return Response(text + generate_latest(_measurements()).decode(), content_type=prometheus.CONTENT_TYPE)


def _measurements() -> CollectorRegistry:
    """This app's registry of the measurements (one per app: it keeps the histograms' running sums)."""
    registry = current_app.extensions.get(MEASUREMENTS)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Measurements(state().store))
        registry = current_app.extensions.setdefault(MEASUREMENTS, registry)
    return registry


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    app = state()
    try:
        app.store.ping()
    except SQLAlchemyError as e:
        return error(503, "storage_unavailable", type(e).__name__)
    return jsonify({"status": "ok", "database": app.store.dialect, "schemas": [0, *SCHEMAS],
                    "content_encodings": ["identity", "gzip"], "max_body": app.settings.max_body,
                    "max_records": MAX_RECORDS, "auth": app.settings.auth_required}), 200, ACCEPTS
