#!/usr/bin/python3
"""schparm: scheduling parameters and context switches of each thread, printed when it exits.

Traces the syscalls that change policy, nice and RT priority (and fork, which inherits them), seeded
from /proc for threads alive at start; sched_switch counts voluntary and involuntary switches and run
time; sched_process_exit sends one record per exiting thread, with the cgroup it exits in.
--group-by cgroup also sums each interval's exits per cgroup.
"""

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

import bcctool
from bcctool import Tool, kernelfeatures, taskinfo
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("schparm", "one line per exiting thread, system-wide"),
    ("schparm -p 185", "only the threads of process 185"),
    ("schparm --json", "NDJSON event records for the app (a summary every second)"),
    ("schparm 10 6", "a summary of exits every 10 s, for a minute"),
    ("schparm --cgroup lab/job-7 -g cgroup", "exits in one cgroup v2 group and those below, summed per group"),
]
POLICY_NAMES = {0: "NORMAL", 1: "FIFO", 2: "RR", 3: "BATCH", 5: "IDLE", 6: "DEADLINE", 7: "EXT"}

tool = Tool("schparm", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/schparm.py
args = tool.parse_args()
# the tables' columns: the registry's labels and units (registry/entries/schparm.py); exits print as they come
EXITS = bcctool.LineTable(tool.fields("comm", "pid", "tid", "ppid", "cpu", "prio", "nice", "policy", "rt_priority",
                                      "runtime_ms", "voluntary", "involuntary"),
                          widths=(-16, 7, 7, 7, 3, 4, 4, -8, 6, 11, 6, 6))
CGROUPS = tool.fields("cgroup", "processes", "exits", "runtime_ms", "voluntary", "involuntary")


# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid)
variants = kernelfeatures.task_storage_variants()
b = tool.load(cflags, variants=variants)
params = b["params"]

# Counters of threads alive now start at zero in the kernel; what /proc says they had at start is
# added at their exit.
baseline: dict[int, tuple[int, int, int]] = {}


def seed(update_existing: bool = False) -> int:
    """Parameters of the threads alive now, from /proc; counters' starting values into `baseline`.
    Returns how many threads were added."""
    added = 0
    threads = [(args.pid, t) for t in taskinfo.thread_ids(args.pid)] if args.pid else taskinfo.all_threads()
    for tgid, tid in threads:
        st = taskinfo.stat(tid)
        if st is None:
            continue
        leaf = params.Leaf(tgid=tgid, ppid=st["ppid"], policy=st["policy"], nice=st["nice"],
                           rt_priority=st["rt_priority"])
        if update_existing:
            old = params.get(params.Key(tid))
            if old is not None:
                old.nice = st["nice"]   # only nice: a group/user setpriority changed it
                params[params.Key(tid)] = old
            continue
        if not bcctool.insert_new(params, params.Key(tid), leaf):
            continue   # a probe got there first (a fork or syscall since attaching), or the map is full
        added += 1
        status, sched = taskinfo.status(tid), taskinfo.schedstat(tid)
        try:
            baseline[tid] = (int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]),
                             sched[0] if sched else 0)
        except (KeyError, ValueError):
            pass
    return added


