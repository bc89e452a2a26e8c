"""OTLP profiles export: a Profile as an ExportProfilesServiceRequest of the OpenTelemetry protocol
(opentelemetry.proto...v1development, the `opentelemetry-proto` package's generated messages), what an
OpenTelemetry Collector takes on its OTLP/HTTP receiver at POST /v1development/profiles.

One ResourceProfiles (the resource's attributes: service.name, host.name and the caller's), one
ScopeProfiles, one Profile. The request's dictionary holds each string, function, mapping (a frame's
module), location and stack once; every table starts with its zero value, as the format requires. A
stack's root process frame (its comm) becomes the sample's thread.name attribute, as the OpenTelemetry
eBPF profiler reports it, and its other frames the stack's locations, leaf first."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from profile_data.model import Frame, Profile, Stack
from profile_data.pprof import SAMPLE_TYPES, frame_file

SCOPE = "ebpf-profiler-collector"
THREAD_NAME = "thread.name"  # OpenTelemetry's attribute for a thread's name (a task's comm)
FRAME_TYPE = "profile.frame.type"  # semantic conventions: what kind of code a location runs
FRAME_TYPES = {"kernel": "kernel", "user": "native", "python": "cpython"}
PERIOD_TYPE = ("cpu", "nanoseconds")  # a sampling profile's period: CPU time between two samples


class _Table:
    """A dictionary table: index 0 its zero value, each distinct item (by key) once."""

    def __init__(self, container: Any, zero: Any) -> None:
        self.container = container  # a repeated field of the dictionary
        self.index: dict[Hashable, int] = {}
        container.append(zero)

    def __call__(self, key: Hashable, make: Callable[[], Any]) -> int:
        if key not in self.index:
            self.index[key] = len(self.container)
            self.container.append(make())
        return self.index[key]


class _Dictionary:
    """The request's ProfilesDictionary, filled as stacks are added."""

    def __init__(self, dictionary: pb.ProfilesDictionary) -> None:
        self.strings = _Table(dictionary.string_table, "")
        self.strings.index[""] = 0
        self.attributes = _Table(dictionary.attribute_table, pb.KeyValueAndUnit())
        self.mappings = _Table(dictionary.mapping_table, pb.Mapping())
        self.functions = _Table(dictionary.function_table, pb.Function())
        self.locations = _Table(dictionary.location_table, pb.Location())
        self.stacks = _Table(dictionary.stack_table, pb.Stack())
        dictionary.link_table.append(pb.Link())

    def string(self, text: str) -> int:
        return self.strings(text, lambda: text)

    def attribute(self, key: str, value: str) -> int:
        return self.attributes((key, value), lambda: pb.KeyValueAndUnit(key_strindex=self.string(key),
                                                                        value=AnyValue(string_value=value)))

    def location(self, frame: Frame) -> int:
        def make() -> pb.Location:
            python = frame.kind == "python"  # its module is the source file, not a mapped object
            name = self.string(frame.name)
            function = self.functions((frame.name, frame.module if python else ""), lambda: pb.Function(
                name_strindex=name, system_name_strindex=name,
                filename_strindex=self.string(frame.module) if python else 0))
            file = "" if python else frame_file(frame)
            mapping = self.mappings(file, lambda: pb.Mapping(filename_strindex=self.string(file))) if file else 0
            kind = self.attribute(FRAME_TYPE, FRAME_TYPES.get(frame.kind, "native"))
            return pb.Location(mapping_index=mapping, lines=[pb.Line(function_index=function)],
                               attribute_indices=[kind])
        return self.locations(frame, make)

    def stack(self, frames: Stack) -> int:
        indices = [self.location(f) for f in reversed(frames)]  # leaf first
        return self.stacks(tuple(indices), lambda: pb.Stack(location_indices=indices))


def _key_values(attributes: Mapping[str, str]) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=str(v))) for k, v in attributes.items()]


def to_otlp(profile: Profile, resource: Mapping[str, str], time_unix_nano: int = 0, duration_nano: int = 0,
            period_ns: float = 0.0, scope_version: str = "") -> ExportProfilesServiceRequest:
    """The profile as one OTLP export request; each sample's value is its stack's weight rounded to an
    integer in the unit pprof.SAMPLE_TYPES names. period_ns: a sample's CPU time (a sampling profile,
    0: not known)."""
    request = ExportProfilesServiceRequest()
    d = _Dictionary(request.dictionary)
    sample_type, unit = SAMPLE_TYPES[profile.unit]
    message = pb.Profile(sample_type=pb.ValueType(type_strindex=d.string(sample_type), unit_strindex=d.string(unit)),
                         time_unix_nano=int(time_unix_nano), duration_nano=int(duration_nano))
    if profile.unit == "samples" and period_ns > 0:
        message.period_type.CopyFrom(pb.ValueType(type_strindex=d.string(PERIOD_TYPE[0]),
                                                  unit_strindex=d.string(PERIOD_TYPE[1])))
        message.period = round(period_ns)
    for stack, weight in profile.stacks.items():
        value = round(weight)
        if value <= 0:
            continue
        process = stack[0].kind == "process"
        frames = stack[1:] if process else stack
        thread = [d.attribute(THREAD_NAME, stack[0].name)] if process else []
        message.samples.add(stack_index=d.stack(frames) if frames else 0, attribute_indices=thread, values=[value])
    request.resource_profiles.add(
        resource=Resource(attributes=_key_values(resource)),
        scope_profiles=[pb.ScopeProfiles(scope=InstrumentationScope(name=SCOPE, version=scope_version),
                                         profiles=[message])])
    return request


def to_otlp_bytes(profile: Profile, resource: Mapping[str, str], time_unix_nano: int = 0, duration_nano: int = 0,
                  period_ns: float = 0.0) -> bytes:
    """to_otlp serialized: the body of an OTLP/HTTP export (Content-Type: application/x-protobuf)."""
    return to_otlp(profile, resource, time_unix_nano, duration_nano, period_ns).SerializeToString()
