#!/usr/bin/python3
"""compmem: kernel memory per process (allocated, outstanding), leak suspects, user RSS and VmSize.

Traces kmem:kmalloc/kfree (with --caches also kmem_cache_alloc/free): each allocation is kept by address
with its size, age, owner, kernel stack and the user stack that made the syscall, until it is freed, and
charged back to its owner when it is. User stacks: by default unwound with DWARF CFI in the kernel (one
walk per allocating syscall, each stack stored once); --user-stacks dwarf: a copy of the top of the user
stack, unwound with the same CFI in user space; --user-stacks fp: the kernel's frame-pointer walk. By
default one allocation in about every 64 KiB is kept, with its stacks (--sample-bytes: each standing for
that many bytes, or its size if larger; allocated figures stay exact, outstanding ones are estimates;
0 keeps every one; under load paced: a CPU that would keep more than --stack-rate a second, default
500, keeps one in about 2, 4... times as many bytes there). Each interval: the system overview
(/proc/meminfo), the top processes, outstanding allocations by stack.
"""

import ctypes
import os
import struct
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcctool import (
    ExitedKeys,
    Tool,
    all_items,
    figures,
    percpu_totals,
    print_stack,
    process_name,
    procmem,
    quantity,
    table,
    taskinfo,
)
from bcctool.cgroups import by_cgroup
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("compmem", "top 10 processes by outstanding kernel memory, 5 leak suspects, every second"),
    ("compmem 5 3", "three 5-second reports"),
    ("compmem -p 185", "only allocations made by process 185"),
    ("compmem --caches", "also slab-cache allocations (sockets, files, inodes, dentries)"),
    ("compmem --min-bytes 256", "ignore allocations smaller than 256 bytes (less overhead)"),
    ("compmem --min-age 10 --stacks 10", "leak suspects: stacks with allocations outstanding for 10 s+"),
    ("compmem -p 185 --stack-sort bytes", "where process 185's outstanding kernel memory was allocated"),
    ("compmem --user-stacks fp", "user stacks by frame pointers (no stack copies)"),
    ("compmem --user-stacks kernel", "user stacks unwound with CFI in the kernel (no stack copies)"),
    ("compmem --sample-bytes 0", "keep every allocation: exact outstanding figures (more overhead)"),
    ("compmem --json", "NDJSON records for the app"),
]


tool = Tool("compmem", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/compmem.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid, min_bytes=args.min_bytes, trace_caches=args.caches)
cflags += [f"-DMAX_ALLOCS={args.max_allocs}", f"-DEXCLUDE_PID={os.getpid()}"] + (["-DNO_STACKS"] if not args.stacks else [])
cflags += [f"-DSAMPLE_BYTES={args.sample_bytes}"] if args.sample_bytes else []
cflags += [f"-DSTACK_RATE={args.stack_rate}"] if args.sample_bytes and args.stack_rate else []
# the user stack's CFI: copied to user space (dwarf) or walked in the kernel with the rows of every file on
# a walked stack, 8 MiB (a million rows) for one process, 16 MiB for the whole machine (bcctool/kunwind.py)
unwound_cflags = {"dwarf": ["-DUSER_DWARF", f"-DUSTACK_PAGES={args.stack_size // 4096}"],
                  "kernel": ["-DUSER_KERNEL", f"-DKU_ROWS={(1 << 20) if args.pid else (1 << 21)}"]}
b = tool.load(cflags, variants=[unwound_cflags[args.user_stacks], []]
              if args.stacks and args.user_stacks in unwound_cflags else None)
allocs, proc_mem, comms, lost = b["allocs"], b["proc_mem"], b["comms"], b["lost"]
pace = b["pace"] if args.sample_bytes and args.stack_rate else None   # bpf/pace.h
stacks = b["stacks"] if args.stacks else None
dwarf = "USER_DWARF" in tool.variant
in_kernel = "USER_KERNEL" in tool.variant
LOST_SOURCES = {0: "allocs_map_full", 1: "proc_mem_map_full", 2: "stack_traces",
                **({4: "user_stack_copies"} if dwarf else {}), **({6: "user_stacks_map_full"} if in_kernel else {})}
MISSED_FREE, UCOPIES = 3, 5

from bcctool.kstacks import StoredStacks, Walked, WalkFigures, walks_line  # noqa: E402
from bcctool.kunwind import stop_tables, tracepoint_tables  # noqa: E402
from bcctool.maps import value_of  # noqa: E402
from bcctool.pace import largest_divisor  # noqa: E402
from bcctool.symbols import UNKNOWN, Symbolizer  # noqa: E402 - pyelftools; --help works without it
from bcctool.unwind import Unwinder, default_cache_dir  # noqa: E402

