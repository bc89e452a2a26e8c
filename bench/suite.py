"""The benchmarks `make bench` runs, in order: (results.json key, module). Each module has
run(quick, **options) -> dict (a JSON-able result, with "title" and "targets") and either table(result)
-> str (the markdown between its `<!-- bench:NAME -->` markers in BENCHMARKS.md) or MARKERS and
tables(result) -> {marker: markdown} when one run fills several tables."""

import app_cost
import app_memory
import cpuprofile_overhead
import dashboard_pages
import ingest
import metric_footprint
import metric_overhead
import pipeline
import profile_selection
import sample_cost
import stack_storage
import syscall_overhead
import unwind

BENCHES = [
    ("syscall_overhead", syscall_overhead),
    ("metric_overhead", metric_overhead),
    ("cpuprofile_overhead", cpuprofile_overhead),
    ("sample_cost", sample_cost),
    ("metric_footprint", metric_footprint),
    ("pipeline", pipeline),
    ("ingest", ingest),
    ("stack_storage", stack_storage),
    ("app_memory", app_memory),
    ("unwind", unwind),
    ("dashboard_pages", dashboard_pages),
    ("profile_selection", profile_selection),
    ("app_cost", app_cost),
]
