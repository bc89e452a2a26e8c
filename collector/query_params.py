"""The query parameters each reading page and endpoint knows: any other one (a misspelt `sourc=`) is
refused with a 400 that names it, instead of being silently ignored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import request

from collector.explorer import PARAMS as EXPLORER
from collector.selection import PARAMS as SELECTION
from collector.state import error
from collector.tokens import TOKEN_QUERY_PARAM

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

STREAM_KEY = ("host", "run_id", "source")
KNOWN = {
    "dashboard.index": set(),
    "dashboard.overview": set(),
    "compare.page": {"source", "host", "range"},
    "dashboard.stream": {*STREAM_KEY, "kind", "range", "since", "until", "search", "focus", "page", "sort",
                         "cgroup", "cgroup_match", "columns", "view", "function", "interpreter", "scheduler"},
    "api.streams": set(STREAM_KEY),
    "api.records": {*STREAM_KEY, "kind", "since", "until", "format", "cursor", "limit",
                    "cgroup", "cgroup_match"},
    "api.metrics": set(),
    "api.healthz": set(),
    "profile_api.profile": {*SELECTION, "format"},
    "profile_api.diff": {"base", "target", "format"},
    "otlp_export.profile_otlp": {*SELECTION, "format"},
    "explorer.page": set(EXPLORER),
}


def refuse_unknown() -> ResponseReturnValue | None:
    """A before_request hook: 400 bad_query naming the unknown parameters of a known endpoint."""
    known = KNOWN.get(request.endpoint or "")
    if known is None:
        return None
    unknown = sorted(set(request.args) - known - {TOKEN_QUERY_PARAM})  # a reader's token may come in the URL
    if unknown:
        return error(400, "bad_query", "unknown parameter(s): " + ", ".join(k[:40] for k in unknown[:5])
                     + (f"; known: {', '.join(sorted(known))}" if known else "; this page takes none"))
    return None