# bpf_task_pt_regs() refused: frame pointers instead
refused = bool(args.stacks) and args.user_stacks in unwound_cflags and not (dwarf or in_kernel)
user_stacks = "none" if not args.stacks else "dwarf" if dwarf else "kernel" if in_kernel else "fp"


def lost_counts() -> dict[int, int]:
    return {slot: sum(lost[lost.Key(slot)]) for slot in (*LOST_SOURCES, MISSED_FREE, UCOPIES)}


class UserStacks:
    """The user stack of each allocation, as a key to group by and as frames.

    dwarf: ring buffer `ucopies` brings each copy (id, process, ustack_t), unwound as it arrives with
    the process's maps (snapshot at its first copy, so a process that exits keeps its names); an
    allocation's key is its copy's pcs, so copies of the same stack group together. The unwound copies
    are kept while an outstanding allocation refers to them. An allocation without a copy (the ring
    buffer was full) has a frame-pointer stack id, as in fp mode. kernel: the hash of the stack walked
    in BPF, read from `ustacks` the first time it is met and kept while an allocation read refers to it
    (kstacks.StoredStacks); a fork child gone before its maps were read is named from its parent's. fp:
    the frame-pointer stack id, whose walk is cut at its first address outside the process's executable
    mappings (garbage, in code built without frame pointers); so is a kernel walk made by frame pointers
    (a process met for the first time)."""

    HEADER = struct.Struct("<QII")   # id, tgid, pad; then struct ustack_t
    IP = struct.Struct("<Q")         # the ustack_t's first field
    GONE, PENDING = ("[user stack lost]",), ("[user stack not unwound yet]",)
    # a new object's CFI takes up to seconds to parse (once per build-id, then read from the disk
    # cache; a compiler's cc1 far longer): past this much parsing in one interval, copies wait for the
    # next interval (at most MAX_PENDING of them; beyond, or this long into a stop, a copy keeps only
    # its ip, counted as deferred, and a stop names no new frame)
    PARSE_BUDGET_S = 1.0
    STOP_BUDGET_S = 0.5
    MAX_PENDING = 512

    def __init__(self) -> None:
        self.sym = Symbolizer()
        self.unwinder = Unwinder(cache_dir=default_cache_dir())
        self.copies: dict[int, tuple[tuple, int]] = {}   # id -> (pcs, arrival number)
        self.pending: list[tuple[int, int, bytes]] = []   # (id, tgid, raw copy) waiting for the next interval
        self.arrived = 0
        self.deferred = 0
        self.parse_mark = 0.0
        self.stop_seen = 0.0
        self.cut = 0   # fp stacks cut where the walk left mapped code
        self.stored = StoredStacks(b["ustacks"]) if in_kernel else None

    def stop_hurried(self) -> bool:
        if tool.stopping:
            self.stop_seen = self.stop_seen or time.monotonic()
            return time.monotonic() - self.stop_seen > self.STOP_BUDGET_S
        return False

    def over_budget(self) -> bool:
        return self.unwinder.parse_seconds - self.parse_mark > self.PARSE_BUDGET_S

    def on_copy(self, ctx: object, data: object, size: int) -> int:
        raw = ctypes.string_at(data, size)
        copy_id, tgid, _ = self.HEADER.unpack_from(raw)
        self.copies[copy_id] = (self._unwind(copy_id, tgid, raw), self.arrived)
        self.arrived += 1
        return 0

    def _unwind(self, copy_id: int, tgid: int, raw: bytes) -> tuple:
        if self.stop_hurried() or (self.over_budget() and len(self.pending) >= self.MAX_PENDING):
            self.deferred += 1
            return (self.IP.unpack_from(raw, self.HEADER.size)[0],)
        if self.over_budget():
            self.pending.append((copy_id, tgid, raw))
            return self.PENDING
        return tuple(self.unwinder.unwind_ustack(self.sym.maps(tgid), memoryview(raw)[self.HEADER.size :]).pcs)

    def unwind_pending(self) -> None:
        """The copies left over from the last interval's parse budget, now that it is renewed."""
        waiting, self.pending = self.pending, []
        for copy_id, tgid, raw in waiting:
            if copy_id in self.copies:
                self.copies[copy_id] = (self._unwind(copy_id, tgid, raw), self.copies[copy_id][1])

    def next_interval(self) -> None:
        self.parse_mark = self.unwinder.parse_seconds

    def key(self, a: Any) -> object:   # a: the map's struct alloc_t
        """dwarf: the copy's pcs (a tuple); kernel: the walk's (Walked); fp, or when the ring buffer or
        `ustacks` had no room: the stack id."""
        if dwarf and a.ukey:
            return self.copies.get(a.ukey, (self.GONE,))[0]
        if in_kernel and a.ukey:
            return self.stored.walked(a.ukey) or self.GONE
        return a.ustack_id

    def frames(self, tgid: int, key: object) -> list[str]:
        """Innermost first; [] for none (a kernel thread)."""
        if isinstance(key, Walked):
            if self.sym.maps(tgid) is None:   # gone: a fork child runs in its parent's address space
                self.sym.adopt(tgid, lambda pid: value_of(b["forked"], pid))
            if key.by_frame_pointers:
                return self._cut(tgid, key.pcs)
            return self.frames(tgid, key.pcs)
        if isinstance(key, tuple):
            if key in (self.GONE, self.PENDING):
                return list(key)
            if self.stop_hurried():
                return [f"{pc:#x}" for pc in key]
            return [str(f) for f in self.sym.user_stack(tgid, list(key))]
        if key < 0:
            return []
        try:
            addrs = [addr for addr in stacks.walk(key) if addr]
        except KeyError:
            return ["[stack not recorded]"]
        return self._cut(tgid, addrs)

    def _cut(self, tgid: int, addrs: Any) -> list[str]:
        """A frame-pointer walk's addresses named up to the first outside the process's mappings."""
        if self.stop_hurried():
            return [f"{addr:#x}" for addr in addrs]
        names = []
        for addr in addrs:
            frame = self.sym.user(tgid, addr)
            if frame.module == UNKNOWN:
                self.cut += 1
                break
            names.append(str(frame))
        return names

    def keep_only(self, referenced: set[int], mark: int) -> None:
        """Forget the copies no outstanding allocation refers to (those that arrived after the
        allocations were read, at `mark`, may belong to allocations not read yet)."""
        self.copies = {k: v for k, v in self.copies.items() if k in referenced or v[1] >= mark}

    def outcomes(self) -> dict[str, int]:
        return {**{k: self.unwinder.outcomes[k] for k in ("complete", "truncated", "failed")},
                "deferred": self.deferred}


