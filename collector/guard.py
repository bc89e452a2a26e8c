"""What every request to the collector passes before its endpoint runs, and what every answer carries:
the Host header checked against the names this collector answers to (a DNS-rebinding page names its
own), a token to read when tokens are configured, and headers that keep a browser from framing the
pages, sniffing a download as HTML, running anything foreign or leaking the URL (tokens may be in it)."""

from __future__ import annotations

import functools
import ipaddress
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask import Flask, Response, request

from collector.settings import Settings
from collector.state import error
from collector.tokens import TOKEN_QUERY_PARAM, authenticate

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

# /data checks its own (upload) token; /healthz is every client's probe; the stylesheet is no data
OPEN_ENDPOINTS = frozenset({"ingest.receive", "api.healthz", "static"})
SECURITY_HEADERS = {
    # the pages are server-rendered HTML and inline SVG; their one script (static/live.js: auto-refresh,
    # sorting) comes from here and fetches from here only; forms submit here only
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' "
                               "'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none';"
                               " base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


HOSTS_KEPT = 64  # Host headers whose verdict is kept


# speedscope's viewer, served from its npm package (profile_api): scripts and the profile it fetches
# come from this collector and nowhere else
VIEWER_ENDPOINTS = frozenset({"profile_api.speedscope_file"})
VIEWER_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-eval' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline';"
                 " img-src 'self' data: blob:; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'")


def host_names(extra: tuple[str, ...]) -> frozenset[str]:
    """The names a Host header may carry besides an IP address: localhost, this machine's names, and
    those given with --allowed-host."""
    return frozenset(name.lower() for name in ("localhost", socket.gethostname(), socket.getfqdn(), *extra) if name)


def host_allowed(host: str, names: frozenset[str]) -> bool:
    """host: a Host header (name or address, maybe with a port). An IP address is always allowed: DNS
    rebinding needs a name the attacker controls."""
    try:
        name = urlsplit("//" + host).hostname or ""
    except ValueError:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name.rstrip(".") in names


def install(app: Flask, settings: Settings) -> None:
    names = host_names(settings.allowed_hosts)
    readers = {**settings.read_tokens, **settings.tokens}  # an upload token may read too

    @functools.lru_cache(maxsize=HOSTS_KEPT)
    def allowed(host: str) -> bool:  # judged once per Host header (every POST of a lab sends the same)
        return host_allowed(host, names)

    @app.before_request
    def _guard() -> ResponseReturnValue | None:
        if not allowed(request.host):
            return error(400, "bad_host", "the Host header is not a name of this collector (see --allowed-host)")
        if settings.read_tokens or settings.tokens:
            if request.endpoint not in OPEN_ENDPOINTS and authenticate(
                    request.headers.get("Authorization"), request.args.get(TOKEN_QUERY_PARAM), readers) is None:
                response, status = error(401, "unauthorized", "reading needs a token: Authorization: Bearer <token>,"
                                         " or in a browser any user name and the token as password")
                response.headers["WWW-Authenticate"] = 'Basic realm="collector", charset="UTF-8"'
                return response, status
        return None

    @app.after_request
    def _headers(response: Response) -> Response:
        headers = response.headers
        present = {name.lower() for name in headers.keys()}  # one pass: setdefault scanned them once per name
        headers.extend((name, value) for name, value in SECURITY_HEADERS.items() if name.lower() not in present)
        if request.endpoint in VIEWER_ENDPOINTS:  # speedscope's own app: its scripts, from here only
            response.headers["Content-Security-Policy"] = VIEWER_POLICY
        return response
