"""GET /compare: one metric from several hosts overlaid on one chart (compare the class), each host's
newest run of it, over the last 5 min / 1 h / the whole run. The values are read by the database for
every host at once (Store.field_values); the chart is the stream page's inline SVG, a line per host."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from flask import Blueprint, abort, render_template, request, url_for
from markupsafe import Markup

from collector import chart
from collector.dashboard import PAGE_RANGES, RECORD_SHOWN, stream_url
from collector.profiles import BadRange, parse_range
from collector.state import error, state

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

bp = Blueprint("compare", __name__)

POINTS_PER_HOST = 1000  # a host's newest records in the range; more only blurs the lines
POINTS_DRAWN = 8000  # in all: 50 hosts' hour of 10 s intervals is 18,000, drawn as 160 a host
MAX_HOSTS = 100


def _plot(source: str, streams: list) -> chart.Plot | None:
    """The registry's chart for the metric (for a profile's metric, whose chart is a line per process:
    its key figure, % of a CPU or blocked time per second), else the first numeric field of the newest
    stream's records."""
    plot = chart.declared(source)
    if plot is not None and plot.summed:
        plot = chart.figure_plot(source)
    if plot is not None and plot.series is None:
        return dataclasses.replace(plot, split=None)  # a point per host's event: hosts are the series here
    s = streams[0]
    sample = [r for r in state().store.records(s.host, s.run_id, source, limit=50, newest=True, max_text=RECORD_SHOWN)
              if r["data"] is not None]
    found = chart.choose(source, sample)
    return found if found is not None and found.series is None else None


@bp.get("/compare")
def page() -> ResponseReturnValue:
    source = request.args.get("source", "")
    chosen = [h for h in request.args.getlist("host") if h]
    if not source:
        return error(400, "bad_query", "source is required: the metric to compare, e.g. /compare?source=sysnest")
    if len(chosen) > MAX_HOSTS:
        return error(400, "bad_query", f"at most {MAX_HOSTS} hosts")
    try:
        range_name, seconds = parse_range(request.args.get("range") or "1h")
        if range_name not in PAGE_RANGES:
            raise BadRange(f"range must be one of {', '.join(PAGE_RANGES)}")
    except BadRange as e:
        return error(400, "bad_query", str(e))
    store = state().store
    newest: dict[str, object] = {}
    for s in store.streams(source=source):  # most recently seen first: each host's newest run
        newest.setdefault(s.host, s)
    if not newest:
        abort(404, description=f"No stream of {source!r} from any host. The lab overview lists the streams "
                               "the collector holds.")
    unknown = [h for h in chosen if h not in newest]
    hosts = sorted(h for h in chosen if h in newest) if chosen else sorted(newest)
    shown = [newest[h] for h in hosts]
    plot = _plot(source, shown) if shown else None
    lines: dict[str, list[tuple[float, float]]] = {}
    drawn = lines
    if plot is not None:
        field, hist = plot.field_sql
        figure = {"per": plot.figure.per, "scale": plot.figure.scale} if plot.figure is not None else {}
        keys = [(s.host, s.run_id) for s in shown]
        since = None
        if seconds is not None:
            last = store.field_values(source, keys, plot.kind, field, hist, limit=1, **figure)
            since = max((pts[-1][0] for pts in last.values()), default=0.0) - seconds
        values = store.field_values(source, keys, plot.kind, field, hist, since=since, limit=POINTS_PER_HOST, **figure)
        lines = {s.host: values[(s.host, s.run_id)] for s in shown if (s.host, s.run_id) in values}
        drawn = {host: chart.thin(pts, max(50, POINTS_DRAWN // len(lines))) for host, pts in lines.items()}
    svg = chart.svg(plot, drawn, legend=False) if plot is not None else ""
    title = chart.heading(plot, drawn) if plot is not None else ""
    legend = [{"host": s.host, "run_id": s.run_id, "colour": chart.colour(i, len(lines)), "url":
               stream_url(s.host, s.run_id, source), "points": len(lines.get(s.host, ())),
               "last": chart.value_text(plot, lines[s.host][-1][1]) if lines.get(s.host) else ""}
              for i, s in enumerate(s for s in shown if s.host in lines)]
    missing = [s.host for s in shown if s.host not in lines]
    base = {"source": source, **({"host": chosen} if chosen else {})}
    ranges = [(r, None if r == range_name else url_for("compare.page", **base, range=r)) for r in PAGE_RANGES]
    return render_template("compare.html", source=source, plot=plot, chart_svg=Markup(svg), chart_title=title,
                           legend=legend,
                           every_host=sorted(newest), chosen=set(hosts), unknown=unknown, missing=missing,
                           ranges=ranges, range_name=range_name, points_per_host=POINTS_PER_HOST)
