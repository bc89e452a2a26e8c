"""The profile exports (profile_data.pprof, profile_data.speedscope) judged by definitions they did not
write: the pprof bytes decoded with tests/data/profile.proto compiled by protoc, the speedscope JSON
validated against the schema the speedscope npm package ships (installed by setup)."""

from __future__ import annotations

import gzip
import json
import os

import jsonschema
import pytest
from helpers import ROOT
from pprof_decode import decode

from profile_data import Frame, Profile, from_records
from profile_data.pprof import to_pprof
from profile_data.speedscope import to_speedscope

SCHEMA = os.path.join(ROOT, "collector", "vendor", "node_modules", "speedscope", "dist", "release",
                      "file-format-schema.json")


def records(metric: str) -> list[dict]:
    with open(os.path.join(ROOT, "tests", "samples", f"{metric}.ndjson")) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_profile() -> Profile:
    """A cpuprofile-like profile: user and kernel frames, two processes, a frame shared by both."""
    work, libc = Frame("work", "/usr/bin/work"), Frame("read", "libc.so.6")
    kernel = Frame("ksys_read", "", "kernel")
    return Profile("samples", [((Frame("work", "", "process"), Frame("main", "/usr/bin/work"), work), 61),
                               ((Frame("work", "", "process"), Frame("main", "/usr/bin/work"), work, libc, kernel), 29),
                               ((Frame("cat", "", "process"), libc, kernel), 10)])


PROFILES = {
    "cpuprofile": lambda: (cpu_profile(), 100),
    # offcpu's blocked time (ms in the records, ns in the profile) and compmem's outstanding bytes
    "offcpu": lambda: (from_records(records("offcpu"), "total_ms", "ns"),
                       round(sum(r["total_ms"] for r in records("offcpu") if r.get("level") == "stack") * 1e6)),
    "compmem": lambda: (from_records(records("compmem"), "outstanding_bytes", "bytes"),
                        sum(r["outstanding_bytes"] for r in records("compmem") if r.get("level") == "stack")),
}


@pytest.mark.parametrize("name", PROFILES)
def test_pprof_decodes_with_profile_proto_and_totals_equal_the_records(profile_pb2, name):
    profile, records_total = PROFILES[name]()
    assert len(profile) >= 2
    stacks, _strings, types = decode(profile_pb2, to_pprof(profile, time_nanos=1_700_000_000 * 10**9))
    assert types == [{"samples": ("samples", "count"), "ns": ("time", "nanoseconds"),
                      "bytes": ("space", "bytes")}[profile.unit]]
    assert sum(stacks.values()) == records_total  # the NDJSON's own sum of its stack records
    kernel_file = "[kernel.kallsyms]"
    assert stacks == {tuple((f.name, f.module or (kernel_file if f.kind == "kernel" else "")) for f in stack): round(w)
                      for stack, w in profile.stacks.items()}


def test_pprof_shares_functions_and_locations_between_stacks(profile_pb2):
    message = profile_pb2.Profile()
    message.ParseFromString(gzip.decompress(to_pprof(cpu_profile())))
    distinct = {f for stack in cpu_profile().stacks for f in stack}
    assert len(message.location) == len(distinct)
    assert len(message.string_table) == len(set(message.string_table))


@pytest.mark.parametrize("name", PROFILES)
def test_speedscope_validates_against_speedscopes_schema_and_keeps_totals(name):
    with open(SCHEMA) as f:  # collector/vendor/node_modules: scripts/setup.sh installs it
        schema = json.load(f)
    profile, records_total = PROFILES[name]()
    document = json.loads(json.dumps(to_speedscope(profile, name=name)))
    jsonschema.validate(document, schema)
    sampled = document["profiles"][0]
    assert round(sum(sampled["weights"])) == records_total == round(sampled["endValue"])
    frames = document["shared"]["frames"]
    rebuilt = {tuple(frames[i]["name"] for i in sample): w for sample, w in zip(sampled["samples"], sampled["weights"],
                                                                                strict=True)}
    assert rebuilt == {tuple(f.name for f in stack): w for stack, w in profile.stacks.items()}


def test_speedscope_schema_refuses_a_broken_file():
    """The validation can fail: a profile without weights is not speedscope's format."""
    with open(SCHEMA) as f:
        schema = json.load(f)
    document = to_speedscope(cpu_profile())
    del document["profiles"][0]["weights"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema)
