"""GET / (every stream of the lab) and GET /stream (one host/run/source: a chart and its records),
server-rendered HTML with no script, so it works offline and in any browser."""

from __future__ import annotations

import functools
import json
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from flask import Blueprint, abort, current_app, jsonify, render_template, request, send_from_directory, url_for
from markupsafe import Markup
from werkzeug.exceptions import HTTPException

from collector import chart, flame_views, heatmap, table, timeline, trend
from collector.api import BadQuery, cgroup_filter
from collector.profile_api import speedscope_available
from collector.profiles import RANGES, BadRange, bound, parse_range, range_profile
from collector.rejections import REASONS
from collector.state import error, push_stats, state
from profile_data import flame_svg
from profile_data.display import weight_text
from registry import units

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

    from collector.store import Store

bp = Blueprint("dashboard", __name__)

TABLE_ROWS = 200  # records read to find a stream's kinds and chart
PAGE_ROWS = 100  # records a page of the table shows, newest first
MAX_PAGES = 50
PAGE_RANGES = ("5m", "1h", "run")  # the stream page's picker (plus custom since/until)
QUIET_S = 30  # a host with no batch for this long stands out on the overview
TREND_POINTS = trend.POINTS
CHART_ROWS = 5000
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


@bp.app_template_global("stream_url")
def stream_url(host: str, run_id: str, source: str) -> str:
    """A stream page's address (url_for once, the query by urlencode: 500 url_for calls cost the overview
    90 ms)."""
    return _with_query(url_for("dashboard.stream"), host, run_id, source)


@functools.lru_cache(maxsize=4096)
def _with_query(path: str, host: str, run_id: str, source: str) -> str:
    return path + "?" + urlencode({"host": host, "run_id": run_id, "source": source})


def ranges_text(gaps: list[tuple[int, int]], limit: int = 8) -> str:
    shown = [str(lo) if lo == hi else f"{lo}–{hi}" for lo, hi in gaps[:limit]]
    return ", ".join(shown) + (" …" if len(gaps) > limit else "")


@bp.get("/")
def index() -> ResponseReturnValue:
    store = state().store
    streams = store.streams()
    batches, records = store.totals()
    counters = store.counters()
    rejected = {r: counters.get("rejected:" + r, 0) for r in REASONS if counters.get("rejected:" + r)}
    sources = {s.source for s in streams}
    return render_template("index.html", streams=streams, batches=batches, records=records,
                           retention=retention_shown(store.retention(counters)),
                           duplicates=counters.get("duplicates", 0), rejected=rejected,
                           hosts=len({s.host for s in streams}), runs=len({(s.host, s.run_id) for s in streams}),
                           ranges_text=ranges_text, overview=overview_hosts(streams), quiet_s=QUIET_S,
                           sources=sorted(sources), compare_urls={source: url_for("compare.page", source=source)
                                                                   for source in sources},
                           pushes=[p.as_dict() for p in push_stats()])


@bp.get("/api/overview")
def overview() -> ResponseReturnValue:
    """The lab overview as JSON: every host, its last contact, its newest run's metrics and their trends;
    what retention merged and deleted (counts of records, every process's) and its newest pass."""
    store = state().store
    return jsonify({"now": time.time(), "quiet_after_s": QUIET_S, "hosts": overview_hosts(store.streams()),
                    "retention": store.retention()})


def retention_shown(done: dict) -> dict:
    """What compaction did, with its sizes and last pass in words (the overview's retention line)."""
    return {**done, "db_size": units.byte_size(done["db_bytes"]) if done["db_bytes"] is not None else None,
            "bound": units.byte_size(done["max_db_bytes"]) if done["max_db_bytes"] else None,
            "last_pass_ago": ago(done["last_pass"])}