def cgroup_of(tgid: int) -> dict:
    """The process's cgroup fields, as the probe kept them at its first allocation or exec."""
    leaf = comms.get(comms.Key(tgid))
    return tool.cgroup_fields(leaf.cgid if leaf else 0)


def stands_for(a: Any) -> float:   # a: the map's struct alloc_t
    """How many allocations a kept one stands for: 1, or sampled, its weight over its size."""
    return a.weight / a.size if a.size else 1.0


def sampled_outstanding(items: list) -> dict[int, tuple[int, int]]:
    """Sampled (--sample-bytes): each process's outstanding (bytes, allocations), estimated from the kept
    allocations, each standing for its weight."""
    out: dict[int, list[float]] = {}
    for _, a in items:
        t = out.setdefault(a.tgid, [0, 0.0])
        t[0] += a.weight
        t[1] += stands_for(a)
    return {tgid: (b, round(n)) for tgid, (b, n) in out.items()}


def process_rows(items: list) -> list[dict]:
    """Every process with a kernel-memory record: lifetime totals and what is outstanding now (sampled:
    allocated exact, outstanding estimated from the kept allocations `items`, freed the difference)."""
    rows = []
    estimated = sampled_outstanding(items) if args.sample_bytes else {}
    for tgid, (_, t) in percpu_totals(proc_mem).items():
        if tool.is_own(tgid):
            continue    # the profiler's own, recorded before the kernel knew it (bcctool/own.py)
        outstanding, active = t["alloc_bytes"] - t["freed_bytes"], t["allocs"] - t["frees"]
        if args.sample_bytes:   # an estimate may pass the exact allocated total: the freed are not below 0
            outstanding, active = estimated.get(tgid, (0, 0))
            t["freed_bytes"], t["frees"] = max(t["alloc_bytes"] - outstanding, 0), max(t["allocs"] - active, 0)
        row = {"pid": tgid, "comm": process_name(tgid, comms), **cgroup_of(tgid), "alloc_bytes": t["alloc_bytes"],
               "allocs": t["allocs"], "freed_bytes": t["freed_bytes"], "frees": t["frees"],
               "outstanding_bytes": outstanding, "active_allocs": active}
        user = procmem.process_memory(tgid)
        row.update(user or {"rss_bytes": None, "vm_size_bytes": None})
        row["alive"] = user is not None
        rows.append(row)
    return rows


