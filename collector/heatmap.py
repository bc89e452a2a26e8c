"""A latency histogram over time as a heatmap (inline SVG, no script, so it works offline): one column
per interval's hist record (adjacent ones summed when there are more than MAX_COLUMNS), one row per
bucket, each cell's colour the count of events in that bucket then, on a log scale so a rare slow
bucket still shows beside a busy fast one."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from html import escape

from collector import chart
from registry import units

WIDTH, ROW_H, PAD_L, PAD_R, PAD_T, PAD_B = 860, 14, 76, 96, 10, 36
MAX_COLUMNS = 180  # 4.7 px each; more only makes the page heavier
LIGHT, DARK = (255, 245, 200), (150, 0, 30)  # fewest and most events


@dataclass
class Column:
    t0: float
    t1: float
    counts: dict[int, int]  # bucket's lower bound: events


def _buckets(record: dict) -> list[tuple[int, int, int]]:
    """(lo, hi, count) of a hist record's well-formed buckets."""
    found = []
    for b in record.get("buckets") or []:
        if not isinstance(b, dict):
            continue
        lo, hi, count = b.get("lo"), b.get("hi"), b.get("count")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi, count)) and count >= 0:
            found.append((lo, hi, count))
    return found


def names(rows: list[dict], first: str, unit: str) -> list[tuple[str, str]]:
    """The hist names among rows with their bounds' unit: `first` (the declared one), then the others."""
    found = {first: unit}
    for row in rows:
        if row.get("data") is not None and '"name":' in row["data"]:
            record = json.loads(row["data"])
            name = record.get("name")
            if isinstance(name, str) and name and name not in found and record.get("buckets"):
                found[name] = str(record.get("unit") or "")
    return list(found.items())


def grid(rows: list[dict], name: str) -> tuple[list[Column], dict[int, int]]:
    """The hist records called `name` among rows (stored rows, oldest first) as columns, at most
    MAX_COLUMNS of them (each a run of adjacent records summed), and every bucket seen: {lo: hi}."""
    per_record: list[tuple[float, dict[int, int]]] = []
    bounds: dict[int, int] = {}
    for row in rows:
        if row.get("data") is None:
            continue
        record = json.loads(row["data"])
        if record.get("name") != name:
            continue
        counts: dict[int, int] = {}
        for lo, hi, count in _buckets(record):
            counts[lo] = counts.get(lo, 0) + count
            bounds[lo] = max(hi, bounds.get(lo, hi))
        per_record.append((float(row["ts"]), counts))
    step = max(1, math.ceil(len(per_record) / MAX_COLUMNS))
    columns = []
    for start in range(0, len(per_record), step):
        group = per_record[start:start + step]
        summed: dict[int, int] = {}
        for _ts, counts in group:
            for lo, count in counts.items():
                summed[lo] = summed.get(lo, 0) + count
        columns.append(Column(group[0][0], group[-1][0], summed))
    return columns, dict(sorted(bounds.items()))


def _colour(share: float) -> str:
    return "#" + "".join(f"{round(a + (b - a) * share):02x}" for a, b in zip(LIGHT, DARK, strict=True))


def svg(columns: list[Column], bounds: dict[int, int], name: str, unit: str) -> str:
    """The heatmap as an <svg> element (escaped; safe to embed); "" when there is nothing to draw."""
    if not columns or not bounds:
        return ""
    los = list(bounds)
    height = PAD_T + ROW_H * len(los) + PAD_B
    plot_w = WIDTH - PAD_L - PAD_R
    t0, t1 = columns[0].t0, columns[-1].t1
    # each column ends where the next begins; the last one is as wide as the one before it
    ends = [c.t0 for c in columns[1:]] + [t1 + (t1 - columns[-2].t0 if len(columns) > 1 else 1.0)]
    span = (ends[-1] - t0) or 1.0

    def x(t: float) -> float:
        return PAD_L + (t - t0) / span * plot_w

    top = max((c for col in columns for c in col.counts.values()), default=0)
    scale = math.log1p(top) or 1.0
    parts = [f'<svg class="heatmap" data-hist="{escape(name)}" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
             f'aria-label="{escape(name)} histogram over time" shape-rendering="crispEdges">',
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{ROW_H * len(los)}" fill="#fafafa" '
             f'stroke="#ccc"/>']
    row_of = {lo: len(los) - 1 - i for i, lo in enumerate(los)}  # the smallest bucket at the bottom
    label_every = max(1, math.ceil(len(los) / 12))
    for i, lo in enumerate(los):
        if i % label_every == 0:
            y = PAD_T + ROW_H * row_of[lo] + ROW_H / 2 + 4
            parts.append(f'<text class="ytick" x="{PAD_L - 6}" y="{y:.1f}" text-anchor="end" font-size="11">'
                         f'{escape(chart.si(lo, unit))}</text>')
    for col, end in zip(columns, ends, strict=True):
        left, right = x(col.t0), x(end)
        for lo, count in col.counts.items():
            if count <= 0 or lo not in row_of:
                continue
            parts.append(f'<rect class="cell" x="{left:.1f}" y="{PAD_T + ROW_H * row_of[lo]}" '
                         f'width="{max(right - left, 0.5):.1f}" height="{ROW_H}" '
                         f'fill="{_colour(math.log1p(count) / scale)}" data-lo="{lo}" '
                         f'data-count="{count}"/>')
    for t in chart.time_ticks(t0, ends[-1]):
        label = time.strftime("%H:%M:%S", time.gmtime(t))
        anchor = "start" if x(t) < PAD_L + 30 else "end" if x(t) > WIDTH - PAD_R - 30 else "middle"
        parts.append(f'<text class="xtick" x="{x(t):.1f}" y="{height - 20}" text-anchor="{anchor}" font-size="11">'
                     f'{label}</text>')
    parts.append(f'<text x="{PAD_L + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle" font-size="12">'
                 f'{escape(units.guess(name)[0])}: events per bucket over time (UTC); bucket lower bounds at left</text>')
    # the colour key: fewest to most events in one cell
    key_x, key_h = WIDTH - PAD_R + 30, ROW_H * len(los)
    for i in range(10):
        parts.append(f'<rect x="{key_x}" y="{PAD_T + key_h * (9 - i) / 10:.1f}" width="14" '
                     f'height="{key_h / 10 + 0.5:.1f}" fill="{_colour(i / 9)}"/>')
    parts.append(f'<text class="key" x="{key_x + 18}" y="{PAD_T + 10}" font-size="11">{escape(chart.si(top))}</text>')
    parts.append(f'<text class="key" x="{key_x + 18}" y="{PAD_T + key_h}" font-size="11">1</text>')
    parts.append("</svg>")
    return "".join(parts)
