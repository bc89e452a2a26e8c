#!/usr/bin/python3
"""compmem: kernel memory per process (allocated, outstanding), leak suspects, user RSS and VmSize.

Traces kmem:kmalloc/kfree (with --caches also kmem_cache_alloc/free): each allocation is kept by address
with its size, age, owner and kernel stack until it is freed, and charged back to its owner when it is.
Each interval: the system overview (/proc/meminfo), the top processes, outstanding allocations by stack.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import Tool, human_bytes, percpu_totals, process_name, procmem
from bcctool.cgroups import by_cgroup

EXAMPLES = [
    ("compmem", "top 10 processes by outstanding kernel memory, 5 leak suspects, every second"),
    ("compmem 5 3", "three 5-second reports"),
    ("compmem -p 185", "only allocations made by process 185"),
    ("compmem --caches", "also slab-cache allocations (sockets, files, inodes, dentries)"),
    ("compmem --min-bytes 256", "ignore allocations smaller than 256 bytes (less overhead)"),
    ("compmem --min-age 10 --stacks 10", "leak suspects: stacks with allocations outstanding for 10 s+"),
    ("compmem -p 185 --stack-sort bytes", "where process 185's outstanding kernel memory was allocated"),
    ("compmem --json", "NDJSON records for the app"),
]


tool = Tool("compmem", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: config.py's entry
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid, min_bytes=args.min_bytes, trace_caches=args.caches)
cflags += [f"-DMAX_ALLOCS={args.max_allocs}", f"-DEXCLUDE_PID={os.getpid()}"] + (["-DNO_STACKS"] if not args.stacks else [])
b = tool.load(cflags)
allocs, proc_mem, comms, lost = b["allocs"], b["proc_mem"], b["comms"], b["lost"]
stacks = b["stacks"] if args.stacks else None
LOST_SOURCES = {0: "allocs_map_full", 1: "proc_mem_map_full", 2: "stack_traces"}
MISSED_FREE = 3

tool.meta(caches=args.caches, min_bytes=args.min_bytes, max_allocs=args.max_allocs,
          size="bytes_alloc (what the allocator handed out)")
tool.say(f"Tracing kernel allocations (kmalloc{' and slab caches' if args.caches else ''})... Ctrl-C to end.")


def lost_counts() -> dict[int, int]:
    return {slot: sum(lost[lost.Key(slot)]) for slot in (*LOST_SOURCES, MISSED_FREE)}


def cgroup_of(tgid: int) -> dict:
    """The process's cgroup fields, as the probe kept them at its first allocation or exec."""
    leaf = comms.get(comms.Key(tgid))
    return tool.cgroup_fields(leaf.cgid if leaf else 0)


def process_rows() -> list[dict]:
    """Every process with a kernel-memory record: lifetime totals and what is outstanding now."""
    rows = []
    for tgid, (_, t) in percpu_totals(proc_mem).items():
        row = {"pid": tgid, "comm": process_name(tgid, comms), **cgroup_of(tgid), "alloc_bytes": t["alloc_bytes"],
               "allocs": t["allocs"], "freed_bytes": t["freed_bytes"], "frees": t["frees"],
               "outstanding_bytes": t["alloc_bytes"] - t["freed_bytes"], "active_allocs": t["allocs"] - t["frees"]}
        user = procmem.process_memory(tgid)
        row.update(user or {"rss_bytes": None, "vm_size_bytes": None})
        row["alive"] = user is not None
        rows.append(row)
    return rows


def forget_settled(rows: list[dict]) -> None:
    """Processes that have exited with nothing outstanding leave the maps (they could fill them)."""
    for r in rows:
        if not r["alive"] and r["active_allocs"] == 0:
            for table in (proc_mem, comms):
                try:
                    del table[table.Key(r["pid"])]
                except KeyError:
                    pass


def stack_groups(now_ns: int, limit: int | None) -> list[dict]:
    """Outstanding allocations grouped by (process, kernel stack), in --stack-sort order, the first `limit`."""
    if not args.stacks:
        return []
    min_age_ns = int((args.min_age or 0) * 1e9)
    groups: dict[tuple[int, int, int], dict] = {}
    try:
        items = allocs.items_lookup_batch()
    except Exception:  # noqa: BLE001 - kernels without batch ops: walk the map
        items = allocs.items()
    for _, a in items:
        if now_ns - a.ts < min_age_ns:
            continue
        # without a stack, the caller the tracepoint names keeps different sites apart
        key = (a.tgid, a.stack_id, a.call_site if a.stack_id < 0 else 0)
        g = groups.setdefault(key, {"bytes": 0, "count": 0, "oldest": a.ts, "call_site": a.call_site})
        g["bytes"] += a.size
        g["count"] += 1
        g["oldest"] = min(g["oldest"], a.ts)
    order = {"oldest": lambda g: g["oldest"], "bytes": lambda g: -g["bytes"], "count": lambda g: -g["count"]}
    top = sorted(groups.items(), key=lambda kv: order[args.stack_sort](kv[1]))[:limit]
    return [{"pid": tgid, "comm": process_name(tgid, comms), **cgroup_of(tgid), "stack_id": stack_id,
             "outstanding_bytes": g["bytes"], "active_allocs": g["count"],
             "oldest_age_s": round((now_ns - g["oldest"]) / 1e9, 3),
             "kernel_frames": frames(stack_id, g["call_site"])}
            for (tgid, stack_id, _), g in top]


