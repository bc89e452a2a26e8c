"""GET / (every stream of the lab) and GET /stream (one host/run/source: a chart and its records),
server-rendered HTML with no script, so it works offline and in any browser."""

from __future__ import annotations

import json
import time

from flask import Blueprint, abort, render_template, request
from markupsafe import Markup

from collector import chart
from collector.rejections import REASONS
from collector.state import state

bp = Blueprint("dashboard", __name__)

TABLE_ROWS = 200
CHART_ROWS = 5000
TABLE_COLUMNS = 16
CELL_CHARS = 80


@bp.app_template_filter("when")
def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts)) if ts else ""


@bp.app_template_filter("ago")
def ago(ts: float | None) -> str:
    if not ts:
        return ""
    seconds = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def ranges_text(gaps: list[tuple[int, int]], limit: int = 8) -> str:
    shown = [str(lo) if lo == hi else f"{lo}–{hi}" for lo, hi in gaps[:limit]]
    return ", ".join(shown) + (" …" if len(gaps) > limit else "")


@bp.get("/")
def index():
    store = state().store
    streams = store.streams()
    batches, records = store.totals()
    counters = store.counters()
    rejected = {r: counters.get("rejected:" + r, 0) for r in REASONS if counters.get("rejected:" + r)}
    return render_template("index.html", streams=streams, batches=batches, records=records,
                           duplicates=counters.get("duplicates", 0), rejected=rejected,
                           hosts=len({s.host for s in streams}), runs=len({(s.host, s.run_id) for s in streams}),
                           ranges_text=ranges_text)


def _cell(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


@bp.get("/stream")
def stream():
    host, run_id, source = (request.args.get(k, "") for k in ("host", "run_id", "source"))
    kind = request.args.get("kind") or None
    store = state().store
    found = store.stream(host, run_id, source)
    if found is None:
        abort(404)
    key = {"host": host, "run_id": run_id, "source": source}
    sample = store.records(**key, limit=TABLE_ROWS, newest=True)
    rows = store.records(**key, kind=kind, limit=TABLE_ROWS, newest=True) if kind else sample
    plot = chart.choose(source, sample)
    svg = ""
    if plot is not None:
        lines = chart.points(plot, store.records(**key, kind=plot.kind, limit=CHART_ROWS, newest=True))
        svg = chart.svg(plot, lines)
    records = [json.loads(r["data"]) for r in rows]
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(k for k in record if k not in ("metric", "ts", "kind")))
    columns_list = list(columns)[:TABLE_COLUMNS]
    table = [{"ts": r["ts"], "sequence": r["sequence"], "kind": r["kind"],
              "cells": [_cell(rec[c]) if c in rec else "" for c in columns_list]}
             for r, rec in zip(rows, records, strict=True)]
    kinds = sorted({r["kind"] for r in sample} | ({kind} if kind else set()))
    return render_template("stream.html", stream=found, key=key, kind=kind, kinds=kinds, plot=plot,
                           chart_svg=Markup(svg), columns=columns_list, table=table, ranges_text=ranges_text)
