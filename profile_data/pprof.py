"""pprof export: a Profile as gzipped profile.proto (perftools.profiles), the input of `go tool pprof`,
Pyroscope and Grafana. One Location and one Function per distinct frame, one Sample per stack (its
locations leaf first, as the format wants) with its weight as the one value.

The messages are defined here from the format's documented schema (field names and numbers of
profile.proto), in a descriptor pool of this module's own, so no generated code is needed;
tests/profile.proto, written separately from the same documentation, decodes what this writes."""

from __future__ import annotations

import gzip

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from profile_data.model import Frame, Profile

PACKAGE = "perftools.profiles"
KERNEL_FILE = "[kernel.kallsyms]"  # the file a kernel frame without a module is given (as perf names it)
# the one value of each sample, by the profile's unit: (type, unit) as pprof names them
SAMPLE_TYPES = {"samples": ("samples", "count"), "ns": ("time", "nanoseconds"), "bytes": ("space", "bytes")}

_INT64, _UINT64, _BOOL, _STRING, _MESSAGE = (descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                                             descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
                                             descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
                                             descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                                             descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
_REPEATED = "repeated"
# message -> its fields: (name, number, type, message type or None, repeated)
_MESSAGES: dict[str, tuple[tuple, ...]] = {
    "Profile": (("sample_type", 1, _MESSAGE, "ValueType", True), ("sample", 2, _MESSAGE, "Sample", True),
                ("mapping", 3, _MESSAGE, "Mapping", True), ("location", 4, _MESSAGE, "Location", True),
                ("function", 5, _MESSAGE, "Function", True), ("string_table", 6, _STRING, None, True),
                ("drop_frames", 7, _INT64, None, False), ("keep_frames", 8, _INT64, None, False),
                ("time_nanos", 9, _INT64, None, False), ("duration_nanos", 10, _INT64, None, False),
                ("period_type", 11, _MESSAGE, "ValueType", False), ("period", 12, _INT64, None, False),
                ("comment", 13, _INT64, None, True), ("default_sample_type", 14, _INT64, None, False)),
    "ValueType": (("type", 1, _INT64, None, False), ("unit", 2, _INT64, None, False)),
    "Sample": (("location_id", 1, _UINT64, None, True), ("value", 2, _INT64, None, True),
               ("label", 3, _MESSAGE, "Label", True)),
    "Label": (("key", 1, _INT64, None, False), ("str", 2, _INT64, None, False), ("num", 3, _INT64, None, False),
              ("num_unit", 4, _INT64, None, False)),
    "Mapping": (("id", 1, _UINT64, None, False), ("memory_start", 2, _UINT64, None, False),
                ("memory_limit", 3, _UINT64, None, False), ("file_offset", 4, _UINT64, None, False),
                ("filename", 5, _INT64, None, False), ("build_id", 6, _INT64, None, False),
                ("has_functions", 7, _BOOL, None, False), ("has_filenames", 8, _BOOL, None, False),
                ("has_line_numbers", 9, _BOOL, None, False), ("has_inline_frames", 10, _BOOL, None, False)),
    "Location": (("id", 1, _UINT64, None, False), ("mapping_id", 2, _UINT64, None, False),
                 ("address", 3, _UINT64, None, False), ("line", 4, _MESSAGE, "Line", True),
                 ("is_folded", 5, _BOOL, None, False)),
    "Line": (("function_id", 1, _UINT64, None, False), ("line", 2, _INT64, None, False)),
    "Function": (("id", 1, _UINT64, None, False), ("name", 2, _INT64, None, False),
                 ("system_name", 3, _INT64, None, False), ("filename", 4, _INT64, None, False),
                 ("start_line", 5, _INT64, None, False)),
}


def _profile_class() -> type:
    file = descriptor_pb2.FileDescriptorProto(name="profile_data/pprof.proto", package=PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            field = message.field.add(name=field_name, number=number, type=kind,
                                      label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                                      else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
            if type_name:
                field.type_name = f".{PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()  # its own: a generated profile_pb2 may use the default one
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.Profile"))


ProfileMessage = _profile_class()


class _Strings:
    """The string table: index 0 is "", each string once."""

    def __init__(self) -> None:
        self.table = [""]
        self._index = {"": 0}

    def __call__(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.table)
            self.table.append(text)
        return self._index[text]


def frame_file(frame: Frame) -> str:
    return frame.module or (KERNEL_FILE if frame.kind == "kernel" else "")


def to_pprof(profile: Profile, time_nanos: int = 0, duration_nanos: int = 0, comment: str = "") -> bytes:
    """The profile as gzipped profile.proto; each sample's value is its stack's weight rounded to an
    integer (pprof values are int64) in the unit SAMPLE_TYPES names."""
    strings = _Strings()
    message = ProfileMessage(time_nanos=int(time_nanos), duration_nanos=int(duration_nanos))
    sample_type, unit = SAMPLE_TYPES[profile.unit]
    message.sample_type.add(type=strings(sample_type), unit=strings(unit))
    locations: dict[Frame, int] = {}
    functions: dict[tuple[str, str], int] = {}
    for stack, weight in profile.stacks.items():
        ids = []
        for frame in stack:
            if frame not in locations:
                key = (frame.name, frame_file(frame))
                if key not in functions:
                    functions[key] = len(functions) + 1
                    message.function.add(id=functions[key], name=strings(key[0]), system_name=strings(key[0]),
                                         filename=strings(key[1]))
                locations[frame] = len(locations) + 1
                message.location.add(id=locations[frame]).line.add(function_id=functions[key])
            ids.append(locations[frame])
        message.sample.add(location_id=ids[::-1], value=[round(weight)])
    if comment:
        message.comment.append(strings(comment))
    message.string_table.extend(strings.table)
    return gzip.compress(message.SerializeToString(), mtime=0)
