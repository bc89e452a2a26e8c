"""Numbers as people read them, the same in the window, on the dashboard and in the terminal: a value
scaled to its size with its unit (12.7 s, not 12,692,078 µs; 59.1 MiB, not 61,997,056 bytes; 125.0
MiB/s), a column's times in the one unit its heading names, and a heading in words.

Driven by the units the registry declares (Field.unit, Chart.unit, Figure.unit in registry/spec.py):
    ""        text, or a number with nothing to scale (a priority score)
    "count"   a number of things: thousands separators
    "id"      a number that names something (a pid, a port): written as it is
    "ns", "us", "ms", "s"   a time: shown in ns, µs, ms or s, whichever its size reads best in
    "bytes"   a size: B, KiB, MiB, GiB
    "pct"     a share in %
    "hz"      a frequency
    "/s"      a count per second; "bytes/s", "ms/s", "s/s"...: a size or a time per second
Imports nothing of the project, so gui/, collector/ and bcctool/ all can."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

TIMES = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}      # seconds per unit
SYMBOLS = {"ns": "ns", "us": "µs", "ms": "ms", "s": "s", "pct": "%", "hz": "Hz", "bytes": "B", "/s": "/s"}
SIZES = ("B", "KiB", "MiB", "GiB", "TiB")
PER_S = "/s"
# fields that name things rather than count them, whatever their unit says: no thousands separators
IDENTIFIERS = {"pid", "tid", "ppid", "tgid", "uid", "gid", "port", "lport", "dport", "sport", "cpu", "cgroup_id",
               "id", "dev", "major", "minor", "inode", "syscall_nr", "nr", "stack_id"}


def is_identifier(name: str, unit: str = "") -> bool:
    """A number that names something: declared "id", or undeclared and named like one (a declared unit
    wins: pagefault's minor and major are counts, a device's are not)."""
    return unit == "id" or (not unit and (name in IDENTIFIERS or name.endswith(("_pid", "_tid", "_port", "_id"))))


def per_second(unit: str) -> tuple[str, bool]:
    """(the unit without "/s", whether it was a rate): ("bytes", True) for "bytes/s"; "/s" is a count's."""
    if unit == PER_S:
        return "count", True
    if unit.endswith(PER_S):
        return unit[:-len(PER_S)], True
    return unit, False


def symbol(unit: str) -> str:
    """A unit as written after a number or in a heading: µs, %, MiB/s; '' for counts, ids and text."""
    base, rate = per_second(unit)
    text = "" if base in ("", "count", "id") else SYMBOLS.get(base, base)
    return text + PER_S if rate else text


def time_unit(largest: float, unit: str) -> str:
    """The time unit a magnitude (given in `unit`) reads best in: the largest in which it is 1 or more
    (s at most), so 894.1 µs stays µs and 12,692,078 µs is s."""
    seconds = abs(largest) * TIMES[unit]
    if seconds == 0 or not math.isfinite(seconds):
        return unit
    return next((u for u in ("s", "ms", "us") if seconds >= TIMES[u] * 0.9995), "ns")


def convert(value: float, unit: str, to: str) -> float:
    return value * TIMES[unit] / TIMES[to]


COLUMN_DIGITS = 1e4   # a column's largest time has at most four digits before the point (1,005 ms, 12.7 s)


def column_unit(unit: str, values: Iterable[Any]) -> str:
    """The unit a column of values declared in `unit` is shown in: times (and times per second) in the
    smallest unit in which the column's largest is under 10,000 (so its smaller values keep their
    digits), the same for every cell; any other unit as declared."""
    base, rate = per_second(unit)
    if base not in TIMES:
        return unit
    largest = max((abs(v) for v in values if _is_number(v) and math.isfinite(v)), default=0)
    if largest == 0:
        return unit
    seconds = largest * TIMES[base]
    shown = next((u for u in ("ns", "us", "ms") if seconds / TIMES[u] < COLUMN_DIGITS * 0.99995), "s")
    return shown + PER_S if rate else shown