def forget_settled(rows: list[dict]) -> None:
    """Processes that have exited with nothing outstanding leave the maps (they could fill them), a read
    after the one that first found them so (bcctool.ExitedKeys)."""
    for pid in exited.settled([r["pid"] for r in rows if not r["alive"] and r["active_allocs"] == 0]):
        for bpf_map in (proc_mem, comms):
            try:
                del bpf_map[bpf_map.Key(pid)]
            except KeyError:
                pass
        user.sym.forget(pid)


def kept_allocations() -> list:
    """The allocations kept (outstanding), read once an interval: for the stacks, and sampled for the
    estimates too; [] when neither needs them."""
    return all_items(allocs) if args.stacks or args.sample_bytes else []


def stack_groups(items: list, now_ns: int, limit: int | None) -> list[dict]:
    """Outstanding allocations grouped by (process, kernel stack), in --stack-sort order, the first `limit`
    (sampled: each kept one standing for its weight, the figures estimates)."""
    if not args.stacks:
        return []
    min_age_ns = int((args.min_age or 0) * 1e9)
    groups: dict[tuple, dict] = {}
    mark = user.arrived
    if dwarf:   # the copies the allocations just read refer to are in the ring, if not unwound yet
        b.ring_buffer_consume()
        user.unwind_pending()
        user.keep_only({a.ukey for _, a in items}, mark)
    if in_kernel:   # the walked stacks no allocation refers to any more leave `ustacks` (when half full)
        user.stored.retire({a.ukey for _, a in items})
    for _, a in items:
        if now_ns - a.ts < min_age_ns or tool.is_own(a.tgid):
            continue
        # without a stack, the caller the tracepoint names keeps different sites apart
        key = (a.tgid, a.stack_id, a.call_site if a.stack_id < 0 else 0, user.key(a))
        g = groups.setdefault(key, {"bytes": 0, "count": 0.0, "oldest": a.ts, "call_site": a.call_site})
        g["bytes"] += a.weight
        g["count"] += stands_for(a)
        g["oldest"] = min(g["oldest"], a.ts)
    order = {"oldest": lambda g: g["oldest"], "bytes": lambda g: -g["bytes"], "count": lambda g: -g["count"]}
    top = sorted(groups.items(), key=lambda kv: order[args.stack_sort](kv[1]))[:limit]
    return [{"pid": tgid, "comm": process_name(tgid, comms), **cgroup_of(tgid), "stack_id": stack_id,
             "outstanding_bytes": g["bytes"], "active_allocs": round(g["count"]),
             "oldest_age_s": round((now_ns - g["oldest"]) / 1e9, 3),
             "kernel_frames": frames(stack_id, g["call_site"]), "user_frames": user.frames(tgid, ukey)}
            for (tgid, stack_id, _, ukey), g in top]


def frames(stack_id: int, call_site: int) -> list[str]:
    """The kernel stack, symbolized (bcctool.symbols' kallsyms, 4 MB; BCC's ksym cache held 12 MB of
    libbcc heap); without one, the caller the tracepoint names."""
    try:
        addrs = list(stacks.walk(stack_id)) if stack_id >= 0 else []
    except KeyError:
        addrs = []
    if not addrs:
        return ["[stack not recorded]", user.sym.kernel(call_site)]
    return [user.sym.kernel(addr) for addr in addrs[: args.stack_depth]]


# the table's columns and the memory line: the registry's labels and units (registry/entries/compmem.py)
COLUMNS = tool.fields(*(("pid", "comm") if args.group_by == "process" else ("processes", "cgroup")), "alloc_bytes",
                      "allocs", "outstanding_bytes", "active_allocs",
                      *(("rss_bytes", "vm_size_bytes") if args.group_by == "process" else ()))
MEMORY = tool.fields("mem_total_bytes", "mem_free_bytes", "mem_available_bytes", "buffers_bytes", "cached_bytes",
                     "slab_bytes", "slab_unreclaimable_bytes", kind="summary")


def print_report(summary: dict, top: list[dict], groups: list[dict], sysmem: dict) -> None:
    print(f"\n[{time.strftime('%H:%M:%S')}] {figures(MEMORY, sysmem)}")
    print(f"Traced kernel allocations: {summary['active_allocs']:,} outstanding "
          f"({quantity(summary['outstanding_bytes'], 'bytes')}); this interval {summary['allocs']:,} allocated "
          f"({quantity(summary['alloc_bytes'], 'bytes')}), {summary['frees']:,} freed "
          f"({quantity(summary['freed_bytes'], 'bytes')})")
    print()
    print(table(COLUMNS, [r if r.get("alive", True) else {**r, "rss_bytes": "[exited]"} for r in top]))
    if not args.stacks:
        return
    older = f" for {args.min_age:g} s or more" if args.min_age else ""
    order = {"oldest": "oldest first", "bytes": "most bytes first", "count": "most allocations first"}
    print(f"\nOutstanding allocations by kernel stack and user stack{older}, {order[args.stack_sort]} (top {args.stacks}):")
    for g in groups:
        print(f"  {g['pid']} {g['comm']}: {g['active_allocs']:,} allocations, {quantity(g['outstanding_bytes'], 'bytes')}, "
              f"oldest {quantity(g['oldest_age_s'], 's')} [stack {g['stack_id']}]")
        print_stack(g["kernel_frames"], g["user_frames"][: args.stack_depth], "      ")


