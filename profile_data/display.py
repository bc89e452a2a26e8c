"""How a profile is shown, the same in the window and on the collector's pages: a weight in its unit
as people read it, a frame's colour (flamegraph.pl's palette: red to dark orange for user code,
orange to yellow for the kernel, green for interpreted (Python) functions, grey-blue for processes;
steady per name), and a differential frame's colour (grew red, shrank blue)."""

from __future__ import annotations

import zlib

from bcctool import human_bytes
from profile_data.model import OTHER, Frame


def format_weight(value: float, unit: str) -> str:
    """A weight as people read it: samples counted, ns as ms (or s), bytes in K/M/G."""
    if unit == "ns":
        return f"{value / 1e9:,.3f} s" if value >= 1e10 else f"{value / 1e6:,.3f} ms"
    if unit == "bytes":
        return human_bytes(value)
    return f"{value:,.0f} samples"


def weight_text(value: float, unit: str, period_ns: float = 0.0) -> str:
    """format_weight, and for samples taken every period_ns their time too: "1,234 samples (25.184 s)"."""
    text = format_weight(value, unit)
    if unit == "samples" and period_ns > 0:
        text += f" ({format_weight(value * period_ns, 'ns')})"
    return text


def frame_rgb(frame: Frame) -> tuple[int, int, int]:
    if frame.name == OTHER:
        return 200, 200, 200
    h = zlib.crc32(frame.name.encode())
    v1, v2, v3 = (h & 7) / 7, ((h >> 3) & 7) / 7, ((h >> 6) & 7) / 7  # a few shades: a paint batches them
    if frame.kind == "kernel":
        return 235 + int(20 * v1), 150 + int(70 * v2), int(40 * v3)
    if frame.kind == "python":
        return int(50 * v1), 170 + int(60 * v2), int(60 * v3)
    if frame.kind in ("process", "root"):
        return 150 + int(30 * v1), 170 + int(30 * v2), 200 + int(30 * v3)
    return 200 + int(55 * v3), 40 + int(90 * v1), int(50 * v2)


def change_rgb(change: float, strongest: float) -> tuple[int, int, int]:
    """A differential frame: red for a share that grew, blue for one that shrank, light grey for none;
    in 16 steps, saturated at `strongest` (points)."""
    t = round(16 * min(1.0, abs(change) / strongest)) / 16 if strongest > 0 else 0.0
    fade = int(235 - 200 * t)
    if change > 0:
        return 255, fade, fade
    if change < 0:
        return fade, fade, 255
    return 235, 235, 235
