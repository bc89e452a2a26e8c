#!/usr/bin/python3
"""cpuschedrun: CPU run time and run-queue latency, as histograms and per thread.

Traces sched_wakeup, sched_wakeup_new and sched_switch: a thread waits on the run queue from its wakeup
(or from being preempted) until it is switched in, and runs until it is switched out. Each interval
prints log2 histograms of both and, with -P, a table per thread with CPU% (its run time as a share of
the interval's wall time, as top and pidstat show it), run and wait time, and the top N of all threads
by the chosen --sort. Each interval is charged only the run time inside it: a run longer than an
interval is split across the intervals it spans, so a thread never exceeds 100 %.
"""

import ctypes
import os
import struct
import sys
import time
from collections.abc import Iterable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

import bcctool
from bcctool import Tool, cgroups, epochs, taskinfo
from bcctool.procnames import ProcessNames

EXAMPLES = [
    ("cpuschedrun", "run-time and run-queue histograms, every second"),
    ("cpuschedrun -P 5 3", "three 5-second intervals with the per-thread table"),
    ("cpuschedrun -P -p 185", "only process 185 and its threads"),
    ("cpuschedrun -m --timestamp", "histograms in milliseconds, each interval timestamped"),
    ("cpuschedrun -P --json", "NDJSON records for the app"),
    ("cpuschedrun -P --group-by cgroup", "the table a row per cgroup (services, containers)"),
    ("cpuschedrun -P --cgroup lab/job-7", "one cgroup v2 group and the groups below it"),
]

