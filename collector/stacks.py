"""Stacks stored once. A stack-bearing record (offcpu and compmem rows of level "stack", cpuprofile
"stack" records) arrives every interval with the same frames; its frame fields are cut out of it and
stored once in the stacks table, keyed by a hash of their JSON text, and the record keeps the hash.
Reading joins them back: the record comes out as it went in (the frame fields, which every such metric
writes last, last)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from profile_data.records import is_stack_record

# the fields that hold a stack's frames (offcpu: kernel_frames, user_frames and folded "comm;...";
# compmem: frames as names; cpuprofile: frames as objects); every other field stays in the record
STACK_FIELDS = frozenset({"frames", "kernel_frames", "user_frames", "folded"})
HASH_BYTES = 16  # blake2b-128: no collision among any number of stacks a lab can store


def ascii_json(value: Any) -> str:
    """Compact JSON, ASCII only (as every stored record is): orjson's, else json's (non-ASCII text,
    integers past 64 bits)."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = None
    if text is None or not text.isascii():
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text


def split(record: dict) -> tuple[str, str, bytes] | None:
    """(the record without its frame fields, those fields as a JSON object, the hash of that JSON), or
    None when the record is not a stack record or holds no frame field."""
    if not is_stack_record(record):
        return None
    frames = {k: v for k, v in record.items() if k in STACK_FIELDS}
    if not frames:
        return None
    frames_text = ascii_json(frames)
    rest = ascii_json({k: v for k, v in record.items() if k not in STACK_FIELDS})
    return rest, frames_text, digest(frames_text)


def digest(frames_text: str) -> bytes:
    return hashlib.blake2b(frames_text.encode(), digest_size=HASH_BYTES).digest()


def join(data: str, frames: str | None) -> str:
    """A stored record's JSON with its stack's frame fields put back (two JSON objects with no key in
    common: one object of both)."""
    if frames is None:
        return data
    return "{" + frames[1:] if data == "{}" else data[:-1] + "," + frames[1:]
