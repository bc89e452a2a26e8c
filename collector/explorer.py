"""GET /profiles: the profile explorer. Pick a metric, hosts, runs, cgroups, process names and a time range
(a selection, collector/selection.py) and see its merged flame graph and top functions; "compare with" a
second selection (its parameters prefixed base_, the same metric) and the flame graph turns
differential: each frame coloured by the change of its share against the same path in the base (grew
red, shrank blue, as the window's differential flame), beside the functions by change. The URL holds
the whole state, so a link can be shared with a class. Drawn by the server as the stream page's flame
graph is (no script), the stacks shown as the stream page shows them: without the interpreter's
frames, an off-CPU metric's ending where they blocked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from flask import Blueprint, render_template, request, url_for
from markupsafe import Markup

from collector import selection
from collector.chart import registered
from collector.profile_api import changes_json
from collector.profiles import RANGES, BadRange, RangeProfile
from collector.selection import Selection
from collector.state import error, state
from profile_data import Functions, call_tree, simplified
from profile_data.display import change_rgb, weight_text
from profile_data.flame_svg import PATH_SEP, render

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

    from collector.store import Stream
    from profile_data import Profile

bp = Blueprint("explorer", __name__)

BASE = "base_"  # the compared selection's parameters: base_host, base_run_id, ... (its metric is the page's)
PARAMS = {*selection.PARAMS, *(BASE + p for p in selection.PARAMS if p != "source"), "compare", "search", "focus"}
TOP_ROWS = 50
SEARCH_MAX = 200


@dataclass
class View:
    """The page's state, as its URL holds it."""
    target: Selection
    base: Selection | None  # compare with it
    search: str
    focus: list[str]

    def query(self, **changed: object) -> list[tuple[str, str]]:
        """This state's query, with `changed` fields (target, base, search, focus) replaced."""
        v = View(**{**self.__dict__, **changed})
        pairs = v.target.query()
        if v.base is not None:
            pairs += [("compare", "on")] + [(BASE + k, value) for k, value in v.base.query() if k != "source"]
        pairs += [("search", v.search)] if v.search else []
        return pairs + ([("focus", PATH_SEP.join(v.focus))] if v.focus else [])

    def url(self, **changed: object) -> str:
        return url_for("explorer.page") + "?" + urlencode(self.query(**changed)) + "#flame"


def profiled(source: str) -> bool:
    """A metric whose profile the page can draw: one registered with a stacks chart, or one the registry
    does not know (its stack records count as samples)."""
    spec = registered(source)
    return spec is None or spec.chart.kind == "stacks"


def choices(streams: list[Stream], source: str | None) -> dict:
    """What the form offers: every profiled metric, and the hosts and runs of the chosen one."""
    of_source = [s for s in streams if s.source == source]
    runs: dict[str, list[str]] = {}
    for s in sorted(of_source, key=lambda s: (s.first_seen, s.host)):
        runs.setdefault(s.run_id, []).append(s.host)
    return {"sources": sorted({s.source for s in streams if profiled(s.source)}),
            "hosts": sorted({s.host for s in of_source}), "runs": list(runs.items()), "ranges": RANGES}


def read_view() -> View:
    args = request.args
    target = selection.parse(args)
    compare = args.get("compare") or ""
    if compare not in ("", "on"):
        raise BadRange("compare must be on (or left out)")
    base = selection.parse(args, BASE, target.source) if compare else None
    focus = [f for f in args.get("focus", "").split(PATH_SEP) if f]
    return View(target, base, args.get("search", "")[:SEARCH_MAX], focus)


def shown(result: RangeProfile) -> Profile:
    """The stacks as the stream page shows them by default."""
    return simplified(result.profile, interpreter=False, scheduler=not result.weighting.blocked)


def side(sel: Selection, result: RangeProfile, profile: Profile) -> dict:
    """What the page says of one selection's profile, and its exports."""
    query = sel.query()
    return {"title": sel.title(), "result": result, "stacks": len(profile),
            "total": weight_text(profile.total, profile.unit, result.period_ns),
            "exports": {fmt: url_for("profile_api.profile") + "?" + urlencode([*query, ("format", fmt)])
                        for fmt in ("folded", "speedscope", "pprof", "json")}}


@bp.get("/profiles")
def page() -> ResponseReturnValue:
    store = state().store
    streams = store.streams()
    source = request.args.get("source")
    if not source:
        return render_template("explorer.html", view=None, form=choices(streams, None), target=None, base=None)
    try:
        view = read_view()
    except BadRange as e:
        return error(400, "bad_query", str(e))
    try:
        compared = view.base
        reads = [lambda: view.target.profile(store)] + ([lambda: compared.profile(store)] if compared else [])
        target, *rest = selection.at_once(reads)
        base = rest[0] if rest else None
    except BadRange as e:
        return error(400, "bad_query", str(e))
    except LookupError as e:  # the form stays, as picked, to pick again
        return render_template("explorer.html", view=view, form=choices(streams, source), target=None,
                               base=None, missing=str(e)), 404
    profile = shown(target)
    before = shown(base) if base is not None else None
    graph = render(profile, view.focus, view.search, lambda path: view.url(focus=path),
                   f"{view.target.title()} flame graph", period_ns=target.period_ns,
                   baseline=call_tree(before) if before is not None else None)
    if before is None:
        functions = [{"name": s.frame.name, "module": s.frame.module, "kind": s.frame.kind,
                      "self": weight_text(s.self_weight, profile.unit, target.period_ns), "self_pct": s.self_pct,
                      "total": weight_text(s.total_weight, profile.unit, target.period_ns), "total_pct": s.total_pct}
                     for s in Functions(profile).stats(TOP_ROWS)]
    else:
        functions = changes_json(before, profile)[0][:TOP_ROWS]
    diff_query = [("base", view.base.query_text()), ("target", view.target.query_text())] if view.base else []
    return render_template(
        "explorer.html", view=view, form=choices(streams, source), graph=graph, svg=Markup(graph.svg),
        functions=functions, target=side(view.target, target, profile),
        base=side(view.base, base, before) if base is not None and before is not None else None,
        links={"self": view.url(), "reset": view.url(focus=[]), "unsearch": view.url(search=""),
               "swap": view.url(target=view.base, base=view.target) if view.base else None,
               "uncompare": view.url(base=None) if view.base else None,
               "diff": {fmt: url_for("profile_api.diff") + "?" + urlencode([*diff_query, ("format", fmt)])
                        for fmt in ("json", "folded")} if view.base else None},
        grew="rgb({},{},{})".format(*change_rgb(1, 1)), shrank="rgb({},{},{})".format(*change_rgb(-1, 1)))
