"""GET /api/profile: a stream's stack records over a time range as one profile, exported as folded text
(flamegraph.pl, speedscope), speedscope JSON, or pprof (gzipped profile.proto: go tool pprof, Pyroscope,
Grafana). Query: host, run_id, source (the stream), range (run, latest, 90s, 5m, 1h: the stream's last
seconds) or since/until (unix seconds), cgroup and cgroup_match (a cgroup's records, or its tree's, as
/api/records takes them), format. Anything else is refused with a 400 naming it."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import orjson
from flask import Blueprint, Response, request, send_from_directory

from collector.api import BadQuery, cgroup_filter
from collector.profiles import BadRange, RangeProfile, bound, range_profile
from collector.state import error, state
from profile_data import to_folded
from profile_data.pprof import to_pprof
from profile_data.speedscope import to_speedscope

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue
    from werkzeug.datastructures import MultiDict

bp = Blueprint("profile_api", __name__)

FORMATS = ("folded", "speedscope", "pprof")
# speedscope's own viewer, as the npm package ships it (setup installs it): served here, it opens an
# export with no network beyond the collector
SPEEDSCOPE_DIR = os.path.join(os.path.dirname(__file__), "vendor", "node_modules", "speedscope", "dist", "release")
PARAMS = frozenset({"host", "run_id", "source", "range", "since", "until", "format", "cgroup", "cgroup_match"})
_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def read_profile(args: MultiDict[str, str]) -> tuple[RangeProfile, dict[str, str]]:
    """The profile a query asks for and its stream key; BadRange for a bad query, LookupError for a
    stream that does not exist."""
    unknown = sorted(set(args) - PARAMS)
    if unknown:
        raise BadRange(f"unknown parameter(s): {', '.join(k[:40] for k in unknown[:5])}")
    key = {k: args.get(k, "") for k in ("host", "run_id", "source")}
    if not all(key.values()):
        raise BadRange("host, run_id and source name the stream")
    store = state().store
    if store.stream(**key) is None:
        raise LookupError("no such stream")
    since, until = bound("since", args.get("since")), bound("until", args.get("until"))
    try:
        of_cgroup = cgroup_filter(args)
    except BadQuery as e:
        raise BadRange(str(e)) from None
    return range_profile(store, **key, range_text=args.get("range"), since=since, until=until, **of_cgroup), key


@bp.get("/api/profile")
def profile() -> ResponseReturnValue:
    fmt = request.args.get("format", "folded")
    try:
        if fmt not in FORMATS:
            raise BadRange(f"format must be one of {', '.join(FORMATS)}")
        result, key = read_profile(request.args)
    except BadRange as e:
        return error(400, "bad_query", str(e))
    except LookupError as e:
        return error(404, "not_found", str(e))
    name = _FILE_CHARS.sub("_", f"{key['source']}-{key['host']}-{key['run_id']}")[:120]
    headers = {"X-Profile-Records": str(result.records), "X-Profile-Truncated": str(result.truncated).lower()}
    if fmt == "folded":
        return Response(to_folded(result.profile), mimetype="text/plain",
                        headers={**headers, "Content-Disposition": f"attachment; filename={name}.folded"})
    if fmt == "speedscope":
        document = to_speedscope(result.profile, name=f"{key['source']} on {key['host']} ({result.weighting.label})",
                                 exporter="collector")
        return Response(orjson.dumps(document), mimetype="application/json",
                        headers={**headers, "Content-Disposition": f"attachment; filename={name}.speedscope.json"})
    since, until = result.since or 0.0, result.until or 0.0
    body = to_pprof(result.profile, time_nanos=round(since * 1e9), duration_nanos=round((until - since) * 1e9))
    return Response(body, mimetype="application/octet-stream",
                    headers={**headers, "Content-Disposition": f"attachment; filename={name}.pb.gz"})


def speedscope_available() -> bool:
    return os.path.isfile(os.path.join(SPEEDSCOPE_DIR, "index.html"))


@bp.get("/vendor/speedscope/<path:name>")
def speedscope_file(name: str) -> ResponseReturnValue:
    if not speedscope_available():
        return error(404, "not_found", "speedscope is not installed (scripts/setup.sh installs collector/vendor)")
    return send_from_directory(SPEEDSCOPE_DIR, name, max_age=3600)
