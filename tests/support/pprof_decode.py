"""pprof judged by a definition our writer did not use: tests/data/profile.proto compiled by grpcio-tools'
protoc (`profile_pb2`, a fixture), and a decoder of gzipped profile bytes into stacks and totals."""

from __future__ import annotations

import gzip
import importlib.util
import os
import sys

import pytest
from helpers import ROOT


@pytest.fixture(scope="module")
def profile_pb2(tmp_path_factory):
    """tests/data/profile.proto compiled by grpcio-tools' protoc and imported."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("pb2")
    data = os.path.join(ROOT, "tests", "data")
    assert protoc.main(["protoc", f"-I{data}", f"--python_out={out}", os.path.join(data, "profile.proto")]) == 0
    spec = importlib.util.spec_from_file_location("profile_pb2", out / "profile_pb2.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["profile_pb2"] = module
    spec.loader.exec_module(module)
    return module


def decode(profile_pb2, blob: bytes) -> tuple[dict[tuple, int], list[str], list[tuple[str, str]]]:
    """(stack of (function, file) root first -> value, sample type, ...) from pprof bytes."""
    message = profile_pb2.Profile()
    message.ParseFromString(gzip.decompress(blob))
    strings = list(message.string_table)
    assert strings[0] == ""
    functions = {f.id: (strings[f.name], strings[f.filename]) for f in message.function}
    locations = {loc.id: functions[loc.line[0].function_id] for loc in message.location}
    assert len(locations) == len(message.location) and 0 not in locations
    stacks: dict[tuple, int] = {}
    for sample in message.sample:
        assert len(sample.value) == len(message.sample_type) == 1
        stack = tuple(locations[i] for i in reversed(sample.location_id))  # leaf first in the format
        stacks[stack] = stacks.get(stack, 0) + sample.value[0]
    types = [(strings[t.type], strings[t.unit]) for t in message.sample_type]
    return stacks, strings, types
