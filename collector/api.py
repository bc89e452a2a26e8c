"""Reading endpoints: /api/streams, /api/records (JSON, CSV or NDJSON), /metrics, /healthz."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from flask import Blueprint, Response, jsonify, request
from sqlalchemy.exc import SQLAlchemyError

from collector import prometheus
from collector.payload import MAX_RECORDS
from collector.state import ACCEPTS, error, state

bp = Blueprint("api", __name__)

LIMIT_DEFAULT = {"json": 1000, "csv": 100_000, "ndjson": 100_000}
LIMIT_MAX = 1_000_000
FIXED_COLUMNS = ("id", "host", "run_id", "source", "sequence", "batch_id", "ts", "kind", "metric")


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


def record_item(row: dict) -> dict:
    """A stored record as the API shows it: where it came from, and the record itself."""
    item = {k: row[k] for k in FIXED_COLUMNS}
    item["record"] = json.loads(row["data"])
    return item


@bp.get("/api/streams")
def streams():
    return jsonify({"streams": [s.as_dict() for s in state().store.streams(**_stream_filters())]})


@bp.get("/api/records")
def records():
    fmt = request.args.get("format", "json")
    try:
        if fmt not in LIMIT_DEFAULT:
            raise BadQuery("format must be json, csv or ndjson")
        limit_text = request.args.get("limit") or str(LIMIT_DEFAULT[fmt])
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= LIMIT_MAX:
            raise BadQuery(f"limit must be an integer from 1 to {LIMIT_MAX}")
        rows = state().store.records(**_stream_filters(), kind=request.args.get("kind") or None,
                                     since=_number("since"), until=_number("until"), limit=int(limit_text))
    except BadQuery as e:
        return error(400, "bad_query", str(e))
    items = [record_item(r) for r in rows]
    if fmt == "ndjson":
        body = "".join(json.dumps(i, separators=(",", ":")) + "\n" for i in items)
        return Response(body, mimetype="application/x-ndjson",
                        headers={"Content-Disposition": "attachment; filename=records.ndjson"})
    if fmt == "csv":
        return Response(to_csv(items), mimetype="text/csv",
                        headers={"Content-Disposition": "attachment; filename=records.csv"})
    return jsonify({"count": len(items), "records": items})


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a text cell as a formula


def neutral(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula gets a leading ' (a
    process named "=cmd|' /C calc'!A0" must not run anything on the instructor's machine)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _cell(value: Any) -> Any:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else neutral(value)


def to_csv(items: list[dict]) -> str:
    """One row per record: where it came from, then the union of the records' own fields."""
    fields: dict[str, None] = {}
    for item in items:
        fields.update(dict.fromkeys(k for k in item["record"] if k not in FIXED_COLUMNS))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([*FIXED_COLUMNS, *map(neutral, fields)])
    for item in items:
        writer.writerow([_cell(item[k]) for k in FIXED_COLUMNS] + [_cell(item["record"].get(f, "")) for f in fields])
    return out.getvalue()


@bp.get("/metrics")
def metrics():
    store = state().store
    batches, records_n = store.totals()
    text = prometheus.render(batches, records_n, store.counters(), store.streams())
    return Response(text, content_type=prometheus.CONTENT_TYPE)


@bp.get("/healthz")
def healthz():
    app = state()
    try:
        app.store.ping()
    except SQLAlchemyError as e:
        return error(503, "storage_unavailable", type(e).__name__)
    return jsonify({"status": "ok", "database": app.store.dialect, "schemas": [0, 1],
                    "content_encodings": ["identity", "gzip"], "max_body": app.settings.max_body,
                    "max_records": MAX_RECORDS, "auth": app.settings.auth_required}), 200, ACCEPTS
