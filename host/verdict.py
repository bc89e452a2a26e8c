"""The preflight's verdict on one metric: host/preflight.py writes it, host/elevation.py adjusts it for
a metric that can start through `sudo -n`. A leaf, so neither of the two imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Verdict:
    name: str
    runnable: bool
    reason: str               # why not, or "" when runnable
    probes: list[str]         # required probes
    missing: list[str]        # of those, not on this kernel
