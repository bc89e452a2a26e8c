"""The harness every metric script shares, so each script reads like a BCC tool, and the libraries the
scripts use. A script needs `Tool` (tool.py) and, for its output, a few helpers; each module has one job:

    tool.py        Tool: arguments, BPF load, the NDJSON envelope, the interval loop, a clean stop
    arguments.py   a registry Arg (registry/args.py) as an argparse argument; the one-line-error parser
    targets.py     what -p/--tid/--ppid and a device argument must name (checked before loading)
    bpfload.py     the BPF C's place, filters as C literals, a quiet compile, probe names
    formatting.py  human output: tables and lines of records under the registry's declarations of their
                   fields (Tool.fields), log2 histograms, stacks
    maps.py        a map's entries, per-CPU sums and per-interval deltas of maps the probes only add to
and, for particular scripts: cgroups, epochs, taskinfo, procmem, procmaps, symbols, unwind, cfi,
ehframe, elfimage, pyframes, ringreader, footprint, kernelfeatures, ksymstub, lrucache.

The names below are re-exported so `import bcctool; bcctool.table(...)` and `from bcctool import Tool`
work as they always did. Nothing here needs root or bcc until Tool.load() is called.
"""

from __future__ import annotations

from .arguments import HARNESS_DESTS, OneLineParser, add_argument, parser_options, value_parser
from .bpfload import BPF_DIR, PERF_EVENT_NAMES, c_string, perf_event_name
from .formatting import LineTable, figures, human_bytes, log2_buckets, print_log2, print_stack, quantity, table
from .maps import (
    CounterDeltas,
    ExitedKeys,
    HistDeltas,
    all_items,
    insert_new,
    percpu_array_sums,
    percpu_totals,
    process_name,
    process_names_of,
    raw_items,
    raw_prefix,
)
from .targets import TARGET_CHECKS, process_alive, task_alive
from .tool import Tool

__all__ = [
    "Tool",
    "HARNESS_DESTS", "OneLineParser", "add_argument", "parser_options", "value_parser",
    "TARGET_CHECKS", "process_alive", "task_alive",
    "BPF_DIR", "PERF_EVENT_NAMES", "c_string", "perf_event_name",
    "LineTable", "figures", "human_bytes", "log2_buckets", "print_log2", "print_stack", "quantity", "table",
    "CounterDeltas", "ExitedKeys", "HistDeltas", "all_items", "insert_new", "percpu_array_sums", "percpu_totals", "process_name",
    "process_names_of", "raw_items", "raw_prefix",
]