# --- loop ------------------------------------------------------------------------------------------
user = UserStacks()
if dwarf:
    b["ucopies"].open_ring_buffer(user.on_copy)   # served while the harness waits
tables = reader = walk_figures = None
if in_kernel:   # the traced process's tables (-p) before its first walk; those met later on a thread
    tables, reader = tracepoint_tables(b, user.unwinder.cache_dir, tool.warn, args.pid)
    walk_figures = WalkFigures(b, tables, user.stored)
tool.meta(caches=args.caches, min_bytes=args.min_bytes, max_allocs=args.max_allocs,
          size="bytes_alloc (what the allocator handed out)", user_stacks=user_stacks, sample_bytes=args.sample_bytes,
          **({"note": f"{'DWARF' if args.user_stacks == 'dwarf' else 'CFI'} user stacks refused by the kernel: frame pointers instead"} if refused else {}))
tool.say(f"Tracing kernel allocations (kmalloc{' and slab caches' if args.caches else ''})... Ctrl-C to end.")
previous: dict[int, dict] = {}
missed_before = 0
unwound_seen: dict[str, int] = {}
last = time.monotonic()
exited = ExitedKeys()   # processes gone and settled: forgotten a read later
process_names = ProcessNames()
for _ in tool.intervals():
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    kept = kept_allocations()
    rows = process_rows(kept)
    # bpf_ktime_get_ns() is CLOCK_MONOTONIC; the app's flame graph wants every stack, a person the first few
    groups = stack_groups(kept, time.monotonic_ns(), None if tool.json else args.stacks)
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
    # a comm several processes share is shown with its command line's script: "python3 (server.py)"
    process_names.rename_rows([*(top if args.group_by == "process" else []), *groups])
    summary = {"outstanding_bytes": sum(r["outstanding_bytes"] for r in rows),
               "active_allocs": sum(r["active_allocs"] for r in rows), **delta,
               "processes": sum(r.get("processes", 1) for r in rows), "missed_frees": counts[MISSED_FREE] - missed_before,
               "interval_s": round(elapsed, 3)}
    if args.sample_bytes:   # the bytes one kept allocation stands for now, on the CPU that keeps fewest
        summary["sample_bytes_paced"] = largest_divisor(pace, args.sample_bytes)
    missed_before = counts[MISSED_FREE]
    if dwarf:   # this interval's copies, their unwinds by outcome, and the copies the ring had no room for
        now_counts = {**user.outcomes(), "copies": counts[UCOPIES], "not_copied": counts[4]}
        summary["user_stacks"] = {k: n - unwound_seen.get(k, 0) for k, n in now_counts.items()}
        unwound_seen = now_counts
        user.next_interval()
    if in_kernel:   # this interval's walks by outcome, and what the kernel's unwinder holds
        summary["user_stacks"], summary["kernel_unwind"] = walk_figures.take(counts[6])
        tables.forget_gone(taskinfo.processes())
    if tool.json:
        tool.emit("summary", **summary, **sysmem)
        for rank, r in enumerate(top, 1):
            tool.emit("row", level=args.group_by, rank=rank, **r)
        for rank, g in enumerate(groups, 1):
            tool.emit("row", level="stack", rank=rank, **g)
    else:
        print_report(summary, top, groups, sysmem)
        u = summary.get("user_stacks")
        if u and dwarf and (u["copies"] or u["not_copied"]):
            print(f"(user stacks: {u['copies']} copies, {u['complete']} unwound whole, {u['truncated']} truncated, "
                  f"{u['failed']} failed, {u['deferred']} deferred (ip only); {u['not_copied']} allocations not "
                  f"copied, the ring buffer full)")
        if u and in_kernel and u["walks"] + u["reused"]:
            print(walks_line(u))
    for slot, source in LOST_SOURCES.items():
        tool.set_lost_total(source, counts[slot])

if tables is not None:
    stop_tables(tables, reader)
tool.finish()
