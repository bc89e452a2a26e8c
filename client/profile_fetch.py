"""One profile from a collector, for a person who asks (the window's "Baseline from collector…"):
GET /api/profile?format=folded with a selection — source, host, run_id, range, each parameter a list of
values, repeated in the query ("host=a&host=b": any of them) — and its folded text, or one line that says
why not. It blocks for up to `timeout` seconds: callers run it off their GUI thread."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence

import requests

from client.transport import base_url, unreachable


class FetchError(Exception):
    """One line for a person: why the collector gave no profile."""


def profile_query(selection: Mapping[str, Sequence[str]]) -> str:
    """The query string of a selection, format=folded first; empty values are left out."""
    pairs = [("format", "folded")] + [(key, value) for key, values in selection.items()
                                      for value in values if value]
    return urllib.parse.urlencode(pairs)


def fetch_folded(url: str, selection: Mapping[str, Sequence[str]], token: str | None = None,
                 timeout: float = 30.0) -> str:
    """The folded text of the selection's profile from the collector at URL ('.../data' too)."""
    base = base_url(url) or ""
    address = f"{base}/api/profile?{profile_query(selection)}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        reply = requests.get(address, headers=headers, timeout=(min(timeout, 3.0), timeout))
    except requests.RequestException as exc:
        raise FetchError(unreachable(exc, base)) from None
    if reply.status_code == 200:
        return reply.text
    try:
        body = reply.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("status") == "error":
        detail = f": {body['detail']}" if body.get("detail") else ""
        raise FetchError(f"collector answered HTTP {reply.status_code}: {body.get('reason')}{detail}")
    raise FetchError(f"HTTP {reply.status_code} from {base}/api/profile: not this project's collector?")