def overview_hosts(streams: list) -> list[dict]:
    """Per host (quiet ones first): last contact and, for each metric's newest run, records/s over the
    run, drops, gaps and a trend of its key figure (the chart's field) over its newest records."""
    now = time.time()
    by_host: dict[str, dict] = {}
    newest: dict[str, list] = {}  # source: its streams shown (each host's newest run)
    for s in streams:  # most recently seen first
        host = by_host.setdefault(s.host, {"host": s.host, "last_seen": s.last_seen, "metrics": {}})
        if s.source in host["metrics"]:
            continue
        newest.setdefault(s.source, []).append(s)
        span = s.last_seen - s.first_seen
        host["metrics"][s.source] = {
            "source": s.source, "run_id": s.run_id, "last_seen": s.last_seen,
            "running": now - s.last_seen < QUIET_S, "records": s.records,
            "records_per_s": round(s.records / span, 2) if span > 0 else None, "dropped": s.dropped,
            "missing": s.missing_count, "url": stream_url(s.host, s.run_id, s.source),
            "trend": None}
    stored = state().store.trends() if newest else {}
    for source, shown in newest.items():
        trends = _trends(source, shown, stored)
        for s in shown:
            by_host[s.host]["metrics"][source]["trend"] = trends.get((s.host, s.run_id))
    hosts = []
    for host in by_host.values():
        host["quiet"] = now - host["last_seen"] >= QUIET_S
        host["ago"] = ago(host["last_seen"])
        host["metrics"] = sorted(host["metrics"].values(), key=lambda m: m["source"])
        hosts.append(host)
    return sorted(hosts, key=lambda h: (not h["quiet"], h["host"]))


def _trends(source: str, shown: list, stored: dict) -> dict[tuple[str, str], dict | None]:
    """The trend of each of a metric's streams: for a registered metric, the newest values of its key
    figure as the writer keeps them in the stream's row (trend.py); a stream whose row holds fewer
    (young, or stored before that), read by the database from its records for every such host at once;
    one whose records lack the figure's fields, or of a metric the registry does not know, the slower
    way (its newest records parsed here)."""
    plot = trend.declared(source)
    found: dict[tuple[str, str], dict | None] = {}
    if plot is not None:
        short = []
        for s in shown:
            values = trend.values(stored.get((s.host, s.run_id, source)), source)
            if len(values) >= TREND_POINTS:
                found[(s.host, s.run_id)] = _trend_of(plot, values[-TREND_POINTS:])
            else:
                short.append(s)
        if short:
            field, hist = plot.field_sql
            values = state().store.field_values(source, [(s.host, s.run_id) for s in short], plot.kind, field, hist,
                                                limit=TREND_POINTS, per=plot.figure.per, scale=plot.figure.scale)
            found.update((key, _trend_of(plot, [v for _t, v in pts])) for key, pts in values.items())
    for s in shown:
        if (s.host, s.run_id) not in found:
            found[(s.host, s.run_id)] = _trend(s.host, s.run_id, s.source)
    return found


def _trend_of(plot: chart.Plot, values: list[float]) -> dict | None:
    if not values:
        return None
    return {"label": plot.title, "unit": plot.unit, "values": values, "last": chart.value_text(plot, values[-1]),
            "svg": chart.sparkline(values)}


def _trend(host: str, run_id: str, source: str) -> dict | None:
    """The stream's first numeric field over its newest records, parsed here (a metric the registry
    does not know, or whose records lack its key figure's fields); none when it is a summed timeline
    (a profile's metric: its per-process lines are no one figure)."""
    store = state().store
    sample = [r for r in store.records(host, run_id, source, limit=50, newest=True, max_text=RECORD_SHOWN)
              if r["data"] is not None]
    plot = chart.choose(source, sample)
    if plot is None or plot.summed:
        return None
    rows = [r for r in store.records(host, run_id, source, kind=plot.kind, limit=TREND_POINTS * 2, newest=True,
                                     max_text=RECORD_SHOWN) if r["data"] is not None]
    lines = chart.points(plot, rows, split=False)  # the trend follows every event, failed or not
    return _trend_of(plot, [v for pts in list(lines.values())[:1] for _t, v in pts][-TREND_POINTS:])


def error_page(e: HTTPException) -> ResponseReturnValue:
    """An HTML page for an HTTP error on a dashboard page (the JSON paths answer JSON)."""
    return render_template("error.html", code=e.code, name=e.name, description=e.description), e.code


