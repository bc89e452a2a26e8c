"""GET /api/profile: the stack records of a selection (collector/selection.py: a metric, any of its hosts,
runs, cgroups and process names, a time range; one stream is a selection too) merged into one profile,
exported as folded text (flamegraph.pl, speedscope), speedscope JSON, pprof (gzipped profile.proto: go
tool pprof, Pyroscope, Grafana) or JSON (its functions with self and total weights and shares).
GET /api/profile/diff: two selections (base, target: each a URL-encoded query string of the selection's
parameters) compared by each function's share, or both sides' stacks as flamegraph.pl's differential
input. Anything else in a query is refused with a 400 naming it; a selection no stream matches is a 404."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import orjson
from flask import Blueprint, Response, request, send_from_directory

from collector import selection
from collector.profiles import BadRange, RangeProfile
from collector.selection import Selection
from collector.state import error, state
from profile_data import Functions, differential, to_folded
from profile_data.folded import frame_text
from profile_data.pprof import to_pprof
from profile_data.speedscope import to_speedscope

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

    from collector.store import Store
    from profile_data import Profile

bp = Blueprint("profile_api", __name__)

FORMATS = ("folded", "speedscope", "pprof", "json")
DIFF_FORMATS = ("json", "folded")
FUNCTIONS_MAX = 5000  # functions a JSON answer lists at most (the heaviest; functions_total says how many)
# speedscope's own viewer, as the npm package ships it (setup installs it): served here, it opens an
# export with no network beyond the collector
SPEEDSCOPE_DIR = os.path.join(os.path.dirname(__file__), "vendor", "node_modules", "speedscope", "dist", "release")
_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def read(sel: Selection) -> RangeProfile:
    return sel.profile(state().store)


class Refused(Exception):
    """A query answered with a 4xx (the answer, made by state.error)."""

    def __init__(self, answer: tuple[Response, int]) -> None:
        super().__init__(answer[1])
        self.answer = answer


@bp.app_errorhandler(Refused)
def _refused(e: Refused) -> ResponseReturnValue:
    return e.answer


def requested_profile(format_error: str | None = None) -> tuple[Selection, RangeProfile]:
    """The request's selection and its profile; Refused with a 400 for a bad query (or format_error), a
    404 when no stream matches."""
    try:
        if format_error:
            raise BadRange(format_error)
        sel = selection.parse(request.args)
        return sel, read(sel)
    except BadRange as e:
        raise Refused(error(400, "bad_query", str(e))) from None
    except LookupError as e:
        raise Refused(error(404, "not_found", str(e))) from None


def profile_headers(result: RangeProfile) -> dict[str, str]:
    return {"X-Profile-Records": str(result.records), "X-Profile-Truncated": str(result.truncated).lower(),
            "X-Profile-Streams": str(result.streams)}


def file_name(sel: Selection) -> str:
    """source-host-run_id, as a single stream's export was always named ('+' between several, 'all': none)."""
    hosts, runs = "+".join(sel.hosts) or "all", "+".join(sel.run_ids) or "all"
    return _FILE_CHARS.sub("_", f"{sel.source}-{hosts}-{runs}")[:120]


def summary(sel: Selection, result: RangeProfile) -> dict:
    """What a JSON answer says of one selection's profile besides its functions."""
    return {"selection": sel.echo(), "unit": result.profile.unit, "weight": result.weighting.label,
            "total": result.profile.total, "stacks": len(result.profile), "records": result.records,
            "truncated": result.truncated, "streams": result.streams, "since": result.since, "until": result.until,
            "period_ns": result.period_ns}


def functions_json(profile: Profile) -> tuple[list[dict], int]:
    """The profile's functions, heaviest self weight first (at most FUNCTIONS_MAX), and how many there are."""
    stats = Functions(profile).stats()
    return [{"name": s.frame.name, "module": s.frame.module, "kind": s.frame.kind, "self": s.self_weight,
             "total": s.total_weight, "self_pct": s.self_pct, "total_pct": s.total_pct}
            for s in stats[:FUNCTIONS_MAX]], len(stats)


@bp.get("/api/profile")
def profile() -> ResponseReturnValue:
    fmt = request.args.get("format", "folded")
    sel, result = requested_profile(None if fmt in FORMATS else f"format must be one of {', '.join(FORMATS)}")
    name = file_name(sel)
    headers = profile_headers(result)
    if fmt == "json":
        functions, n = functions_json(result.profile)
        return Response(orjson.dumps({**summary(sel, result), "functions": functions, "functions_total": n}),
                        mimetype="application/json", headers=headers)
    if fmt == "folded":
        return Response(to_folded(result.profile), mimetype="text/plain",
                        headers={**headers, "Content-Disposition": f"attachment; filename={name}.folded"})
    if fmt == "speedscope":
        on = sel.hosts[0] if len(sel.hosts) == 1 else ", ".join(sel.hosts) or "every host"
        document = to_speedscope(result.profile, name=f"{sel.source} on {on} ({result.weighting.label})",
                                 exporter="collector")
        return Response(orjson.dumps(document), mimetype="application/json",
                        headers={**headers, "Content-Disposition": f"attachment; filename={name}.speedscope.json"})
    since, until = result.since or 0.0, result.until or 0.0
    body = to_pprof(result.profile, time_nanos=round(since * 1e9), duration_nanos=round((until - since) * 1e9))
    return Response(body, mimetype="application/octet-stream",
                    headers={**headers, "Content-Disposition": f"attachment; filename={name}.pb.gz"})


