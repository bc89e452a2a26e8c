"""Where the collector hands its profiles on to (docs/collector.md, "Pushing profiles to fleet
backends"): Grafana Pyroscope servers (their /ingest API) and OpenTelemetry Collectors (OTLP/HTTP), each
with its own interval, metrics, hosts, format and headers. Read from a JSON file (`server.py
--push-config`, COLLECTOR_PUSH_CONFIG) or given to create_app as `push_targets` (a list of the same
objects); a bad entry is a ValueError naming it. Also what one push carries (Push) and a target's
counts (PushStats), which collector/pusher.py keeps and the overview and /metrics show."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

KINDS = ("pyroscope", "otlp")
FORMATS = {"pyroscope": ("folded", "pprof"), "otlp": ("protobuf",)}
# the path a base URL (no path of its own) is given: Pyroscope's ingest API, OTLP/HTTP's profiles export
DEFAULT_PATHS = {"pyroscope": "/ingest", "otlp": "/v1development/profiles"}
AT_LEAST_ZERO = ("retries", "delay_s")  # the other numbers must be above 0
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")  # an HTTP token (RFC 9110)


@dataclass(frozen=True)
class PushTarget:
    kind: str  # pyroscope or otlp
    url: str  # where each profile is POSTed (a base URL gets DEFAULT_PATHS' path)
    name: str = ""  # in counters and logs (default: kind-N, N its place in the list)
    interval_s: float = 15.0  # a profile per stream every this many seconds
    delay_s: float = 10.0  # each window ends this long before now: the batches of its records have arrived
    max_window_s: float = 300.0  # a window is this long at most: after an outage, the older part is skipped
    sources: tuple[str, ...] = ()  # metrics pushed (none: every metric with stack records)
    hosts: tuple[str, ...] = ()  # hosts pushed (none: all)
    format: str = ""  # pyroscope: folded (default) or pprof; otlp: protobuf
    app: str = "ebpf-profiler"  # Pyroscope's application name prefix; OTLP's service.name
    headers: dict[str, str] = field(default_factory=dict)  # sent with each push (Authorization, X-Scope-OrgID)
    timeout_s: float = 10.0
    retries: int = 4  # tries after the first failed one, backoff_s doubling between them
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    queue: int = 100  # profiles waiting to be sent at most; one more is dropped and counted


def _number(target: str, key: str, value: Any, integer: bool = False) -> None:
    zero_ok = key in AT_LEAST_ZERO
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{target}: {key} must be {'a whole number' if integer else 'a number'}"
                         f" {'>= 0' if zero_ok else '> 0'}")


def _numbers(target: str, values: Mapping) -> None:
    for key in ("interval_s", "delay_s", "max_window_s", "timeout_s", "backoff_s", "backoff_max_s"):
        if key in values:
            _number(target, key, values[key])
    for key in ("retries", "queue"):
        if key in values:
            _number(target, key, values[key], integer=True)
    if values.get("max_window_s", PushTarget.max_window_s) < values.get("interval_s", PushTarget.interval_s):
        raise ValueError(f"{target}: max_window_s must be at least interval_s")


def _names(target: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
            isinstance(v, str) and v for v in value):
        raise ValueError(f"{target}: {key} must be a list of names")
    return tuple(value)


def _headers(target: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{target}: headers must map header names to strings")
    for name, text in value.items():
        if not _HEADER.match(name) or not text.isprintable() or not _latin1(text):
            raise ValueError(f"{target}: header {name[:40]!r} must be a header name with a printable Latin-1 value")
    return dict(value)


def _latin1(text: str) -> bool:
    """HTTP sends a header's value as Latin-1: anything else ("Bearer €...") cannot be sent at all."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _url(target: str, kind: str, url: Any) -> str:
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{target}: url must be an http:// or https:// address")
    return url.rstrip("/") + DEFAULT_PATHS[kind] if parts.path in ("", "/") else url


