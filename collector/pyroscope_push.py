"""A stream's profile over a window as a request to Grafana Pyroscope's documented ingest API:
POST /ingest?name=<app>.<metric>{host=..,run_id=..}&from=&until=&format=&units=&sampleRate=
&aggregationType=, the body folded text ("a;b;c 12" lines) or, for format=pprof, a multipart form with
the gzipped profile.proto in the field `profile` and a `sample_type_config` naming its one sample type
(with pprof, `name` is a prefix and the config's display-name the rest, so both formats give one name)."""

from __future__ import annotations

import json
import math
import re

from collector.profiles import RangeProfile
from collector.push_targets import Push, PushTarget
from profile_data import to_folded
from profile_data.pprof import SAMPLE_TYPES, to_pprof

NS_RATE = 1_000_000_000  # a profile in ns as Pyroscope samples: one "sample" per nanosecond
# a label value keeps these characters; any other becomes "_" (',', '}', '=' and quotes end a value)
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._:/@-]")


def label_value(text: str) -> str:
    return _LABEL_VALUE.sub("_", text)[:128] or "_"


def app_name(target: PushTarget, key: tuple[str, str, str], with_metric: bool = True) -> str:
    """name= as Pyroscope documents it, `app.metric{host=...,run_id=...}` (with pprof, without .metric)."""
    host, run_id, source = key
    labels = f"{{host={label_value(host)},run_id={label_value(run_id)}}}"
    return f"{target.app}.{label_value(source)}{labels}" if with_metric else f"{target.app}{labels}"


def _units(result: RangeProfile) -> dict[str, str]:
    """units, aggregationType and sampleRate for the profile's unit."""
    unit = result.profile.unit
    if unit == "bytes":
        return {"units": "bytes", "aggregationType": "average" if result.weighting.snapshot else "sum"}
    if unit == "ns":
        return {"units": "samples", "aggregationType": "sum", "sampleRate": str(NS_RATE)}
    params = {"units": "samples", "aggregationType": "sum"}
    if result.period_ns > 0:
        params["sampleRate"] = str(max(1, round(1e9 / result.period_ns)))
    return params


def build(target: PushTarget, key: tuple[str, str, str], result: RangeProfile, since: float, until: float) -> Push:
    """The push of one stream's window [since, until] (unix seconds; Pyroscope takes whole ones)."""
    start = math.floor(since)
    params = {"from": str(start), "until": str(max(start + 1, math.ceil(until))), "format": target.format}
    headers = dict(target.headers)
    if target.format == "folded":
        params.update(name=app_name(target, key), **_units(result))
        headers["Content-Type"] = "text/plain; charset=utf-8"
        return Push(key, since, until, target.url, params, headers, body=to_folded(result.profile).encode())
    sample_type, _unit = SAMPLE_TYPES[result.profile.unit]
    units = _units(result)
    config = {sample_type: {"units": units["units"], "aggregation": units["aggregationType"],
                            "display-name": label_value(key[2]), "sampled": False}}
    params["name"] = app_name(target, key, with_metric=False)
    blob = to_pprof(result.profile, time_nanos=round(since * 1e9), duration_nanos=round((until - since) * 1e9))
    files = {"profile": ("profile.pb.gz", blob, "application/octet-stream"),
             "sample_type_config": ("config.json", json.dumps(config).encode(), "application/json")}
    return Push(key, since, until, target.url, params, headers, files=files)
