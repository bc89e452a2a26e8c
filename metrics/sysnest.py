#!/usr/bin/python3
"""sysnest: syscall counts and latency, nested by process or by syscall.

Traces raw_syscalls sys_enter/sys_exit (raw tracepoints). Per (process, syscall) the kernel keeps a
count, total and max latency and errors in a slot of a per-CPU array (the `slots` hash says whose slot is
which); each interval prints the top groups (processes or syscalls) with their top members.
"""

import ctypes
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

from bcc.utils import get_possible_cpus

from bcctool import ExitedKeys, Tool, kernelfeatures, process_names_of, quantity, raw_items, raw_prefix, table, taskinfo
from bcctool.cgroups import CGROUP_FIELDS
from bcctool.maps import delete_keys, zero_indices
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("sysnest", "top 10 processes and their top 5 syscalls, every second"),
    ("sysnest 5 3", "three 5-second summaries"),
    ("sysnest -p 185", "only process 185"),
    ("sysnest --group-by syscall --top 5", "top 5 syscalls, top processes under each"),
    ("sysnest --ppid 1 --duration 30", "children of PID 1, for 30 seconds"),
    ("sysnest --cgroup /sys/fs/cgroup/unified/web", "one cgroup (v2) and the groups below it"),
    ("sysnest --group-by cgroup", "top cgroups, top syscalls under each"),
    ("sysnest -m --json", "milliseconds; NDJSON records for the app"),
    ("sysnest --sample 8", "time one syscall in 8 per thread (counts stay exact): less overhead"),
]

tool = Tool("sysnest", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/sysnest.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid, filter_tid=args.tid, filter_ppid=args.ppid)
if args.sample > 1:
    cflags.append(f"-DSAMPLE_EVERY={args.sample}")
cflags.append(f"-DSLOT_CPUS={max(get_possible_cpus()) + 1}")   # each CPU hands out its own slots
variants = kernelfeatures.task_storage_variants()
b = tool.load(cflags, variants=variants)
# sampling needs a per-thread tick between syscalls, which only task storage keeps
sample_every = args.sample if tool.variant else 1
if sample_every != args.sample:
    print("sysnest: no task storage on this kernel: every syscall is timed (--sample ignored)", file=sys.stderr)
stats, slots, free_slots, comms, epoch = b["stats"], b["slots"], b["free_slots"], b["comms"], b["epoch"]

if args.ppid:
    # Children that already exist; the fork tracepoint adds the ones born while tracing.
    children = b["children"]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = taskinfo.stat(int(entry))    # its comm, in the stat, may not be UTF-8: read as proctext.py says
            if st is not None and st["ppid"] == args.ppid:
                children[children.Key(int(entry))] = children.Leaf(args.ppid)

epoch[epoch.Key(0)] = epoch.Leaf(1)
tool.meta(group_by=args.group_by, entry_storage="task_storage" if tool.variant else "hash",
          sample_every=sample_every)
tool.say(f"Tracing syscalls, grouped by {args.group_by}, top {args.top}... Ctrl-C to end.")

try:
    from bcc.syscall import syscall_name
except ImportError:  # pragma: no cover - bcc always ships it
    def syscall_name(nr: int) -> bytes:
        return b"sys_%d" % nr


KEY = struct.Struct("<IIQ")   # struct key_t: tgid, nr, cgroup id
VAL = struct.Struct("<6Q")    # struct val_t, one CPU's: count, total_ns, errors, max_ns, epoch, timed