@bp.get("/favicon.ico")
def favicon() -> ResponseReturnValue:
    return send_from_directory(current_app.static_folder, "favicon.svg", mimetype="image/svg+xml", max_age=86400)


def _page_window(store: Store, key: dict[str, str]) -> tuple[str, float | None, float | None]:
    """The page's range (range=5m|1h|run|..., or since/until for a custom one) as (name, since, until)."""
    args = request.args
    since, until = bound("since", args.get("since")), bound("until", args.get("until"))
    if since is not None or until is not None:
        if since is not None and until is not None and since > until:
            raise BadRange("since is after until")
        return "custom", since, until
    name, seconds = parse_range(args.get("range") or "run")
    if seconds is None:
        return name, None, None
    newest = store.records(**key, limit=1, newest=True, max_text=0)
    return name, (newest[0]["ts"] - seconds if newest else None), None


def _page_number() -> int:
    text = request.args.get("page") or "1"
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PAGES:
        raise BadRange(f"page must be an integer from 1 to {MAX_PAGES}")
    return int(text)


@bp.get("/stream")
def stream() -> ResponseReturnValue:
    host, run_id, source = (request.args.get(k, "") for k in ("host", "run_id", "source"))
    kind = request.args.get("kind") or None
    store = state().store
    found = store.stream(host, run_id, source)
    if found is None:
        abort(404, description=f"No stream of {source!r} from host {host!r}, run {run_id!r}. "
                               "The lab overview lists the streams the collector holds.")
    key = {"host": host, "run_id": run_id, "source": source}
    try:
        range_name, since, until = _page_window(store, key)
        page = _page_number()
        of_cgroup = cgroup_filter(request.args)
    except (BadRange, BadQuery) as e:
        return error(400, "bad_query", str(e))
    window = {"since": since, "until": until}
    sample = store.records(**key, limit=TABLE_ROWS, newest=True, max_text=RECORD_SHOWN)
    shown = store.records(**key, kind=kind, **window, **of_cgroup, limit=PAGE_ROWS * page + 1, newest=True,
                          max_text=RECORD_SHOWN)
    shown.reverse()  # newest first
    more = len(shown) > PAGE_ROWS * page
    rows = shown[PAGE_ROWS * (page - 1):PAGE_ROWS * page]
    plot = chart.choose(source, [r for r in sample if r["data"] is not None])
    svg = heat = title = partial = ""
    cgroup_args = {k: request.args[k] for k in ("cgroup", "cgroup_match")
                   if request.args.get(k) and request.args.get("cgroup")}
    asked = table.asked_columns(request.args.getlist("columns"))
    chosen = {"columns": ",".join(asked)} if asked else {}   # kept as asked: another kind may carry other fields
    if plot is not None:
        charted = [r for r in store.records(**key, kind=plot.kind, **window, limit=CHART_ROWS, newest=True,
                                            max_text=RECORD_SHOWN) if r["data"] is not None]
        pick = None
        if plot.summed:   # a profile's metric per process: each interval a link to its range's flame graph
            summaries = timeline.summary_of([r for r in store.records(
                **key, kind="summary", **window, limit=CHART_ROWS, newest=True, max_text=RECORD_SHOWN)
                if r["data"] is not None]) if plot.per else {}
            lines = timeline.points(plot, charted, summaries)
            partial = chart.partial_note(list(summaries.values()))
            here = {**key, **({"kind": kind} if kind else {}), **cgroup_args, **chosen}

            def pick(since: float, until: float) -> str:
                return url_for("dashboard.stream", **here, since=f"{since:.3f}", until=f"{until:.3f}", _anchor="flame")
        else:
            lines = chart.points(plot, charted)
            if plot.kind == "summary":
                partial = chart.partial_note([json.loads(r["data"]) for r in charted])
        svg, title = chart.svg(plot, lines, pick=pick), chart.heading(plot, lines)
        if plot.hist is not None:  # the declared histogram's heatmap, then any other the records carry
            heat = "".join(heatmap.svg(*heatmap.grid(charted, name), name, unit)
                           for name, unit in heatmap.names(charted, plot.hist, plot.hist_unit))
    records = [json.loads(r["data"]) if r["data"] is not None else {"record": TOO_LARGE} for r in rows]
    all_columns = table.columns_of(source, records)
    columns = table.fields_of(source, table.shown_columns(all_columns, asked), records)
    cells = [{"ts": r["ts"], "sequence": r["sequence"], "kind": r["kind"],
              "cells": [table.cell(c.name, rec[c.name], c) if c.name in rec else table.Cell() for c in columns]}
             for r, rec in zip(rows, records, strict=True)]
    kinds = sorted({r["kind"] for r in sample} | ({kind} if kind else set()))
    try:
        flame = _flame(key, kind, of_cgroup, cgroup_args) if store.newest_stack_ts(**key) is not None else None
    except BadRange as e:
        return error(400, "bad_query", str(e))
    view = {k: request.args[k] for k in ("range", "since", "until") if request.args.get(k)} | cgroup_args | chosen
    page_args = {**key, **({"kind": kind} if kind else {}), **view}
    ranges = [(r, None if r == range_name else url_for("dashboard.stream", **key, **({"kind": kind} if kind else {}),
                                                       **cgroup_args, **chosen, range=r)) for r in PAGE_RANGES]
    pages = {"page": page, "newer": url_for("dashboard.stream", **page_args, page=page - 1) if page > 1 else None,
             "older": url_for("dashboard.stream", **page_args, page=page + 1) if more and page < MAX_PAGES else None,
             "first": PAGE_ROWS * (page - 1) + 1}
    kind_links = [(k or "all", url_for("dashboard.stream", **key, **view, **({"kind": k} if k else {})))
                  for k in [None, *kinds]]
    return render_template("stream.html", stream=found, key=key, kind=kind, kind_links=kind_links, plot=plot,
                           chart_svg=Markup(svg), chart_title=title, chart_partial=partial, heatmap_svg=Markup(heat), columns=columns, table=cells,
                           chooser={"columns": [(c, table.declared(source, c).label) for c in all_columns],
                                    "shown": {c.name for c in columns}, "asked": bool(asked),
                                    "hidden": {k: v for k, v in page_args.items() if k != "columns"}},
                           chosen=chosen, ranges_text=ranges_text,
                           flame=flame, ranges=ranges, range_name=range_name, window=window, view=view,
                           pages=pages, live=range_name != "custom",
                           cgroups=_cgroups_seen(key, sample, kind, view, cgroup_args), cgroup_args=cgroup_args,
                           export_args=key | cgroup_args)