class BadSide(ValueError):
    def __init__(self, status: int, side: str, detail: str) -> None:
        super().__init__(f"{side}: {detail}")
        self.status = status


def side_selection(args: dict[str, str], side: str) -> Selection:
    """One side of a diff's selection (a URL-encoded query string); BadSide naming it."""
    text = args.get(side)
    if not text:
        raise BadSide(400, side, "required: a selection's query string, URL-encoded "
                                 "(e.g. source%3Dcpuprofile%26run_id%3DR1)")
    try:
        return selection.parse_query(text)
    except BadRange as e:
        raise BadSide(400, side, str(e)) from None


def side_profile(sel: Selection, side: str, store: Store) -> RangeProfile:
    """One side's profile; BadSide naming it."""
    try:
        return sel.profile(store)
    except BadRange as e:
        raise BadSide(400, side, str(e)) from None
    except LookupError as e:
        raise BadSide(404, side, str(e)) from None


def read_sides(args: dict[str, str]) -> tuple[tuple[Selection, RangeProfile], tuple[Selection, RangeProfile]]:
    """Both sides of a diff, their profiles read at once (selection.at_once); BadSide naming the side
    that failed first in the order base then target, each parsed then read."""
    store = state().store
    base = side_selection(args, "base")
    try:
        target = side_selection(args, "target")
    except BadSide:
        side_profile(base, "base", store)  # its failure, if any, comes first
        raise
    base_profile, target_profile = selection.at_once([lambda: side_profile(base, "base", store),
                                                      lambda: side_profile(target, "target", store)])
    return (base, base_profile), (target, target_profile)


def changes_json(base: Profile, target: Profile) -> tuple[list[dict], int]:
    """Every function of either side with its self and total share on each (% of that side's total, so
    runs of different lengths compare) and the change of its self share (points), largest change first."""
    changes = differential(base, target)
    changes.sort(key=lambda c: (-abs(c.self_change_pct), -abs(c.change_pct), c.frame))
    return [{"name": c.frame.name, "module": c.frame.module, "kind": c.frame.kind,
             "base_self_pct": c.baseline_self_pct, "target_self_pct": c.current_self_pct,
             "change_pct": c.self_change_pct, "base_total_pct": c.baseline_pct, "target_total_pct": c.current_pct,
             "total_change_pct": c.change_pct} for c in changes[:FUNCTIONS_MAX]], len(changes)


def diff_folded(base: Profile, target: Profile) -> str:
    """flamegraph.pl's differential input, "stack base target" per stack of either side: the target's
    weights as they are, the base's scaled to the target's total (as difffolded.pl -n does), so runs of
    different lengths compare; integers, heaviest target first."""
    scale = target.total / base.total if base.total else 0.0
    lines = []
    for stack in base.stacks.keys() | target.stacks.keys():
        before, after = base.stacks.get(stack, 0.0) * scale, target.stacks.get(stack, 0.0)
        lines.append((-after, -before, f"{';'.join(frame_text(f) for f in stack)} {round(before)} {round(after)}"))
    return "".join(line + "\n" for *_order, line in sorted(lines))


@bp.get("/api/profile/diff")
def diff() -> ResponseReturnValue:
    fmt = request.args.get("format", "json")
    if fmt not in DIFF_FORMATS:
        return error(400, "bad_query", f"format must be one of {', '.join(DIFF_FORMATS)}")
    try:
        (base_sel, base), (target_sel, target) = read_sides(request.args)
    except BadSide as e:
        return error(e.status, "bad_query" if e.status == 400 else "not_found", str(e))
    headers = {"X-Profile-Truncated": str(base.truncated or target.truncated).lower()}
    if fmt == "folded":
        return Response(diff_folded(base.profile, target.profile), mimetype="text/plain",
                        headers={**headers, "Content-Disposition": "attachment; filename=diff.folded"})
    functions, n = changes_json(base.profile, target.profile)
    return Response(orjson.dumps({"functions": functions, "functions_total": n, "base": summary(base_sel, base),
                                  "target": summary(target_sel, target)}),
                    mimetype="application/json", headers=headers)


def speedscope_available() -> bool:
    return os.path.isfile(os.path.join(SPEEDSCOPE_DIR, "index.html"))


@bp.get("/vendor/speedscope/<path:name>")
def speedscope_file(name: str) -> ResponseReturnValue:
    if not speedscope_available():
        return error(404, "not_found", "speedscope is not installed (scripts/setup.sh installs collector/vendor)")
    return send_from_directory(SPEEDSCOPE_DIR, name, max_age=3600)
