"""The collector's configuration: defaults, then a mapping (create_app's argument) or COLLECTOR_*
environment variables (for `gunicorn "server:create_app()"`), with the database URL normalised."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collector import retention
from collector.push_targets import PushTarget, load_push_config, parse_targets
from collector.tokens import load_tokens

DEFAULT_DB = "sqlite:///collector.db"
DEFAULT_MAX_BODY = 8 * 1024 * 1024
DEFAULT_MAX_STREAMS = 10_000
DEFAULT_COMPACT_EVERY_S = 300.0


@dataclass(frozen=True)
class Settings:
    db_url: str = DEFAULT_DB
    log_file: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)  # token -> name (student or machine)
    read_tokens: dict[str, str] = field(default_factory=dict)  # token -> name, for reading only
    allowed_hosts: tuple[str, ...] = ()  # names the Host header may carry besides this machine's
    max_streams: int = DEFAULT_MAX_STREAMS  # a batch that would make one more is refused (429)
    max_body: int = DEFAULT_MAX_BODY  # bytes, of the body and of its decompressed form
    legacy_slack_s: float = 2.0  # clock tolerance when placing an original-client batch in a run
    retention: str = retention.DEFAULT_POLICY  # tiers (retention.parse_policy) or "off"
    max_db_bytes: int | None = None  # the size bound (dbsize.py says what counts); None: none
    compact_every_s: float = DEFAULT_COMPACT_EVERY_S  # between two compaction passes; 0: no pass
    push_targets: tuple[PushTarget, ...] = ()  # Pyroscope / OTLP backends profiles are pushed to (push_targets.py)

    @property
    def auth_required(self) -> bool:
        return bool(self.tokens)


def normalise_db_url(url: str) -> str:
    """A plain path means an SQLite file; postgresql:// means the psycopg 3 driver (the one installed)."""
    if "://" not in url:
        return "sqlite:///" + os.path.abspath(url)
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def from_mapping(config: Mapping[str, Any] | None) -> Settings:
    """Settings from create_app's mapping (keys are Settings fields); None reads the environment."""
    if config is None:
        config = from_environment()
    known = {k: v for k, v in config.items() if k in Settings.__dataclass_fields__}
    unknown = set(config) - set(known)
    if unknown:
        raise ValueError(f"unknown collector setting(s): {', '.join(sorted(unknown))}")
    if "push_targets" in known:
        known["push_targets"] = parse_targets(known["push_targets"])
    settings = Settings(**known)
    if settings.max_body < 1024:
        raise ValueError("max_body must be at least 1024 bytes")
    retention.parse_policy(settings.retention)  # or PolicyError, a ValueError saying what is wrong
    if settings.max_db_bytes is not None and settings.max_db_bytes < 2**20:
        raise ValueError("max_db_bytes must be at least 1 MiB")
    if settings.compact_every_s < 0:
        raise ValueError("compact_every_s must be 0 (no compaction) or more")
    return Settings(**{**known, "db_url": normalise_db_url(settings.db_url)})


def from_environment() -> dict[str, Any]:
    env = os.environ
    config: dict[str, Any] = {}
    if env.get("COLLECTOR_DB"):
        config["db_url"] = env["COLLECTOR_DB"]
    if env.get("COLLECTOR_LOG_FILE"):
        config["log_file"] = env["COLLECTOR_LOG_FILE"]
    if env.get("COLLECTOR_MAX_BODY"):
        config["max_body"] = int(env["COLLECTOR_MAX_BODY"])
    if env.get("COLLECTOR_READ_TOKENS_FILE"):
        config["read_tokens"] = load_tokens(None, env["COLLECTOR_READ_TOKENS_FILE"])
    if env.get("COLLECTOR_RETENTION"):
        config["retention"] = env["COLLECTOR_RETENTION"]
    if env.get("COLLECTOR_MAX_DB_BYTES"):
        config["max_db_bytes"] = retention.parse_bytes(env["COLLECTOR_MAX_DB_BYTES"])
    if env.get("COLLECTOR_COMPACT_EVERY"):
        config["compact_every_s"] = float(env["COLLECTOR_COMPACT_EVERY"])
    if env.get("COLLECTOR_ALLOWED_HOSTS"):
        config["allowed_hosts"] = tuple(h.strip() for h in env["COLLECTOR_ALLOWED_HOSTS"].split(",") if h.strip())
    if env.get("COLLECTOR_PUSH_CONFIG"):
        config["push_targets"] = load_push_config(env["COLLECTOR_PUSH_CONFIG"])
    if env.get("COLLECTOR_TOKENS_FILE") or env.get("COLLECTOR_TOKEN"):
        config["tokens"] = load_tokens(env.get("COLLECTOR_TOKEN"), env.get("COLLECTOR_TOKENS_FILE"))
    return config
