"""How long the collector keeps what, and how old stack records are merged (the pure part; compaction.py
does the database work). A policy is a list of tiers: raw records for the first age, then each stack
record merged into buckets of the next tier's length until that tier's age, and nothing past the last
age. Merging keeps a profile's totals: a merged record is an ordinary stack record (same kind, metric,
stack and identifying fields) at its bucket's start, with the weights of the records it replaces
summed, so every reader (flame graphs, /api/profile, exports) reads it unchanged."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_POLICY = "raw=24h,1m=7d,1h=90d"
POLICY_HELP = ("retention must be 'off' or tiers such as raw=24h,1m=7d,1h=90d (raw records for 24 h, 1-minute "
               "buckets until 7 days, 1-hour buckets until 90 days, older ones deleted)")
_LENGTH = re.compile(r"^([0-9]{1,7})(s|m|h|d)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_BYTES = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b)?$", re.IGNORECASE)
_BYTE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}

# fields a merged record sums, takes the least or the most of, or averages weighted by its count (offcpu's
# stack rows); the chart's weight field (profiles.weighting) is summed too
SUMMED = frozenset({"count", "total_ms", "total_us", "total_ns"})
LEAST = frozenset({"min_us", "min_ns", "min_ms"})
MOST = frozenset({"max_us", "max_ns", "max_ms"})
MEANS = frozenset({"avg_us", "avg_ns", "avg_ms"})
# fields that differ from interval to interval without telling stacks apart: not part of a group's key,
# and not kept in a merged record (a rank or a share within one interval means nothing for a bucket)
VARYING = frozenset({"ts", "interval", "rank", "percentage", "stack_id", "oldest_age_s"})
MERGED_FIELDS = ("intervals", "bucket_s")  # what a merged record adds: intervals it covers, its bucket


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class Tier:
    bucket_s: int  # 0: records as received
    until_s: int  # kept in this tier until this age


@dataclass(frozen=True)
class Policy:
    tiers: tuple[Tier, ...] = ()  # none: everything kept for good

    @property
    def max_age_s(self) -> int | None:
        return self.tiers[-1].until_s if self.tiers else None

    def text(self) -> str:
        return ",".join(f"{'raw' if t.bucket_s == 0 else length_text(t.bucket_s)}={length_text(t.until_s)}"
                        for t in self.tiers) or "off"


def length_text(seconds: int) -> str:
    for unit in ("d", "h", "m"):
        if seconds % _SECONDS[unit] == 0:
            return f"{seconds // _SECONDS[unit]}{unit}"
    return f"{seconds}s"


def _length(text: str) -> int:
    match = _LENGTH.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise PolicyError(POLICY_HELP)
    return int(match.group(1)) * _SECONDS[match.group(2)]


def parse_policy(text: str) -> Policy:
    """'off', or tiers 'raw=AGE,BUCKET=AGE,...': ages growing, each bucket a multiple of the one before
    (an hour's bucket is whole minutes' buckets merged again). PolicyError says what is wrong."""
    text = text.strip()
    if text == "off":
        return Policy()
    tiers = []
    for part in text.split(","):
        name, sep, age = part.partition("=")
        if not sep:
            raise PolicyError(POLICY_HELP)
        tiers.append(Tier(0 if name.strip() == "raw" else _length(name), _length(age)))
    for before, after in zip(tiers, tiers[1:], strict=False):
        if after.until_s <= before.until_s:
            raise PolicyError("retention: each tier's age must be longer than the one before")
        if after.bucket_s <= before.bucket_s or (before.bucket_s and after.bucket_s % before.bucket_s):
            raise PolicyError("retention: each tier's bucket must be a multiple of the one before")
    if any(t.bucket_s > t.until_s for t in tiers):
        raise PolicyError("retention: a tier's bucket must be shorter than its age")
    return Policy(tuple(tiers))


def parse_bytes(text: str) -> int:
    """'500000000', '500MB', '2GiB', '1.5g' (powers of 1024) as bytes; ValueError if not one."""
    match = _BYTES.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r} (say 2GB, 500MB or a number of bytes)")
    return int(float(match.group(1)) * _BYTE_UNITS[match.group(2).lower()])


def bucket_of(ts: float, bucket_s: int) -> float:
    return float(ts // bucket_s * bucket_s)


def group_key(record: dict, summed: frozenset[str]) -> tuple:
    """What tells the record's stack apart from another's in one bucket: every field but the weights and
    the per-interval ones (pid, tid, comm, cgroup, level, ... as the record carries them)."""
    skip = VARYING | summed | LEAST | MOST | MEANS | set(MERGED_FIELDS)
    return tuple(sorted((k, repr(v)) for k, v in record.items() if k not in skip))


def intervals_of(records: Iterable[dict]) -> tuple[object, int]:
    """A bucket's records (raw or merged before) as (its newest interval, how many intervals it covers): a
    merged record stands for its own `intervals`."""
    seen: dict[object, int] = {}
    for record in records:
        interval = record.get("interval")
        seen[interval] = max(seen.get(interval, 0), _count(record.get("intervals"), 1))
    numbers = [i for i in seen if isinstance(i, (int, float)) and not isinstance(i, bool)]
    newest = max(numbers) if numbers else next(iter(seen), None)
    return newest, sum(seen.values())


def merge(records: list[dict], weight: str, bucket_s: int, bucket_start: float, interval: object,
          intervals: int) -> dict:
    """One record for a group of a bucket (same stack and key): the first's fields, the weights summed,
    least/most kept, means weighted by count; at the bucket's start, as the bucket's newest interval."""
    summed = SUMMED | {weight}
    placed = {"ts": bucket_start, "interval": interval}
    merged = {k: placed.get(k, v) for k, v in records[0].items() if k not in VARYING or k in placed}
    for field in merged.keys() & (summed | LEAST | MOST | MEANS):
        values = [r[field] for r in records if _number(r.get(field))]
        if field in summed:
            merged[field] = _total(values)
        elif field in LEAST:
            merged[field] = min(values, default=None)
        elif field in MOST:
            merged[field] = max(values, default=None)
        else:
            weights = [(r[field], r.get("count")) for r in records if _number(r.get(field)) and _number(r.get("count"))]
            n = sum(c for _v, c in weights)
            merged[field] = round(sum(v * c for v, c in weights) / n, 3) if n else None
    merged = {k: v for k, v in merged.items() if v is not None or records[0].get(k) is None}
    merged.update(intervals=intervals, bucket_s=bucket_s)
    return merged


def _total(values: list) -> int | float:
    total = sum(values)
    return round(total, 6) if isinstance(total, float) else total


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
