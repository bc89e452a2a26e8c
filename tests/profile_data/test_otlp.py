"""profile_data/otlp.py on its own: what the format says of each table (a zero value first, each item
once), a Python frame's file on its function and no mapping, a kernel frame without a module mapped to
the kernel, a stack that is only its process, units and the period, read back with the
`opentelemetry-proto` package's classes."""

from __future__ import annotations

from push_receivers import decode_otlp

from profile_data import Frame, Profile
from profile_data.otlp import to_otlp, to_otlp_bytes

PROC = Frame("python3", "", "process")
PY = Frame("handle (app.py:12)", "app.py", "python")
NATIVE = Frame("PyEval_EvalFrame", "libpython3.11.so", "user")
KERNEL = Frame("do_sys_poll", "", "kernel")


def profile(unit: str = "ns") -> Profile:
    p = Profile(unit)
    p.add((PROC, NATIVE, PY, KERNEL), 7_000_000)
    p.add((PROC, NATIVE, PY), 2_000_000.4)  # a weight is rounded to an int64
    p.add((PROC,), 500)
    return p


def test_stacks_units_and_tables_read_back():
    request = to_otlp(profile(), {"service.name": "lab", "host.name": "pc-1"}, time_unix_nano=5, duration_nano=9)
    stacks, decoded = decode_otlp(request.SerializeToString())
    assert stacks == {("python3", NATIVE.name, PY.name, KERNEL.name): 7_000_000,
                      ("python3", NATIVE.name, PY.name): 2_000_000, ("python3",): 500}
    d = decoded.dictionary
    strings = list(d.string_table)
    p = decoded.resource_profiles[0].scope_profiles[0].profiles[0]
    assert (strings[p.sample_type.type_strindex], strings[p.sample_type.unit_strindex]) == ("time", "nanoseconds")
    assert (p.time_unix_nano, p.duration_nano, p.period) == (5, 9, 0) and not p.HasField("period_type")
    for table in (d.mapping_table, d.location_table, d.function_table, d.link_table, d.attribute_table, d.stack_table):
        assert table[0] == type(table[0])()  # the zero value the format requires first
    assert len(strings) == len(set(strings)) and len(d.function_table) == 4 and len(d.stack_table) == 3
    by_name = {}
    for location in d.location_table[1:]:
        function = d.function_table[location.lines[0].function_index]
        by_name[strings[function.name_strindex]] = (
            strings[function.filename_strindex], strings[d.mapping_table[location.mapping_index].filename_strindex],
            d.attribute_table[location.attribute_indices[0]].value.string_value)
    assert by_name == {PY.name: ("app.py", "", "cpython"), NATIVE.name: ("", "libpython3.11.so", "native"),
                       KERNEL.name: ("", "[kernel.kallsyms]", "kernel")}
    # the process-only stack is the empty stack, the comm in its thread.name
    only = [s for s in p.samples if s.stack_index == 0]
    assert len(only) == 1 and strings[d.attribute_table[only[0].attribute_indices[0]].key_strindex] == "thread.name"


def test_a_sampling_profile_says_its_period_and_bytes_their_unit():
    samples = to_otlp(profile("samples"), {}, period_ns=1e9 / 99)
    strings = samples.dictionary.string_table
    p = samples.resource_profiles[0].scope_profiles[0].profiles[0]
    assert (strings[p.period_type.type_strindex], strings[p.period_type.unit_strindex], p.period) == (
        "cpu", "nanoseconds", round(1e9 / 99))
    space = to_otlp(profile("bytes"), {})
    p = space.resource_profiles[0].scope_profiles[0].profiles[0]
    assert space.dictionary.string_table[p.sample_type.unit_strindex] == "bytes" and not p.HasField("period_type")
    assert to_otlp_bytes(profile("bytes"), {}) == space.SerializeToString()
