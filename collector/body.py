"""A POST /data body's bytes -> JSON, checked: gunzipped within the size limit, parsed by json.loads, no
nesting deeper than MAX_DEPTH, no unpaired surrogate, no infinite number. What the JSON must hold is
payload.py's business. The usual body never comes here: batch_structs.py reads it in one pass of
msgspec's; this is for the others, which are refused or unusual (non-ASCII text, an unknown key).
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

from collector.rejections import Rejected, bad

MAX_DEPTH = 32  # containers inside containers; a hist record is 5 deep


# --- bytes -> JSON -----------------------------------------------------------------------------------
def decode_body(raw: bytes, content_encoding: str | None, max_body: int) -> bytes:
    """The body, gunzipped when it says so; the size limit holds for the decompressed size too."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise Rejected(415, "unsupported_encoding", f"Content-Encoding {encoding[:40]!r} is not supported (gzip is)")
    inflater = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
    try:
        body = inflater.decompress(raw, max_body + 1)
    except zlib.error as e:
        raise bad("bad_gzip", f"body is not valid gzip ({e})") from None
    if len(body) > max_body or inflater.unconsumed_tail:
        raise bad("too_large", f"decompressed body is over the limit of {max_body} bytes")
    if not inflater.eof:
        raise bad("bad_gzip", "gzip body is truncated")
    if inflater.unused_data:
        raise bad("bad_gzip", "data after the end of the gzip stream")
    return body


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(body: bytes) -> Any:
    """The body as JSON, checked for depth and text."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not_json", "body is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise bad("not_json", f"body is not JSON ({str(e)[:120]})") from None
    _check_tree([(value, 1)])
    return value


def _check_tree(stack: list[tuple[Any, int]]) -> None:
    """Depth and text of (value, depth) trees: strings must be encodable (a lone surrogate escape is
    valid JSON but not text), numbers finite."""
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_DEPTH:
                raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels")
            for key, item in node.items():
                _check_text(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_DEPTH:
                raise bad("too_deep", f"nesting deeper than {MAX_DEPTH} levels")
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            _check_text(node)
        elif isinstance(node, float) and not math.isfinite(node):
            raise bad("bad_value", "a number is out of range")  # 1e999 parses to inf


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad("bad_unicode", "a string holds an unpaired surrogate escape") from None
