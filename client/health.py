"""One look at a collector, for a person who asks (the window's "Test connection"): GET /healthz, and a
line that says what came back. The transport probes on its own schedule (client/transport.py); this
answers now. It blocks for up to `timeout` seconds: callers run it off their GUI thread."""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests

from client.transport import base_url, unreachable


@dataclass(frozen=True)
class Health:
    ok: bool          # the collector answered /healthz with its own "ok"
    text: str         # one line for a person: what answered, or why nothing did


def check(url: str, timeout: float = 5.0) -> Health:
    """GET URL/healthz (URL as the transport takes it: '.../data' too)."""
    base = base_url(url) or ""
    started = time.monotonic()
    try:
        reply = requests.get(base + "/healthz", timeout=(min(timeout, 3.0), timeout))
    except requests.RequestException as exc:
        return Health(False, unreachable(exc, base))
    ms = (time.monotonic() - started) * 1000
    try:
        body = reply.json()
    except ValueError:
        body = None
    if reply.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok":
        token = ", reading needs a token" if body.get("auth") else ""
        return Health(True, f"collector answered in {ms:,.0f} ms (database {body.get('database', '?')}{token})")
    if isinstance(body, dict) and body.get("status") == "error":
        return Health(False, f"collector answered HTTP {reply.status_code}: {body.get('reason')} "
                             f"{body.get('detail') or ''}".rstrip())
    return Health(False, f"HTTP {reply.status_code} from {base}/healthz: not this project's collector?")
