"""Every metric, in the order the app lists them, and get(name). A new metric's entry is one module in
registry/entries/ and one line here."""

from __future__ import annotations

from registry.entries import (
    biopwise,
    cacheraw,
    compmem,
    cpuprofile,
    cpuschedrun,
    netpack,
    offcpu,
    pagefault,
    schparm,
    sysnest,
    tcpconnlat,
)
from registry.spec import MetricSpec

METRICS: list[MetricSpec] = [
    sysnest.SPEC,
    tcpconnlat.SPEC,
    netpack.SPEC,
    pagefault.SPEC,
    cpuschedrun.SPEC,
    biopwise.SPEC,
    offcpu.SPEC,
    cpuprofile.SPEC,
    compmem.SPEC,
    schparm.SPEC,
    cacheraw.SPEC,
]


def get(name: str) -> MetricSpec:
    for spec in METRICS:
        if spec.name == name:
            return spec
    raise KeyError(f"no metric named {name!r}; known: {', '.join(s.name for s in METRICS)}")
