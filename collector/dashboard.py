"""GET / (every stream of the lab) and GET /stream (one host/run/source: a chart and its records),
server-rendered HTML with no script, so it works offline and in any browser."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

from flask import Blueprint, abort, render_template, request, url_for
from markupsafe import Markup

from collector import chart
from collector.profile_api import speedscope_available
from collector.profiles import RANGES, BadRange, bound, range_profile
from collector.rejections import REASONS
from collector.state import error, state
from profile_data import flame_svg
from profile_data.display import format_weight

bp = Blueprint("dashboard", __name__)

TABLE_ROWS = 200
CHART_ROWS = 5000
TABLE_COLUMNS = 16
CELL_CHARS = 80
FLAME_RANGE = "5m"  # the flame graph's range when the page names none
RECORD_SHOWN = 64 * 1024  # a record with more stored text is neither parsed nor charted here
TOO_LARGE = f"(over {RECORD_SHOWN // 1024} KB: read it with /api/records)"


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
    sample = store.records(**key, limit=TABLE_ROWS, newest=True, max_text=RECORD_SHOWN)
    rows = store.records(**key, kind=kind, limit=TABLE_ROWS, newest=True, max_text=RECORD_SHOWN) if kind else sample
    plot = chart.choose(source, [r for r in sample if r["data"] is not None])
    svg = ""
    if plot is not None:
        charted = store.records(**key, kind=plot.kind, limit=CHART_ROWS, newest=True, max_text=RECORD_SHOWN)
        svg = chart.svg(plot, chart.points(plot, [r for r in charted if r["data"] is not None]))
    records = [json.loads(r["data"]) if r["data"] is not None else {"record": TOO_LARGE} for r in rows]
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(k for k in record if k not in ("metric", "ts", "kind")))
    columns_list = list(columns)[:TABLE_COLUMNS]
    table = [{"ts": r["ts"], "sequence": r["sequence"], "kind": r["kind"],
              "cells": [_cell(rec[c]) if c in rec else "" for c in columns_list]}
             for r, rec in zip(rows, records, strict=True)]
    kinds = sorted({r["kind"] for r in sample} | ({kind} if kind else set()))
    try:
        flame = _flame(key, kind) if store.newest_stack_ts(**key) is not None else None
    except BadRange as e:
        return error(400, "bad_query", str(e))
    return render_template("stream.html", stream=found, key=key, kind=kind, kinds=kinds, plot=plot,
                           chart_svg=Markup(svg), columns=columns_list, table=table, ranges_text=ranges_text,
                           flame=flame)


def _flame(key: dict[str, str], kind: str | None) -> dict:
    """The stream's flame graph for the page's range, zoom (focus: the frames' path, ';'-joined) and
    search, with what the page shows around it."""
    args = request.args
    range_text = args.get("range") or FLAME_RANGE
    since, until = bound("since", args.get("since")), bound("until", args.get("until"))
    search = args.get("search", "")[:200]
    focus = [f for f in args.get("focus", "").split(flame_svg.PATH_SEP) if f]
    view = {"range": range_text, **({"since": args["since"]} if since is not None else {}),
            **({"until": args["until"]} if until is not None else {})}
    result = range_profile(state().store, **key, range_text=range_text, since=since, until=until)
    page = {**key, **({"kind": kind} if kind else {})}

    def zoom(path: list[str], search: str | None = search or None) -> str:
        return url_for("dashboard.stream", **page, **view, search=search, focus=flame_svg.PATH_SEP.join(path) or None,
                       _anchor="flame")

    custom = since is not None or until is not None
    ranges = [(r, None if r == range_text and not custom else
               url_for("dashboard.stream", **page, range=r, search=search or None, _anchor="flame")) for r in RANGES]

    graph = flame_svg.render(result.profile, focus, search, zoom, title=f"{key['source']} flame graph")
    unit = result.profile.unit
    return {"graph": graph, "svg": Markup(graph.svg), "result": result, "range": range_text, "ranges": ranges,
            "search": search, "page": page, "view": view, "reset": zoom([]),
            "unsearch": zoom(focus, None),
            "total": format_weight(result.profile.total, unit), "focused": format_weight(graph.total, unit),
            "matched": format_weight(graph.matched, unit),
            "matched_pct": graph.matched / graph.total * 100 if graph.total else 0.0,
            "exports": {fmt: url_for("profile_api.profile", **key, **view, format=fmt)
                        for fmt in ("folded", "speedscope", "pprof")},
            "viewer": speedscope_link(key, view) if speedscope_available() else None}


def speedscope_link(key: dict[str, str], view: dict[str, str]) -> str:
    """speedscope's viewer, served by the collector, opening this range's speedscope export."""
    export = url_for("profile_api.profile", **key, **view, format="speedscope")
    title = f"{key['source']} on {key['host']}"
    return (url_for("profile_api.speedscope_file", name="index.html") + "#profileURL=" + quote(export, safe="")
            + "&title=" + quote(title, safe=""))
