#!/usr/bin/python3
"""cacheraw: page-cache read hits and misses, write hits and dirtied folios per process, per interval.

Traces filemap:mm_filemap_get_pages (pages a read asks for), filemap:mm_filemap_add_to_page_cache (pages
it had to bring in) and writeback:writeback_dirty_folio (folios a write dirtied); plus /proc/meminfo.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import CounterDeltas, Tool, figures, kernelfeatures, process_name, table
from bcctool.cgroups import by_cgroup
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("cacheraw", "per-process page-cache hits and misses every second"),
    ("cacheraw 5 3", "three 5-second summaries"),
    ("cacheraw -p 185", "only process 185"),
    ("cacheraw --sort read_misses --max-rows 5", "the 5 processes that read most from disk"),
    ("cacheraw --sort read_hit_pct --reverse", "worst read hit ratio first"),
    ("cacheraw --json", "NDJSON records for the app"),
    ("cacheraw --group-by cgroup --cgroup lab", "one cgroup v2 group and those below, a row per group"),
]
SORT_FIELDS = ("reads", "read_hits", "read_misses", "read_hit_pct", "write_hits", "write_misses", "dirtied",
               "write_hit_pct")
FIELD_OF = {"reads": "read_pages", "read_hits": "read_hit_pages", "read_misses": "read_miss_pages",
            "write_hits": "write_hit_folios", "write_misses": "write_miss_folios", "dirtied": "dirtied_folios",
            "read_hit_pct": "read_hit_pct", "write_hit_pct": "write_hit_pct"}

tool = Tool("cacheraw", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/cacheraw.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid)
# read()/pread64() return values trim requests that reach past the end of a file
read_exit = all(kernelfeatures.tracepoint_exists("syscalls", e) for e in
                ("sys_enter_read", "sys_exit_read", "sys_enter_pread64", "sys_exit_pread64"))
if read_exit:
    cflags.append("-DHAVE_READ_EXIT")
variants = kernelfeatures.task_storage_variants()
b = tool.load(cflags, variants=variants)
stats, comms, full = b["stats"], b["comms"], b["full"]
tool.meta(units={"read": "pages (4 KiB)", "write": "folios (a dirtied folio's size is not traced)"},
          task_state="task_storage" if tool.variant else "hash", read_end_trimmed=read_exit)
tool.say(f"Tracing page-cache reads and writes, sorted by {args.sort}... Ctrl-C to end.")


def meminfo() -> dict[str, int]:
    """/proc/meminfo fields in bytes."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                info[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return info


def pct(hits: int, misses: int) -> float | None:
    return round(100.0 * hits / (hits + misses), 2) if hits + misses else None


class ReadHits:
    """Read hits = pages requested that did not have to be added. Readahead adds pages before they
    are requested, possibly in the interval before: misses not yet matched by a request are carried
    into the next interval (one only, so pages added and never read do not hide later hits)."""

    def __init__(self) -> None:
        self.carry: dict[int, int] = {}

    def step(self, reads: dict[int, tuple[int, int]]) -> dict[int, int]:
        """{tgid: (pages requested, read misses)} of one interval -> {tgid: read hits}."""
        hits, carry = {}, {}
        for tgid, (requested, misses) in reads.items():
            available = self.carry.get(tgid, 0) + misses
            matched = min(available, requested)
            hits[tgid] = requested - matched
            carry[tgid] = min(available - matched, misses)
        self.carry = carry
        return hits


