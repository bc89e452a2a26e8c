#!/usr/bin/python3
"""biopwise: block I/O per process — bytes, I/Os, sync/async and device latency, per interval.

Traces block:block_io_start (who submitted, device, read/write, sync), block_rq_issue (when) and
block_rq_complete (bytes done, latency); per (process, device) the kernel keeps never-cleared totals,
and one log2 histogram of the latency of every request counted (a `hist` record per interval with --json).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import (
    CounterDeltas,
    HistDeltas,
    Tool,
    figures,
    kernelfeatures,
    log2_buckets,
    process_name,
    quantity,
    table,
)
from bcctool.procnames import ProcessNames
from bcctool.tool import fault_cflags

EXAMPLES = [
    ("biopwise", "per-process block I/O every second, top 20"),
    ("biopwise 5 3", "three 5-second summaries"),
    ("biopwise -p 185", "only I/O submitted by process 185"),
    ("biopwise --device vda", "only I/O to vda (names from /proc/partitions)"),
    ("biopwise --sort write --maxrows 5", "the 5 biggest writers"),
    ("biopwise --top 5 --json", "NDJSON records for the app"),
]
SORT_KEYS = {
    "total": lambda r: r["read_bytes"] + r["write_bytes"],
    "read": lambda r: r["read_bytes"],
    "write": lambda r: r["write_bytes"],
    "ios": lambda r: r["read_ios"] + r["write_ios"],
    "latency": lambda r: r["avg_lat_us"],
}


def read_partitions() -> dict[int, str]:
    """Kernel dev_t as block tracepoints encode it (MAJOR << 20 | MINOR) -> name, from /proc/partitions."""
    names = {}
    try:
        with open("/proc/partitions") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4 and parts[0].isdigit():
                    names[int(parts[0]) << 20 | int(parts[1])] = parts[3]
    except OSError:
        pass
    return names


tool = Tool("biopwise", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/biopwise.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
partitions = read_partitions()
device = None
if args.device:
    device = next((dev for dev, name in partitions.items() if name == args.device), None)
cflags = tool.filter_cflags(filter_pid=args.pid, filter_dev=device)
# a test builds it as on a kernel without the tracepoint (BCCTOOL_FAULTS, bcctool/tool.py)
has_io_start = (kernelfeatures.tracepoint_exists("block", "block_io_start")
                and "-DFAULT_NO_IO_START=1" not in fault_cflags())
# block_rq_issue's request is its first argument since 5.11, its second (after the queue) before
issue_rq_arg = 0 if kernelfeatures.kernel_version() >= (5, 11) else 1
b = tool.load(cflags + [f"-DISSUE_RQ_ARG={issue_rq_arg}"] + (["-DHAVE_IO_START"] if has_io_start else []))
if has_io_start:
    # after block_io_start's tracepoint program (attached by load), so it runs second and finds its fields
    b.attach_raw_tracepoint(tp="block_io_start", fn_name="io_start_request")
    # a skipped tracepoint run leaves its raw partner without fields: counted once, as io_start_unpaired
    tool.skips_counted_by_metric.add("tracepoint__block__block_io_start")
b.attach_raw_tracepoint(tp="block_rq_issue", fn_name="issue_request")   # after its tracepoint program: its fields
# a skipped issue run leaves its raw partner without fields: that request is counted at completion (or,
# without block_io_start, where the issue is its start, not counted: issue_unpaired)
tool.skips_counted_by_metric.add("tracepoint__block__block_rq_issue")
stats, comms, full = b["stats"], b["comms"], b["full"]
# Without block_io_start (kernels before 6.5) the owner is the task that issues the request.
tool.meta(attribution="submitter (block_io_start)" if has_io_start else "issuer (block_rq_issue)",
          devices={name: f"{dev >> 20}:{dev & 0xFFFFF}" for dev, name in partitions.items()})
tool.say(f"Tracing block I/O per process, sorted by {args.sort}... Ctrl-C to end.")


def device_name(dev: int) -> str:
    if dev not in partitions:
        partitions.update(read_partitions())    # a disk that appeared while tracing
    return partitions.get(dev, f"{dev >> 20}:{dev & 0xFFFFF}")


COUNTERS = ("read_bytes", "write_bytes", "read_ios", "write_ios", "sync_ios", "async_ios")


def per_process(deltas: dict) -> list[dict]:
    """Deltas per (tgid, dev, cgroup) folded into one row per process (or per cgroup, with the number
    of processes), with the devices it used."""
    procs: dict[int, dict] = {}
    by_cgroup = args.group_by == "cgroup"
    for (tgid, dev, cgid), d in deltas.items():
        p = procs.get(cgid if by_cgroup else tgid)
        if p is None:
            who = {"pids": set()} if by_cgroup else {"pid": tgid, "comm": ""}
            p = procs[cgid if by_cgroup else tgid] = {**who, **tool.cgroup_fields(cgid), "devices": set(),
                                                      **dict.fromkeys(COUNTERS, 0), "lat_ns": 0, "lat_count": 0}
        if by_cgroup:
            p["pids"].add(tgid)
        if d["read_ios"] or d["write_ios"]:
            p["devices"].add(device_name(dev))
        for k in (*COUNTERS, "lat_ns", "lat_count"):
            p[k] += d[k]
    rows = []
    for p in procs.values():
        ios = p["read_ios"] + p["write_ios"]
        lat_ns, lat_count = p.pop("lat_ns"), p.pop("lat_count")
        if not ios and not p["read_bytes"] + p["write_bytes"]:
            continue    # only latencies of I/O counted before (a completion after its issue's interval)
        if by_cgroup:
            p["processes"] = len(p.pop("pids"))
        else:
            p["comm"] = process_name(p["pid"], comms)
        p.update(devices=",".join(sorted(p["devices"])),
                 avg_size=round((p["read_bytes"] + p["write_bytes"]) / ios) if ios else 0,
                 avg_lat_us=round(lat_ns / lat_count / 1e3, 3) if lat_count else 0.0)
        rows.append(p)
    if not by_cgroup:
        process_names.rename_rows(rows)   # a comm several processes share: "python3 (server.py)"
    return sorted(rows, key=SORT_KEYS[args.sort], reverse=True)


def totals(deltas: dict, nprocs: int, elapsed: float) -> dict:
    t = {k: sum(d[k] for d in deltas.values()) for k in (*COUNTERS, "lat_ns", "lat_count")}
    lat_ns, lat_count = t.pop("lat_ns"), t.pop("lat_count")
    t.update(avg_lat_us=round(lat_ns / lat_count / 1e3, 3) if lat_count else 0.0,
             bytes_per_s=round((t["read_bytes"] + t["write_bytes"]) / elapsed, 1), processes=nprocs,
             interval_s=round(elapsed, 3))
    return t


# the table's columns and the totals' line: the registry's labels and units (registry/entries/biopwise.py)
COLUMNS = tool.fields(*(("pid", "comm") if args.group_by == "process" else ("processes", "cgroup")), "devices",
                      "read_bytes", "write_bytes", "read_ios", "write_ios", "avg_size", "sync_ios", "async_ios",
                      "avg_lat_us")
TOTALS = tool.fields("read_bytes", "write_bytes", "read_ios", "write_ios", "sync_ios", "async_ios", "avg_lat_us",
                     kind="summary")


def print_human(interval: int, rows: list[dict], t: dict) -> None:
    print(f"\n--- Interval {interval} ({time.strftime('%H:%M:%S')}) ---")
    print(f"biopwise (sort: {args.sort}, device: {args.device or 'all'})")
    print(table(COLUMNS, rows[: args.maxrows]))
    print("---")
    print(f"Totals: {figures(TOTALS, t)}")
    top = rows[: args.top]
    if top:
        print(f"Top {len(top)} Procs ({args.sort}):")
        for r in top:
            who = f"{r['pid']:<7} {r['comm'][:16]:<16}" if "pid" in r else f"{r['cgroup'][:24]:<24}"
            print(f"{who} ({quantity(r['read_bytes'] + r['write_bytes'], 'bytes')})")
    print("=====")


# --- loop ------------------------------------------------------------------------------------------
deltas = CounterDeltas(stats, comms)
latency = HistDeltas(b["lat_hist"])
process_names = ProcessNames()
last = time.monotonic()
for interval in tool.intervals():
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    # the profiler's own, counted before the kernel knew it (bcctool/own.py)
    changed = {key: d for key, d in deltas.step().items() if not tool.is_own(key[0])}
    rows = per_process(changed)
    t = totals(changed, sum(r.get("processes", 1) for r in rows), elapsed)
    latency_buckets = log2_buckets(latency.step())
    if tool.json:
        tool.emit("summary", **t)
        tool.emit("hist", name="latency", unit="us", total=sum(x["count"] for x in latency_buckets),
                  buckets=latency_buckets)
        for rank, r in enumerate(rows[: args.maxrows], 1):
            tool.emit("row", rank=rank, top=rank <= args.top, **r)
    else:
        print_human(interval, rows, t)
    tool.set_lost_total("stats_map_full", sum(full[full.Key(0)]))
    tool.set_lost_total("io_start_unpaired" if has_io_start else "issue_unpaired", sum(b["unpaired"][0]))
    if has_io_start:
        tool.set_lost_total("completion_unseen", sum(b["completion_unseen"][0]))

tool.finish()