def on_exit(cpu: int, data: int, size: int) -> None:
    e = b["exits"].event(data)
    base = baseline.pop(e.tid, None)
    if tool.is_own(e.pid):
        return      # the profiler's own, exited before the kernel knew it (bcctool/own.py)
    vol, invol, runtime_ns = e.voluntary, e.involuntary, e.runtime_ns
    if base:
        vol, invol, runtime_ns = vol + base[0], invol + base[1], runtime_ns + base[2]
    policy, nice, rt_priority, ppid = e.policy, e.nice, e.rt_priority, e.ppid
    if not e.known:
        # Not seen at start or born from a traced parent: /proc may still show the exiting thread.
        st = taskinfo.stat(e.tid) or {"policy": -1, "rt_priority": 0, "ppid": 0,
                                      "nice": e.prio - 120 if 100 <= e.prio < 140 else 0}
        policy, nice, rt_priority, ppid = st["policy"], st["nice"], st["rt_priority"], st["ppid"]
    policy = POLICY_NAMES.get(policy, "?")
    record = {"comm": e.comm.decode(errors="replace"), "pid": e.pid, "tid": e.tid, "ppid": ppid,
              "cpu": e.cpu, "prio": e.prio, "nice": nice, "policy": policy, "rt_priority": rt_priority,
              "runtime_ms": round(runtime_ns / 1e6, 3), "voluntary": vol, "involuntary": invol,
              "known": bool(e.known), **tool.cgroup_fields(e.cgid)}
    process_names.rename_rows([record])   # a comm several processes share: "python3 (server.py)"
    counts["exits"] += 1
    if args.group_by == "cgroup":
        g = per_cgroup.setdefault(e.cgid, {"exits": 0, "runtime_ns": 0, "voluntary": 0, "involuntary": 0,
                                           "pids": set()})
        g["exits"] += 1
        g["runtime_ns"] += runtime_ns
        g["voluntary"] += vol
        g["involuntary"] += invol
        g["pids"].add(e.pid)
    if tool.json:
        tool.emit_event(**record)
    elif args.group_by == "process":
        print(EXITS.line(record))
        tool.flush()


counts = {"exits": 0, "refresh": 0}
process_names = ProcessNames()
last = [time.monotonic()]
per_cgroup: dict[int, dict] = {}   # --group-by cgroup: this interval's exits, summed per cgroup id


def cgroup_rows() -> list[dict]:
    """This interval's exits per cgroup, most exits first; emptied for the next."""
    rows = [{**tool.cgroup_fields(cgid), "processes": len(g["pids"]), "exits": g["exits"],
             "runtime_ms": round(g["runtime_ns"] / 1e6, 3), "voluntary": g["voluntary"],
             "involuntary": g["involuntary"]}
            for cgid, g in per_cgroup.items()]
    per_cgroup.clear()
    return sorted(rows, key=lambda r: (r["exits"], r["runtime_ms"]), reverse=True)


def on_tick() -> None:
    gen = b["refresh"][ctypes.c_int(0)].value
    if gen != counts["refresh"]:
        counts["refresh"] = gen
        seed(update_existing=True)   # a setpriority on a process group or user changed many nice values
    now = time.monotonic()
    tool.emit("summary", exits=counts["exits"], interval_s=round(now - last[0], 3))
    if args.group_by == "cgroup":
        rows = cgroup_rows()
        if tool.json:
            for rank, r in enumerate(rows, 1):
                tool.emit("row", level="cgroup", rank=rank, **r)
        elif rows:
            print(f"\n[{time.strftime('%H:%M:%S')}] {counts['exits']:,} exits")
            print(bcctool.table(CGROUPS, [{**r, "cgroup": r["cgroup"] or str(r["cgroup_id"])} for r in rows]))
            tool.flush()
    counts["exits"], last[0] = 0, now
    full = b["full"]
    tool.set_lost_total("params_map_full", sum(full[full.Key(0)]))


# --- loop ------------------------------------------------------------------------------------------
# The buffer opens before seeding and the meta record: an exit sent with no reader attached is dropped
# without a trace. Exits wait in it until the poll, when `baseline` is complete.
b["exits"].open_perf_buffer(on_exit, page_cnt=64, lost_cb=tool.lost_callback("exits"),
                           wakeup_events=tool.wakeup_events())
# A thread born while a pass runs, to a parent the pass had not reached yet, is missed by the fork
# probe (no parent entry to inherit from); the next pass finds it. Passes shrink fast.
for _ in range(3):
    if not seed():
        break
tool.meta(counters="task_storage" if tool.variant else "hash", seeded_threads=len(baseline), group_by=args.group_by)
tool.say("Monitoring scheduling parameters of exiting threads... Hit Ctrl-C to end.\n")
if args.group_by == "process":
    tool.say(EXITS.heading())
tool.poll_until_stopped(on_tick=on_tick, tick=args.interval)
tool.finish()