def _cgroups_seen(key: dict[str, str], sample: list[dict], kind: str | None, view: dict[str, str],
                  cgroup_args: dict[str, str]) -> dict:
    """The stream page's cgroup filter: what is in force, the cgroups the newest records carry (each a
    link showing its records), and a link that clears the filter."""
    seen: dict[str, None] = {}
    for r in sample:
        if r["data"] is not None and '"cgroup":' in r["data"]:
            path = json.loads(r["data"]).get("cgroup")
            if isinstance(path, str) and path:
                seen[path] = None
    base = {**key, **({"kind": kind} if kind else {}), **{k: v for k, v in view.items() if k not in cgroup_args}}
    return {"path": cgroup_args.get("cgroup", ""), "tree": cgroup_args.get("cgroup_match") == "tree",
            "seen": [(path, url_for("dashboard.stream", **base, cgroup=path)) for path in sorted(seen)],
            "everything": url_for("dashboard.stream", **base) if cgroup_args else None,
            "hidden": base}


def _flame(key: dict[str, str], kind: str | None, of_cgroup: dict, cgroup_args: dict[str, str]) -> dict:
    """The stream's flame graph for the page's range, zoom (focus: the frames' path, ';'-joined), search
    and cgroup filter (of_cgroup, as the page's cgroup_args ask), in the view asked for (collector/
    flame_views.py: view, function, interpreter, scheduler), with what the page shows around it."""
    args = request.args
    range_text = args.get("range") or FLAME_RANGE
    since, until = bound("since", args.get("since")), bound("until", args.get("until"))
    search = args.get("search", "")[:200]
    focus = [f for f in args.get("focus", "").split(flame_svg.PATH_SEP) if f]
    view = {"range": range_text, **({"since": args["since"]} if since is not None else {}),
            **({"until": args["until"]} if until is not None else {})}
    shown_as = args.get("view") or "flame"
    if shown_as not in flame_views.VIEWS:
        raise BadRange(f"view must be one of {', '.join(flame_views.VIEWS)}")
    for name in ("interpreter", "scheduler"):
        if args.get(name) not in (None, "", "on"):
            raise BadRange(f"{name} must be on (or left out)")
    result = range_profile(state().store, **key, range_text=range_text, since=since, until=until, **of_cgroup)
    page = {**key, **({"kind": kind} if kind else {}), **cgroup_args}
    frames = {"interpreter": args.get("interpreter") == "on",
              "scheduler": args.get("scheduler") == "on" or not result.weighting.blocked}
    # what the view keeps across its links: the view, its function, the frames asked for
    shape = {**({"view": shown_as} if shown_as != "flame" else {}),
             **({"function": args["function"][:500]} if shown_as == "sandwich" and args.get("function") else {}),
             **{k: "on" for k in ("interpreter", "scheduler") if args.get(k) == "on"}}

    def zoom(path: list[str], search: str | None = search or None, **changed: Any) -> str:
        return url_for("dashboard.stream", **page, **view, **{**shape, **changed}, search=search,
                       focus=flame_svg.PATH_SEP.join(path) or None, _anchor="flame")

    def sandwich_of(text: str) -> str:
        return zoom([], view="sandwich", function=text)

    custom = since is not None or until is not None
    ranges = [(r, None if r == range_text and not custom else
               url_for("dashboard.stream", **page, range=r, **shape, search=search or None, _anchor="flame"))
              for r in RANGES]
    unit = result.profile.unit
    shown = flame_views.show(result.profile, unit, result.period_ns, shown_as, focus, search,
                             args.get("function", ""), frames, zoom, sandwich_of, f"{key['source']} flame graph")
    graph = shown.graphs[0][1] if shown.graphs else flame_svg.render(result.profile, [], "", None)
    toggles = [(name, label, frames[name], zoom(focus, **{name: None if frames[name] else "on"}))
               for name, label in (("interpreter", "interpreter frames"), ("scheduler", "scheduler frames"))
               if name == "interpreter" or result.weighting.blocked]
    return {"graph": graph, "svgs": [(caption, Markup(g.svg)) for caption, g in shown.graphs], "shown": shown,
            "result": result, "range": range_text, "ranges": ranges,
            "search": search, "page": page, "view": view | shape, "reset": zoom([]),
            "unsearch": zoom(focus, None),
            "views": [(v, label, None if v == shown.view else
                       zoom([], view=None if v == "flame" else v, function=shape.get("function") if v == "sandwich" else None))
                      for v, label in flame_views.VIEWS.items()],
            "toggles": toggles,
            "total": weight_text(result.profile.total, unit, result.period_ns),
            "focused": weight_text(graph.total, unit, result.period_ns),
            "matched": weight_text(graph.matched, unit, result.period_ns),
            "matched_pct": graph.matched / graph.total * 100 if graph.total else 0.0,
            "exports": {fmt: url_for("profile_api.profile", **key, **view, **cgroup_args, format=fmt)
                        for fmt in ("folded", "speedscope", "pprof")},
            "viewer": speedscope_link(key, view | cgroup_args) if speedscope_available() else None,
            "cgroup": of_cgroup}


def speedscope_link(key: dict[str, str], view: dict[str, str]) -> str:
    """speedscope's viewer, served by the collector, opening this range's speedscope export."""
    export = url_for("profile_api.profile", **key, **view, format="speedscope")
    title = f"{key['source']} on {key['host']}"
    return (url_for("profile_api.speedscope_file", name="index.html") + "#profileURL=" + quote(export, safe="")
            + "&title=" + quote(title, safe=""))
