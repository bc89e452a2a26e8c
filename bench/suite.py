"""The benchmarks `make bench` runs, in order: (results.json key, module). Each module has
run(quick, **options) -> dict (a JSON-able result, with "title" and "targets") and table(result) -> str
(the markdown that goes between its markers in BENCHMARKS.md)."""

import syscall_overhead

BENCHES = [
    ("syscall_overhead", syscall_overhead),
]