def read_totals(min_epoch: int) -> dict[tuple[int, int, int], tuple[int, int, int, int, int]]:
    """(tgid, nr, cgroup id) -> (count, total_ns, errors, timed, max_ns in windows >= min_epoch), summed over CPUs,
    for the keys whose values changed since the last read (the others made no syscall); timed: the
    syscalls in total_ns (all of them unless sampling). Parsed from the maps' bytes: a fork-heavy load
    keeps thousands of keys."""
    keys, slot_values = raw_items(slots)
    keyed = [(key, slot) for key, (slot,) in zip(KEY.iter_unpack(keys), struct.iter_unpack("<I", slot_values), strict=True)]
    slot_of.clear()
    slot_of.update(keyed)
    # the slots are handed out from 0 up: one batch read of the array's used part, not a lookup a slot
    width = ctypes.sizeof(stats.Leaf)
    used = raw_prefix(stats, 1 + max((slot for _, slot in keyed), default=-1))
    totals, raw_now = {}, {}
    for key, slot in keyed:
        raw = used[slot * width:(slot + 1) * width]
        if len(raw) < width:
            continue
        raw_now[key] = raw
        if last_raw.get(key) == raw:
            continue
        count = total = errors = timed = mx = 0
        for c, t, e, m, ep, tm in VAL.iter_unpack(raw):
            count += c
            total += t
            errors += e
            timed += tm
            if ep >= min_epoch and m > mx:
                mx = m
        totals[key] = (count, total, errors, timed if sample_every > 1 else count, mx)
    last_raw.clear()
    last_raw.update(raw_now)
    return totals


def forget_exited(seen: dict, delta_keys: set) -> None:
    """Forget keys of processes that have exited and had nothing new in two reads (bcctool.ExitedKeys),
    and give their slots back zeroed (no thread left can be holding one): in batches, as a fork-heavy
    load leaves hundreds of keys an interval."""
    quiet = [k for k in seen if k not in delta_keys]
    alive = taskinfo.processes() if quiet else set()   # one read of /proc, not a stat a process
    gone = exited.settled([k for k in quiet if k[0] not in alive])
    if not gone:
        return
    for key in gone:
        seen.pop(key, None)
        last_raw.pop(key, None)   # a new process with its pid starts from a zeroed slot
    freed = [slot_of.pop(key) for key in gone if key in slot_of]
    delete_keys(slots, [slots.Key(*key) for key in gone])   # no new syscall finds them now
    zero_indices(stats, freed)                              # then zeroed, then handed out again
    for slot in freed:
        free_slots.push(free_slots.Leaf(slot))
    delete_keys(comms, [comms.Key(tgid) for tgid in {key[0] for key in gone}])