def number(value: float) -> str:
    """A number without its unit: thousands separators, about three significant digits for fractions
    (12,346 · 12.3 · 2.345 · 0.00041)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "" if value != value else str(value)
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    decimals = 3 if size >= 0.01 or size == 0 else min(12, 1 - math.floor(math.log10(size)))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".") or "0"


def byte_size(value: float, rate: bool = False) -> str:
    """A size with a binary prefix: 512 B, 4.0 KiB, 59.1 MiB (with /s for a rate)."""
    size, step = float(value), 0
    while abs(size) >= 1024 and step < len(SIZES) - 1:
        size /= 1024
        step += 1
    text = f"{size:.0f} {SIZES[0]}" if step == 0 else f"{size:.1f} {SIZES[step]}"
    return text + PER_S if rate else text


def compact(value: float) -> str:
    """A short number for an axis tick: 950, 1.2k, 3.4M (never 1.2e+06)."""
    for suffix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size * 0.9995:
            return f"{value / size:.3g}{suffix}"
    if value == 0:
        return "0"
    return f"{value:.3g}" if abs(value) >= 1e-3 else number(value)


def cell(value: Any, unit: str = "", name: str = "", shown: str | None = None) -> str:
    """A table cell: a number in the column's shown unit (its heading names it: heading(label, shown)),
    except sizes, which carry their own (888.0 KiB); identifiers as they are; lists joined."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if _is_number(value):
        if is_identifier(name, unit):
            return str(value)
        base, rate = per_second(unit)
        if base == "bytes":
            return byte_size(value, rate)
        if base in TIMES:
            to, _ = per_second(shown or unit)
            return number(convert(value, base, to if to in TIMES else base))
        return number(value)
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def heading(label: str, unit: str) -> str:
    """A column's heading: its label with the unit its cells are in, once (CPU% and Minor/s say it
    already); none for sizes, whose cells carry theirs."""
    base, _ = per_second(unit)
    text = symbol(unit)
    if not text or base == "bytes" or label.endswith(text) or f"({text})" in label:
        return label
    return f"{label}{PER_S}" if unit == PER_S else f"{label} ({text})"   # Syscalls/s, Total (ms)


def quantity(value: float, unit: str) -> str:
    """One value with its unit, scaled to its size: 12.7 s, 59.1 MiB, 125.0 MiB/s, 741/s, 42.5%."""
    if isinstance(value, bool) or not _is_number(value):
        return "" if value is None else str(value)
    base, rate = per_second(unit)
    if base == "bytes":
        return byte_size(value, rate)
    if base in TIMES:
        to = time_unit(value, base)
        return f"{number(convert(value, base, to)).removesuffix('.0')} {SYMBOLS[to]}" + (PER_S if rate else "")
    text = number(value).removesuffix(".0")
    suffix = symbol(unit)
    if not suffix:
        return text
    return text + suffix if suffix[0] in "/%" else f"{text} {suffix}"


def axis(unit: str, largest: float) -> tuple[float, str]:
    """(factor, unit text) for an axis whose values are in `unit` and reach `largest`: times and sizes
    scaled so the ticks read 0-999 (an axis of ms values up to 0.1 is in µs, of bytes/s up to 150e6
    in MiB/s); other units as they are."""
    base, rate = per_second(unit)
    suffix = PER_S if rate else ""
    if base in TIMES:
        to = time_unit(largest, base)
        return TIMES[base] / TIMES[to], SYMBOLS[to] + suffix
    if base == "bytes":
        step = 0
        while abs(largest) >= 1024 ** (step + 1) * 0.9995 and step < len(SIZES) - 1:
            step += 1
        return 1 / 1024 ** step, SIZES[step] + suffix
    return 1.0, symbol(unit)


def guess(name: str) -> tuple[str, str]:
    """(label, unit) for a field no declaration names, from its words and unit suffix: avg_lat_us ->
    ("Avg latency", "us"), bytes_per_s -> ("Bytes", "bytes/s"), per_sec -> ("Rate", "/s"), cgroup_id ->
    ("Cgroup ID", "id")."""
    words = [w for w in name.split("_") if w]
    rate = len(words) >= 2 and words[-2] == "per" and words[-1] in ("s", "sec", "second")
    if rate:
        words = words[:-2]
    base = ""
    if words and words[-1] in _SUFFIX_UNITS:
        base = _SUFFIX_UNITS[words[-1]]
        if base != "bytes" and len(words) > 1:
            words = words[:-1]
    elif words and words[-1] in ("id", "pid", "tid", "nr") and not rate:
        base = "id"
    unit = (base if base != "count" else "") + PER_S if rate else base
    text = " ".join(_WORDS.get(w, w) for w in words) or "rate"
    return text[0].upper() + text[1:], unit


_SUFFIX_UNITS = {"ns": "ns", "us": "us", "ms": "ms", "s": "s", "bytes": "bytes", "pct": "pct", "hz": "hz"}
_WORDS = {"avg": "avg", "lat": "latency", "ios": "I/Os", "id": "ID", "pid": "PID", "tid": "TID", "ppid": "PPID",
          "uid": "UID", "cpu": "CPU", "comm": "command", "nr": "number", "rss": "RSS", "vm": "VM", "ip": "IP",
          "p50": "p50", "p99": "p99", "min": "min", "max": "max", "rt": "RT", "dev": "device", "len": "length",
          "runq": "run-queue"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