def parse_target(entry: Any, number: int) -> PushTarget:
    """One target from its JSON object (number: its place in the list, from 1)."""
    where = f"push target {number}"
    if isinstance(entry, PushTarget):
        entry = {f.name: getattr(entry, f.name) for f in fields(PushTarget)}
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be an object")
    unknown = sorted(set(entry) - {f.name for f in fields(PushTarget)})
    if unknown:
        raise ValueError(f"{where}: unknown key(s): {', '.join(k[:40] for k in unknown[:5])}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)}")
    name = entry.get("name") or f"{kind}-{number}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}: name must be 1..64 letters, digits, '.', '_' or '-'")
    where = f"push target {name!r}"
    values = {**entry, "name": name, "url": _url(where, kind, entry.get("url")),
              "format": entry.get("format") or FORMATS[kind][0]}
    if values["format"] not in FORMATS[kind]:
        raise ValueError(f"{where}: format must be one of {', '.join(FORMATS[kind])}")
    _numbers(where, values)
    for key in ("sources", "hosts"):
        if key in values:
            values[key] = _names(where, key, values[key])
    if "headers" in values:
        values["headers"] = _headers(where, values["headers"])
    if not isinstance(values.get("app", "x"), str) or not _NAME.match(values.get("app", "x")):
        raise ValueError(f"{where}: app must be 1..64 letters, digits, '.', '_' or '-'")
    return PushTarget(**values)


def parse_targets(entries: Any) -> tuple[PushTarget, ...]:
    """Targets from a list (or {"targets": [...]}); names must differ."""
    if isinstance(entries, Mapping) and set(entries) == {"targets"}:
        entries = entries["targets"]
    if not isinstance(entries, (list, tuple)):
        raise ValueError('push config: must be a list of targets, or {"targets": [...]}')
    targets = tuple(parse_target(entry, number) for number, entry in enumerate(entries, 1))
    names = [t.name for t in targets]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"push config: target name(s) used twice: {', '.join(repeated)}")
    return targets


def load_push_config(path: str) -> tuple[PushTarget, ...]:
    """The targets of a push config file (JSON); ValueError naming the file on bad input."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read push config {path}: {getattr(e, 'strerror', None) or e}") from None
    except ValueError as e:
        raise ValueError(f"push config {path}: not valid JSON ({e})") from None
    try:
        return parse_targets(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


@dataclass(frozen=True)
class Push:
    """One profile ready to POST to a target: the body, or multipart files (name -> (filename, bytes,
    content type)), and the stream and window it holds."""

    stream: tuple[str, str, str]  # host, run_id, source
    since: float
    until: float
    url: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""
    files: dict[str, tuple[str, bytes, str]] | None = None


@dataclass
class PushStats:
    """One target's counts since the collector started."""

    target: PushTarget
    sent: int = 0  # profiles the target accepted
    failures: int = 0  # tries that failed (no answer, or not 2xx)
    retries: int = 0  # tries after a failed one
    dropped: int = 0  # profiles not queued: the queue was full (a window's streams not read then)
    abandoned: int = 0  # profiles given up: retries spent, a 4xx, or the collector stopping
    windows: int = 0  # schedule ticks that read the database
    read_errors: int = 0  # ticks whose reading failed (the window is read again next time), and streams
    truncated: int = 0  # profiles pushed with their window's newest MAX_RECORDS records only
    skipped_s: float = 0.0  # seconds of records not pushed: an outage's windows past max_window_s
    queued: int = 0
    last_success: float = 0.0
    last_error: str = ""

    def as_dict(self) -> dict:
        return {"name": self.target.name, "kind": self.target.kind, "url": shown_url(self.target.url),
                "format": self.target.format, "interval_s": self.target.interval_s, "sent": self.sent,
                "failures": self.failures, "retries": self.retries, "dropped": self.dropped,
                "abandoned": self.abandoned, "windows": self.windows, "read_errors": self.read_errors,
                "truncated": self.truncated, "skipped_s": self.skipped_s,
                "queued": self.queued, "last_success": self.last_success, "last_error": self.last_error}


def shown_url(url: str) -> str:
    """The URL without a user:password@ part (the overview shows it)."""
    scheme, sep, rest = url.partition("://")
    return scheme + sep + rest.split("@", 1)[-1] if "@" in rest.split("/", 1)[0] else url