def nest(rows: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Group rows by process, syscall or cgroup; top groups, each with its top members."""
    by = {"process": "pid", "syscall": "syscall", "cgroup": "cgroup_id"}[args.group_by]
    order = "total_ns" if args.sort == "time" else "count"
    groups: dict = {}
    for r in rows:
        g = groups.setdefault(r[by], {"count": 0, "total_ns": 0, "errors": 0, "timed": 0, "max_ns": 0,
                                      "members": []})
        for field in ("count", "total_ns", "errors", "timed"):
            g[field] += r[field]
        g["max_ns"] = max(g["max_ns"], r["max_ns"])
        g["members"].append(r)
        g.update({k: r[k] for k in GROUP_FIELDS[args.group_by] if k in r})
    top = sorted(groups.values(), key=lambda g: g[order], reverse=True)[: args.top]
    return [(g, sorted(g.pop("members"), key=lambda r: r[order], reverse=True)[: args.details_top]) for g in top]


GROUP_FIELDS = {"process": ("pid", "comm", *CGROUP_FIELDS), "syscall": ("syscall", "nr"), "cgroup": CGROUP_FIELDS}


def cgroup_of(r: dict) -> dict:
    return {k: r[k] for k in CGROUP_FIELDS if k in r}


def latency_fields(r: dict) -> dict:
    """JSON keeps microseconds whatever --milliseconds says, so records compare across runs."""
    avg = r["total_ns"] / r["count"] if r["count"] else 0
    return {"total_us": round(r["total_ns"] / 1e3, 3), "avg_us": round(avg / 1e3, 3),
            "max_us": round(r["max_ns"] / 1e3, 3)}


# the table's columns: the registry's labels and units (registry/entries/sysnest.py); a group's row fills the
# group's fields, each of its members' rows under it the members'
GROUP, MEMBER = {"process": (("pid", "comm"), ("syscall",)), "syscall": (("syscall",), ("pid", "comm")),
                 "cgroup": (("cgroup",), ("pid", "comm", "syscall"))}[args.group_by]
COLUMNS = tool.fields(*GROUP, *MEMBER, "count", "errors", "total_us", "avg_us", "max_us")


def print_human(nested: list, total: int, nprocs: int, elapsed: float) -> None:
    print(f"\n[{time.strftime('%H:%M:%S')}] {total:,} syscalls ({quantity(total / elapsed, '/s')}), "
          f"{nprocs:,} processes")
    lines = []
    for group, members in nested:
        lines.append(shown(group, GROUP))
        lines += [shown(r, MEMBER) for r in members]
    print(table(COLUMNS, lines, time_unit="ms" if args.milliseconds else ""))


def shown(r: dict, names: tuple[str, ...]) -> dict:
    """A row of the table: the fields named, counts and times."""
    ident = {k: r[k] for k in names}
    if "cgroup" in ident:
        ident["cgroup"] = ident["cgroup"] or str(r["cgroup_id"])
    return {**ident, "count": r["count"], "errors": r["errors"], **latency_fields(r)}


# --- loop ------------------------------------------------------------------------------------------
seen: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}
slot_of: dict[tuple[int, int, int], int] = {}   # each key's slot in stats, as the last read found it
last_raw: dict[tuple[int, int, int], bytes] = {}  # each key's per-CPU values in stats, as the last read found them
exited = ExitedKeys()   # processes gone: forgotten a read later
process_names = ProcessNames()
last = time.monotonic()
for interval in tool.intervals():
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    rows, changed = [], set()
    for key, (count, total_ns, errors, timed, max_ns) in read_totals(0 if interval == 1 else interval).items():
        old = seen.get(key, (0, 0, 0, 0))
        dc, dt, de, dtimed = count - old[0], total_ns - old[1], errors - old[2], timed - old[3]
        seen[key] = (count, total_ns, errors, timed)
        if dc <= 0 or tool.is_own(key[0]):
            continue
        changed.add(key)
        if dtimed != dc:  # sampled: the total of all dc syscalls, estimated from the dtimed ones
            dt = dt * dc // dtimed if dtimed else 0
        name = syscall_name(key[1]).decode(errors="replace")
        rows.append({"pid": key[0], "comm": "", "nr": key[1], "syscall": name,
                     "count": dc, "total_ns": dt, "errors": de, "timed": dtimed, "max_ns": max_ns,
                     **tool.cgroup_fields(key[2])})
    comm_of = process_names_of({r["pid"] for r in rows}, comms)   # each process's once
    for r in rows:
        r["comm"] = comm_of[r["pid"]]
    # a comm several processes share is shown with its command line's script: "python3 (server.py)"
    process_names.rename_rows(rows)
    # Read first, then open the next max window: a key hit between the two keeps its max in the window
    # just read, which is a smaller loss than the reverse order (the read's own bpf() calls would reset it).
    epoch[epoch.Key(0)] = epoch.Leaf(interval + 1)
    forget_exited(seen, changed)
    total = sum(r["count"] for r in rows)
    nprocs = len({r["pid"] for r in rows})
    nested = nest(rows)
    if tool.json:
        tool.emit("summary", syscalls=total, per_sec=round(total / elapsed, 1), processes=nprocs,
                  errors=sum(r["errors"] for r in rows), interval_s=round(elapsed, 3))
        for rank, (group, members) in enumerate(nested, 1):
            ident = {k: group[k] for k in GROUP_FIELDS[args.group_by] if k in group}
            tool.emit("row", level="group", group_by=args.group_by, rank=rank, **ident,
                      count=group["count"], errors=group["errors"], timed=group["timed"], **latency_fields(group))
            for r in members:
                tool.emit("row", level="detail", group_by=args.group_by, rank=rank, pid=r["pid"],
                          comm=r["comm"], syscall=r["syscall"], nr=r["nr"], **cgroup_of(r), count=r["count"],
                          errors=r["errors"], timed=r["timed"], **latency_fields(r))
    else:
        print_human(nested, total, nprocs, elapsed)
    tool.set_lost_total("stats_map_full", sum(b["full"][0]))

tool.finish()
