#!/usr/bin/python3
"""pagefault: minor and major page faults per process, as rates.

Attaches to the software perf events page-faults-min and page-faults-maj (sample period 1, every CPU),
which the kernel raises where it counts rusage's ru_minflt/ru_majflt; a per-CPU hash keeps per-process
counts and each interval prints the top processes by faults per second.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import CounterDeltas, Tool, process_names_of, table
from bcctool.cgroups import by_cgroup
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("pagefault", "top 10 faulting processes, every second"),
    ("pagefault 5 3", "three 5-second summaries"),
    ("pagefault -p 185", "only process 185"),
    ("pagefault --top 20 --sort major", "top 20 by major faults/s"),
    ("pagefault --traps", "also count user-mode fault traps (exceptions:page_fault_user)"),
    ("pagefault --group-by cgroup", "top cgroups (services, containers) by faults/s"),
    ("pagefault --cgroup lab/job-7", "one cgroup v2 group (under the v2 mount) and the groups below it"),
    ("pagefault --json", "NDJSON records for the app"),
]

tool = Tool("pagefault", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/pagefault.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid, count_traps=args.traps)
b = tool.load(cflags)
try:
    from bcc import PerfSWConfig, PerfType
except ImportError:  # pragma: no cover - load() has already checked bcc
    tool.die("bcc is not importable")
try:
    # One event per CPU for all tasks; period 1 makes the kernel run the program on every fault (a
    # period-1 software event takes a path that is never throttled).
    b.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.PAGE_FAULTS_MIN,
                        fn_name=b"on_minor", sample_period=1, cpu=-1)
    b.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.PAGE_FAULTS_MAJ,
                        fn_name=b"on_major", sample_period=1, cpu=-1)
except Exception as exc:  # noqa: BLE001 - BCC raises bare Exception when perf_event_open fails
    tool.die(f"could not attach to the page-fault perf events: {exc}")
faults, comms, full = b["faults"], b["comms"], b["full"]

tool.meta(classification="perf software events page-faults-min/-maj (= getrusage ru_minflt/ru_majflt)",
          sort=args.sort, group_by=args.group_by)
tool.say("Monitoring page fault rates. Press Ctrl+C to stop.")


# the table's columns: the registry's labels and units (registry/entries/pagefault.py)
COLUMNS = tool.fields("time", *(("comm", "pid") if args.group_by == "process" else ("cgroup",)),
                      "minor_per_sec", "major_per_sec", "total_per_sec", *(("traps_per_sec",) if args.traps else ()))


def print_table(rows: list[dict]) -> None:
    stamp = time.strftime("%H:%M:%S")
    print()
    print(table(COLUMNS, [{"time": stamp, **r} for r in rows]))


# --- loop ------------------------------------------------------------------------------------------
counters = CounterDeltas(faults, comms)   # keys (tgid, cgroup id)


def rates(row: dict, elapsed: float) -> dict:
    """A row's counts as per-second rates."""
    row.update(total=row["minor"] + row["major"], minor_per_sec=round(row["minor"] / elapsed, 1),
               major_per_sec=round(row["major"] / elapsed, 1),
               total_per_sec=round((row["minor"] + row["major"]) / elapsed, 1))
    if args.traps:
        row["traps_per_sec"] = round(row["traps"] / elapsed, 1)
    return row

process_names = ProcessNames()
last = time.monotonic()
for _ in tool.intervals():
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    rows = []
    stepped = counters.step()
    comm_of = process_names_of({tgid for tgid, _ in stepped}, comms)   # each process's once, gone ones in one read
    for (tgid, cgid), d in stepped.items():
        if tool.is_own(tgid):
            continue    # the profiler's own, counted before the kernel knew it (bcctool/own.py)
        row = {"pid": tgid, "comm": comm_of[tgid], **tool.cgroup_fields(cgid), "minor": d["minor"],
               "major": d["major"]}
        if args.traps:
            row["traps"] = d["traps"]
        rows.append(rates(row, elapsed))
    nprocs = len({r["pid"] for r in rows})
    if args.group_by == "cgroup":
        rows = [rates(g, elapsed) for g in by_cgroup(rows, ("minor", "major", "traps") if args.traps else
                                                               ("minor", "major"))]
    rows.sort(key=lambda r: (r[args.sort], r["total"]), reverse=True)
    minor, major = sum(r["minor"] for r in rows), sum(r["major"] for r in rows)
    top = rows[: args.top]
    if args.group_by == "process":
        process_names.rename_rows(top)   # a comm several processes share: "python3 (server.py)"
    if tool.json:
        tool.emit("summary", minor=minor, major=major, total=minor + major,
                  minor_per_sec=round(minor / elapsed, 1), major_per_sec=round(major / elapsed, 1),
                  faults_per_sec=round((minor + major) / elapsed, 1), processes=nprocs,
                  interval_s=round(elapsed, 3))
        for rank, row in enumerate(top, 1):
            tool.emit("row", rank=rank, **row)
    else:
        print_table(top)
    tool.set_lost_total("faults_map_full", sum(full[full.Key(0)]))

tool.finish()