tool = Tool("cpuschedrun", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/cpuschedrun.py
args = tool.parse_args()


# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid, filter_tid=args.tid)
cflags += ["-DPER_THREAD"] * args.per_process + ["-DMILLISECONDS"] * args.milliseconds
b = tool.load(cflags)
# the switches the kernel does not deliver, healed on every CPU HEAL_HZ times a second (bpf/cpuschedrun.c
# heal()): a run whose switch in was not seen is charged from then on, late by at most 1/HEAL_HZ s
HEAL_HZ = 100
try:
    from bcc import PerfSWConfig, PerfType
    clock = (PerfType.SOFTWARE, PerfSWConfig.CPU_CLOCK)
    b.attach_perf_event(ev_type=clock[0], ev_config=clock[1], fn_name=b"heal", sample_freq=HEAL_HZ, cpu=-1)
    tool.perf_hz[clock] = HEAL_HZ
except Exception as exc:  # noqa: BLE001 - BCC raises bare Exception when perf_event_open fails
    tool.die(f"could not attach to the cpu-clock perf event: {exc}")
if args.pid or args.cgroup:
    # Threads that exist now join the member set; task_newtask adds the ones born while tracing.
    tasks = b["tasks"]
    members = taskinfo.thread_ids(args.pid) if args.pid else cgroups.threads_in(tool._filters["cgroup"])
    for tid in members:
        bcctool.insert_new(tasks, tasks.Key(tid), tasks.Leaf())

exited = b["exited"] if args.per_process else None
hist_unit = "ms" if args.milliseconds else "us"


def identities(tids: Iterable[int], cgid_of: dict[int, int]) -> dict[int, tuple[int, str, int]]:
    """{tid: (tgid, comm, cgroup id)}: /proc and the thread's last switch out (cgid_of, from `tasks`) while
    it lives, else what the probe kept at its exit. Each map read once (in batches), not looked up a thread
    each: a fork-heavy load brings hundreds of threads an interval, most of them gone."""
    exits: dict[int, bytes] | None = None   # tid -> its exit's struct ident_t, read at the first needed

    def exit_record(tid: int) -> Any:
        nonlocal exits
        if exited is None:
            return None
        if exits is None:
            keys, values = bcctool.raw_items(exited)
            size = ctypes.sizeof(exited.Leaf)
            exits = {t: values[i * size:(i + 1) * size] for i, (t,) in enumerate(struct.iter_unpack("<I", keys))}
        raw = exits.get(tid)
        return exited.Leaf.from_buffer_copy(raw) if raw else None

    out = {}
    for tid in tids:
        comm = taskinfo.comm_of(tid)
        tgid = taskinfo.tgid_of(tid) if comm is not None else None
        cgid = cgid_of.get(tid)
        leaf = exit_record(tid) if cgid is None or tgid is None else None
        cgid = cgid if cgid is not None else (leaf.cgid if leaf else 0)
        if tgid is not None and comm is not None:
            out[tid] = (tgid, comm, cgid)
        else:
            out[tid] = (leaf.tgid, leaf.comm.decode(errors="replace"), cgid) if leaf else (0, "[gone]", cgid)
    return out


def shares(d: dict, interval_ns: float) -> dict:
    """A thread's (or a cgroup's) CPU share of the interval's wall time, run and wait ms, runs and
    waits, and the priority score: the share of its runnable time it spent on a CPU (0..100); of its
    runs, those whose switch in the kernel did not deliver (their start estimated: docs)."""
    busy = d["run_ns"] + d["wait_ns"]
    cpu_pct = 100.0 * d["run_ns"] / interval_ns
    priority = 100.0 * d["run_ns"] / busy if busy else 0.0
    return {"cpu_pct": round(cpu_pct, 2), "run_ms": round(d["run_ns"] / 1e6, 4),
            "wait_ms": round(d["wait_ns"] / 1e6, 4), "priority": int(round(priority)), "runs": d["runs"],
            "waits": d["waits"], "unseen_switch_ins": d["unseen_switch_ins"], "run_ns": d["run_ns"],
            "wait_ns": d["wait_ns"]}


S_RUNNING = 2   # bpf/cpuschedrun.c: on a CPU since ts
STAT_FIELDS = ("run_ns", "wait_ns", "runs", "waits", "unseen_switch_ins")   # struct stat_t


def open_runs(began_ns: int, now_ns: int) -> tuple[dict[int, dict[str, int]], set[tuple[int, int]], dict[int, int]]:
    """The part since began_ns of every run still in progress at the cut now_ns (map `tasks`), keyed like
    read_stats(); runs 0: a run is counted in the interval in which it ends. With them, the (tid, start)
    of each: a run that ended after the cut and before this read left its part in `crossed`; and each
    thread's cgroup as of its last switch out, from the same read."""
    out, open_keys, cgid_of = {}, set(), {}
    for key, t in bcctool.all_items(tasks_map):
        tid = getattr(key, "value", key)   # the batch op gives ints, items() c_uint
        if t.cgid:
            cgid_of[tid] = t.cgid
        if t.state != S_RUNNING or t.ts >= now_ns:
            continue
        if not taskinfo.runnable(tid):
            # on a CPU by our books, yet asleep or gone: its switch out (or its exit) was not delivered,
            # and its run is over; or it ended after the cut, and its part before the cut is in `crossed`
            # (its switch out is delivered within microseconds of its state leaving R, long before
            # collected_open). Not charged here either way.
            continue
        open_keys.add((tid, t.ts))
        out[tid] = {**dict.fromkeys(STAT_FIELDS, 0), "run_ns": now_ns - max(t.ts, began_ns)}
    return out, open_keys, cgid_of


def read_stats(slot: int, open_parts: dict[int, dict[str, int]], open_keys: set[tuple[int, int]]) -> dict[int, dict[str, int]]:
    """Per thread: run_ns, wait_ns, runs, waits of the finished epoch in `slot` (read and cleared), with
    the open part of each run in progress at the cut, and the part before it of those that ended after
    it and were not seen open."""
    deltas: dict[int, dict[str, int]] = {}
    for key, per_cpu in epochs.take_slot(stats_map, slot):
        d = deltas.setdefault(key.tid, dict.fromkeys(STAT_FIELDS, 0))
        for name in d:
            d[name] += sum(getattr(v, name) for v in per_cpu)
    parts = list(open_parts.items())
    parts += [(ck.tid, {"run_ns": getattr(part, "value", part)}) for ck, part in epochs.take_all(crossed)
              if (ck.tid, ck.start) not in open_keys]
    for tid, part in parts:
        d = deltas.setdefault(tid, dict.fromkeys(STAT_FIELDS, 0))
        d["run_ns"] += part["run_ns"]
    return deltas


def thread_rows(deltas: dict[int, dict[str, int]], interval_ns: float, cgid_of: dict[int, int]) -> list[dict]:
    """Every thread seen in the interval (or every cgroup), ordered by --sort: the caller keeps the top N."""
    rows = []
    who = identities(deltas, cgid_of)
    for tid, d in deltas.items():
        tgid, comm, cgid = who[tid]
        if tool.is_own(tgid):
            continue    # the profiler's own, counted before the kernel knew it (bcctool/own.py)
        rows.append({"pid": tgid, "tid": tid, "comm": comm, **tool.cgroup_fields(cgid), **shares(d, interval_ns)})
    if args.group_by == "cgroup":
        rows = [{**g, **shares(g, interval_ns)} for g in cgroups.by_cgroup(rows, STAT_FIELDS)]
    order = {"cpu": lambda r: r["run_ns"], "run": lambda r: r["run_ns"], "wait": lambda r: r["wait_ns"],
             "priority": lambda r: (r["priority"], r["run_ns"])}[args.sort]
    rows.sort(key=order, reverse=True)
    for r in rows:
        del r["run_ns"], r["wait_ns"]
    return rows


# the table's columns: the registry's labels and units (registry/entries/cpuschedrun.py)
COLUMNS = tool.fields(*(("cgroup", "processes") if args.group_by == "cgroup" else ("pid", "tid", "comm")), "cpu_pct",
                      "run_ms", "wait_ms", "priority", "runs")


def print_interval(rows: list[dict], hists: dict[str, list[dict]]) -> None:
    if args.timestamp:
        print(f"\n{time.strftime('%H:%M:%S')}")
    if args.per_process:
        print()
        print(bcctool.table(COLUMNS, rows))
    label = "milliseconds" if args.milliseconds else "microseconds"
    bcctool.print_log2(f"CPU Runtime Distribution ({label}):", f"{hist_unit}ecs", hists["run_time"])
    bcctool.print_log2(f"Run Queue Latency Distribution ({label}):", f"{hist_unit}ecs", hists["runq_latency"])


# --- loop ------------------------------------------------------------------------------------------
tasks_map = b["tasks"]
stats_map, crossed = (b["stats"], b["crossed"]) if args.per_process else (None, None)
lost, unseen_ins, unseen_outs = b["full"], b["unseen_switch_ins"], b["unseen_switch_outs"]
unseen_before = (0, 0)
HIST_SLOTS = 64   # log2 slots per epoch slot in run_hist and wait_hist (bpf/cpuschedrun.c)


def take_hists(slot: int) -> dict[str, list[dict]]:
    return {"run_time": bcctool.log2_buckets(epochs.take_array_slot(b["run_hist"], slot, HIST_SLOTS)),
            "runq_latency": bcctool.log2_buckets(epochs.take_array_slot(b["wait_hist"], slot, HIST_SLOTS))}


process_names = ProcessNames()


def ended_before_the_run() -> None:
    """Runs and waits that ended before the first interval began (slot 0) are not the run's."""
    take_hists(0)
    if stats_map is not None:
        read_stats(0, {}, set())


cuts = tool.begin_epochs(ended_before_the_run)
tool.meta(per_thread=args.per_process, hist_unit=hist_unit, group_by=args.group_by)
tool.say("Tracing run time and run-queue latency... Hit Ctrl-C to end.")
for _interval in tool.intervals():
    # the cut: every run and wait that ends from here on is the next interval's, and this one is finished
    closing, began, now = cuts.flip()
    open_parts, open_keys, cgid_of = open_runs(began, now) if stats_map is not None else ({}, set(), {})
    cuts.collected_open(closing)
    elapsed = max(now - began, 1) / 1e9
    slot = epochs.Epochs.slot(closing)
    hists = take_hists(slot)
    deltas = read_stats(slot, open_parts, open_keys) if stats_map is not None else {}
    rows = thread_rows(deltas, elapsed * 1e9, cgid_of)
    if args.group_by == "process":
        process_names.rename_rows(rows[: args.top])   # a comm several processes share: "python3 (server.py)"
    runs = sum(bucket["count"] for bucket in hists["run_time"])
    waits = sum(bucket["count"] for bucket in hists["runq_latency"])
    if tool.json:
        unseen_total = (sum(unseen_ins[unseen_ins.Key(0)]), sum(unseen_outs[unseen_outs.Key(0)]))
        summary = {"runs": runs, "waits": waits, "interval_s": round(elapsed, 3),
                   # runs whose switch in or out the kernel did not deliver: counted, their time estimated
                   "unseen_switch_ins": unseen_total[0] - unseen_before[0],
                   "unseen_switch_outs": unseen_total[1] - unseen_before[1]}
        unseen_before = unseen_total
        if stats_map is not None:
            summary.update(threads=len(rows), run_ms=round(sum(r["run_ms"] for r in rows), 3),
                           wait_ms=round(sum(r["wait_ms"] for r in rows), 3))
        tool.emit("summary", **summary)
        for name, buckets in hists.items():
            tool.emit("hist", name=name, unit=hist_unit, total=sum(x["count"] for x in buckets), buckets=buckets)
        for rank, row in enumerate(rows[: args.top], 1):
            tool.emit("row", rank=rank, **row)
    else:
        print_interval(rows[: args.top], hists)
    tool.set_lost_total("map_full", sum(lost[lost.Key(0)]))

tool.finish()
