"""Upload tokens: each one names a student or machine, and the name (never the token) is stored with
the batches it authorised. A file holds either lines `name token` or JSON ({"name": "token", ...})."""

from __future__ import annotations

import base64
import hmac
import json
import os

TOKEN_QUERY_PARAM = "token"  # the original client can set a URL but no header: /data?token=...


def _check(name: str, token: str, where: str) -> None:
    if not 0 < len(name) <= 255 or not name.isprintable() or any(c.isspace() for c in name):
        raise ValueError(f"{where}: token name {name[:40]!r} must be 1..255 printable characters, no spaces")
    if not token or not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError(f"{where}: a token must be non-empty and printable with no spaces")


def parse_tokens_text(text: str, where: str = "tokens file") -> dict[str, str]:
    """{token: name} from a tokens file's text."""
    pairs: list[tuple[str, str]] = []
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise ValueError(f'{where}: JSON must map names to tokens, {{"alice": "s3cret", ...}}')
        pairs = list(data.items())
    else:
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{where} line {number}: expected 'name token'")
            pairs.append((parts[0], parts[1]))
    tokens: dict[str, str] = {}
    for name, token in pairs:
        _check(name, token, where)
        if token in tokens:
            raise ValueError(f"{where}: the same token is given to {tokens[token]!r} and {name!r}")
        tokens[token] = name
    if not tokens:
        raise ValueError(f"{where}: no tokens")
    return tokens


def load_tokens(token: str | None, tokens_file: str | None) -> dict[str, str]:
    """{token: name} from --token (named "token") and/or --tokens-file; raises ValueError on bad input."""
    tokens: dict[str, str] = {}
    if tokens_file:
        try:
            with open(tokens_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read tokens file {tokens_file}: {getattr(e, 'strerror', None) or e}") from None
        tokens.update(parse_tokens_text(text, tokens_file))
    if token is not None:
        _check("token", token, "--token")
        tokens.setdefault(token, "token")
    return tokens


def loose_permissions(path: str, what: str = "tokens file") -> str | None:
    """A warning when a file of secrets can be read by others than its owner (it should be 0600)."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return None
    if mode & 0o077:
        return f"{what} {path} is readable by others (mode {mode:o}): chmod 600 {path}"
    return None


def authenticate(authorization: str | None, query_token: str | None, tokens: dict[str, str]) -> str | None:
    """The token's name, or None when the request carries no known token."""
    presented = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            presented = value.strip()
        elif scheme.lower() == "basic":  # a browser's prompt: any user name, the token as password
            try:
                presented = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
            except ValueError:
                presented = None
    if not presented:
        presented = query_token
    if not presented:
        return None
    found = None
    for token, name in tokens.items():
        # compare with every token so the time taken does not reveal which prefix matched
        if hmac.compare_digest(token.encode("utf-8", "replace"), presented.encode("utf-8", "replace")):
            found = name
    return found