def frames(stack_id: int, call_site: int) -> list[str]:
    """The kernel stack, symbolized; without one, the caller the tracepoint names."""
    try:
        addrs = list(stacks.walk(stack_id)) if stack_id >= 0 else []
    except KeyError:
        addrs = []
    if not addrs:
        return ["[stack not recorded]", b.ksym(call_site).decode(errors="replace")]
    return [b.ksym(addr).decode(errors="replace") for addr in addrs[: args.stack_depth]]


def print_report(summary: dict, top: list[dict], groups: list[dict], sysmem: dict) -> None:
    def size(key: str) -> str:
        return human_bytes(sysmem[key]) if key in sysmem else "-"

    print(f"\n[{time.strftime('%H:%M:%S')}] System memory: total {size('mem_total_bytes')}, "
          f"free {size('mem_free_bytes')}, available {size('mem_available_bytes')}, "
          f"buffers {size('buffers_bytes')}, cached {size('cached_bytes')}, slab {size('slab_bytes')} "
          f"(unreclaimable {size('slab_unreclaimable_bytes')})")
    print(f"Traced kernel allocations: {summary['active_allocs']} outstanding "
          f"({human_bytes(summary['outstanding_bytes'])}); this interval {summary['allocs']} allocated "
          f"({human_bytes(summary['alloc_bytes'])}), {summary['frees']} freed ({human_bytes(summary['freed_bytes'])})")
    print(f"\n{'PID':<7} {'COMM':<16} {'KERN_ALLOC':>10} {'ALLOCS':>8} {'OUTSTANDING':>11} {'ACTIVE':>7} "
          f"{'RSS':>9} {'VMSIZE':>9}")
    for r in top:
        if "pid" not in r:   # --group-by cgroup: processes, the group's path
            r = {**r, "pid": r["processes"], "comm": r["cgroup"][-16:], "alive": False}
        rss = human_bytes(r["rss_bytes"]) if r["alive"] else "[exited]" if "processes" not in r else ""
        vsz = human_bytes(r["vm_size_bytes"]) if r["alive"] else ""
        print(f"{r['pid']:<7} {r['comm'][:16]:<16} {human_bytes(r['alloc_bytes']):>10} {r['allocs']:>8} "
              f"{human_bytes(r['outstanding_bytes']):>11} {r['active_allocs']:>7} {rss:>9} {vsz:>9}".rstrip())
    if not args.stacks:
        return
    older = f" for {args.min_age:g} s or more" if args.min_age else ""
    order = {"oldest": "oldest first", "bytes": "most bytes first", "count": "most allocations first"}
    print(f"\nOutstanding allocations by kernel stack{older}, {order[args.stack_sort]} (top {args.stacks}):")
    for g in groups:
        print(f"  {g['pid']} {g['comm']}: {g['active_allocs']} allocations, {human_bytes(g['outstanding_bytes'])}, "
              f"oldest {g['oldest_age_s']:.1f} s [stack {g['stack_id']}]")
        for frame in g["kernel_frames"]:
            print(f"      {frame}")


# --- loop ------------------------------------------------------------------------------------------
previous: dict[int, dict] = {}
missed_before = 0
last = time.monotonic()
for _ in tool.intervals():
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    rows = process_rows()
    # bpf_ktime_get_ns() is CLOCK_MONOTONIC; the app's flame graph wants every stack, a person the first few
    groups = stack_groups(time.monotonic_ns(), None if tool.json else args.stacks)
    sysmem = procmem.meminfo()
    counts = lost_counts()
    # interval deltas from lifetime totals; a process seen for the first time started from zero
    delta = {k: sum(r[k] - previous.get(r["pid"], {}).get(k, 0) for r in rows)
             for k in ("allocs", "alloc_bytes", "frees", "freed_bytes")}
    previous = {r["pid"]: r for r in rows}
    forget_settled(rows)
    rows.sort(key=lambda r: (r["outstanding_bytes"], r["alloc_bytes"]), reverse=True)
    if args.group_by == "cgroup":
        rows = by_cgroup(rows, ("alloc_bytes", "allocs", "freed_bytes", "frees", "outstanding_bytes",
                                "active_allocs"))
        rows.sort(key=lambda r: (r["outstanding_bytes"], r["alloc_bytes"]), reverse=True)
    top = rows[: args.top]
    summary = {"outstanding_bytes": sum(r["outstanding_bytes"] for r in rows),
               "active_allocs": sum(r["active_allocs"] for r in rows), **delta,
               "processes": sum(r.get("processes", 1) for r in rows), "missed_frees": counts[MISSED_FREE] - missed_before,
               "interval_s": round(elapsed, 3)}
    missed_before = counts[MISSED_FREE]
    if tool.json:
        tool.emit("summary", **summary, **sysmem)
        for rank, r in enumerate(top, 1):
            tool.emit("row", level=args.group_by, rank=rank, **r)
        for rank, g in enumerate(groups, 1):
            tool.emit("row", level="stack", rank=rank, **g)
    else:
        print_report(summary, top, groups, sysmem)
    for slot, source in LOST_SOURCES.items():
        tool.set_lost_total(source, counts[slot])

tool.finish()