def rows_of(deltas: dict) -> list[dict]:
    # the profiler's own, counted before the kernel knew it (bcctool/own.py)
    deltas = {tgid: d for tgid, d in deltas.items() if not tool.is_own(tgid)}
    read_misses = {tgid: max(0, d["added_pages"] - d["write_miss_pages"]) for tgid, d in deltas.items()}
    requested = {tgid: max(0, d["requested_pages"] - d["overshoot_pages"]) for tgid, d in deltas.items()}
    read_hits = read_hits_of.step({tgid: (requested[tgid], read_misses[tgid]) for tgid in deltas})
    rows = []
    for tgid, d in deltas.items():
        hits, misses = read_hits[tgid], read_misses[tgid]
        write_hits, write_misses = d["write_hit_folios"], d["write_miss_folios"]
        if not (hits or misses or write_hits or write_misses):
            continue
        leaf = comms.get(comms.Key(tgid))
        rows.append({"pid": tgid, "uid": leaf.uid if leaf else None, "comm": process_name(tgid, comms),
                     **tool.cgroup_fields(leaf.cgid if leaf else 0),
                     "read_hit_pages": hits, "read_miss_pages": misses, "read_pages": hits + misses,
                     "read_hit_pct": pct(hits, misses),
                     "write_hit_folios": write_hits, "write_miss_folios": write_misses,
                     "write_miss_pages": d["write_miss_pages"], "dirtied_folios": write_hits + write_misses,
                     "write_hit_pct": pct(write_hits, write_misses)})
    if args.group_by == "cgroup":
        rows = [{**g, "read_hit_pct": pct(g["read_hit_pages"], g["read_miss_pages"]),
                 "write_hit_pct": pct(g["write_hit_folios"], g["write_miss_folios"])}
                for g in by_cgroup(rows, ("read_hit_pages", "read_miss_pages", "read_pages", "write_hit_folios",
                                          "write_miss_folios", "write_miss_pages", "dirtied_folios"))]
    key = FIELD_OF[args.sort]
    # rows without a percentage sort after those with one, whichever the direction
    sign = 1 if args.reverse else -1
    return sorted(rows, key=lambda r: (r[key] is None, sign * (r[key] or 0)))


def summary(rows: list[dict], elapsed: float) -> dict:
    t = {k: sum(r[k] for r in rows) for k in ("read_hit_pages", "read_miss_pages", "write_hit_folios",
                                               "write_miss_folios", "dirtied_folios")}
    mem = meminfo()
    t.update(read_hit_pct=pct(t["read_hit_pages"], t["read_miss_pages"]),
             write_hit_pct=pct(t["write_hit_folios"], t["write_miss_folios"]),
             read_hits_per_s=round(t["read_hit_pages"] / elapsed, 1),
             read_misses_per_s=round(t["read_miss_pages"] / elapsed, 1),
             cached_bytes=mem.get("Cached", 0), buffers_bytes=mem.get("Buffers", 0),
             dirty_bytes=mem.get("Dirty", 0), processes=sum(r.get("processes", 1) for r in rows),
             interval_s=round(elapsed, 3))
    return t


# the table's columns and the memory line: the registry's labels and units (registry/entries/cacheraw.py)
COLUMNS = tool.fields(*(("pid", "uid", "comm") if args.group_by == "process" else ("processes", "cgroup")),
                      "read_hit_pages", "read_miss_pages", "read_hit_pct", "write_hit_folios", "write_miss_folios",
                      "dirtied_folios", "write_hit_pct")
MEMORY = tool.fields("buffers_bytes", "cached_bytes", "dirty_bytes", "read_hit_pct", "write_hit_pct", kind="summary")


def print_human(rows: list[dict], t: dict) -> None:
    print(f"\n{time.strftime('%H:%M:%S')} {figures(MEMORY, t)}")
    # the last row: the interval's totals, under the same units
    total = {**t, "comm" if args.group_by == "process" else "cgroup": "(all)"}
    print(table(COLUMNS, [*rows[: args.max_rows], total]))


# --- loop ------------------------------------------------------------------------------------------
deltas = CounterDeltas(stats, comms, tgid_of=lambda tgid: tgid)
read_hits_of = ReadHits()
process_names = ProcessNames()
last = time.monotonic()
for _ in tool.intervals():
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    rows = rows_of(deltas.step())
    t = summary(rows, elapsed)
    if args.group_by == "process":
        process_names.rename_rows(rows[: args.max_rows])   # a comm several processes share: "python3 (server.py)"
    if tool.json:
        tool.emit("summary", **t)
        for rank, r in enumerate(rows[: args.max_rows], 1):
            tool.emit("row", rank=rank, **r)
    else:
        print_human(rows, t)
    tool.set_lost_total("stats_map_full", sum(full[full.Key(0)]))

tool.finish()
