"""speedscope export: a Profile as speedscope's file format (https://www.speedscope.app/file-format-schema.json),
one "sampled" profile whose samples are the distinct stacks (frame indices root first) weighted by their
weights, so speedscope's left-heavy and sandwich views show the same totals as the flame graph."""

from __future__ import annotations

from typing import Any

from profile_data.model import Frame, Profile
from profile_data.pprof import frame_file

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
UNITS = {"samples": "none", "ns": "nanoseconds", "bytes": "bytes"}


def to_speedscope(profile: Profile, name: str = "profile", exporter: str = "profile_data") -> dict[str, Any]:
    """The profile as a speedscope file (a JSON-ready dict), stacks heaviest first."""
    frames: dict[Frame, int] = {}
    shared: list[dict[str, str]] = []
    samples, weights = [], []
    for stack, weight in sorted(profile.stacks.items(), key=lambda kv: -kv[1]):
        indices = []
        for frame in stack:
            if frame not in frames:
                frames[frame] = len(shared)
                file = frame_file(frame)
                shared.append({"name": frame.name, "file": file} if file else {"name": frame.name})
            indices.append(frames[frame])
        samples.append(indices)
        weights.append(weight)
    return {"$schema": SCHEMA_URL, "name": name, "exporter": exporter, "activeProfileIndex": 0,
            "shared": {"frames": shared},
            "profiles": [{"type": "sampled", "name": name, "unit": UNITS[profile.unit], "startValue": 0,
                          "endValue": profile.total, "samples": samples, "weights": weights}]}
