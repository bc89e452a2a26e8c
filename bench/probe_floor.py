#!/usr/bin/python3
"""probe_floor: one empty BPF program on each probe named on the command line, attached as a metric
attaches it; print "ready", wait for SIGINT or SIGTERM.

    probe_floor.py tracepoint:kmem:kmalloc raw_tracepoint:sys_exit perf_event:minor-faults
    probe_floor.py --work tracepoint:kmem:kmalloc raw_tracepoint:sys_exit+clock
    probe_floor.py --work raw_tracepoint:sys_enter+state tracepoint:sched:sched_switch+state

A probe is TYPE:NAME as a metric's meta record lists it (bcctool's attached_probes): tracepoint
CATEGORY:EVENT, raw_tracepoint EVENT, perf_event a perf software event by name, on every CPU with a
sample period of 1 (pagefault counts every fault so) or at HZ samples a second when written NAME@HZ
(cpuprofile's cpu-clock). bench/app_cost.py runs one of these per metric, with that metric's probes:
the price of being attached where the metrics are, without any of their work.

--work: the least any tool does with an event instead of nothing: each program counts it (one per-CPU
array slot per program), and on a probe written TYPE:NAME+clock also reads the clock and keeps it, as
a tool that times what happens between two events must at each (a latency, a run, a block). Less than
any metric does (no per-thread state, no histogram): app_cost's "floor + least work" row, a bound no
tool of the ten's jobs can go under.

TYPE:NAME+state (with --work): also the least per-thread state a tool that times spans between two
events keeps, where the event says whose span it is: on raw sys_enter the clock kept in the thread's
task storage and on sys_exit read back from it (sysnest's way, the cheapest there is); on sched_switch
prev's time written and next's read in a hash by tid (the tracepoint gives only tids, so no task
storage for next: BCC's runqlat, cpuschedrun and offcpu key threads so); on sched_wakeup(_new) the woken
thread's time written there. Other probes +state are +clock. app_cost's "floor + least state" row: near
the least a tool of the ten's timing jobs does, though not a bound for every program (schparm keeps
its counters in task storage and the run's start per CPU, and costs less a switch than this)."""

import os
import re
import sys

from bcc import BPF
from hold import hold

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bcctool import PERF_EVENT_NAMES, ksymstub  # noqa: E402
from bcctool.kernelfeatures import tracefs_root  # noqa: E402

PERF_EVENTS = {name: key for key, name in PERF_EVENT_NAMES.items()}


def fail(text: str) -> None:
    print(f"probe_floor: {text}", file=sys.stderr)
    sys.exit(2)


def parse(arg: str) -> tuple[str, str, str]:
    """(type, name, extra) of TYPE:NAME[+clock|+state]; extra "", "clock" or "state"."""
    base, _, extra = arg.rpartition("+") if arg.endswith(("+clock", "+state")) else (arg, "", "")
    kind, _, name = base.partition(":")
    if kind not in ("tracepoint", "raw_tracepoint", "perf_event") or not name:
        fail(f"not TYPE:NAME with TYPE tracepoint, raw_tracepoint or perf_event: {arg!r}")
    return kind, name, extra


def field_offset(event: str, field: str) -> int:
    """Where a tracepoint's field sits in its record (tracefs's format file)."""
    root = tracefs_root()
    try:
        with open(f"{root}/events/{event.replace(':', '/')}/format") as f:
            text = f.read()
    except (OSError, TypeError):
        fail(f"no tracefs format for {event} (is tracefs mounted?)")
    found = re.search(rf"\b{field};\s*offset:(\d+);", text)
    if not found:
        fail(f"{event} has no field {field}")
    return int(found.group(1))


def state_work(kind: str, name: str) -> str | None:
    """The C, after the count, of the least per-thread state on this probe (see the module doc); None
    where no thread's span starts or ends here by the event alone."""
    field = "(u32)*(int *)((char *)ctx + {})".format
    if (kind, name) == ("raw_tracepoint", "sys_enter"):
        return ("struct ts_t *s = task_ts.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0, "
                "BPF_LOCAL_STORAGE_GET_F_CREATE); if (s) s->ts = bpf_ktime_get_ns();")
    if (kind, name) == ("raw_tracepoint", "sys_exit"):
        return ("struct ts_t *s = task_ts.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0, 0); "
                "if (s && s->ts) { w->ts += bpf_ktime_get_ns() - s->ts; s->ts = 0; }")
    if (kind, name) == ("tracepoint", "sched:sched_switch"):
        prev, nxt = field(field_offset(name, "prev_pid")), field(field_offset(name, "next_pid"))
        return (f"u64 now = bpf_ktime_get_ns(); u32 prev = {prev}, next = {nxt}; "
                "u64 *p = thread_ts.lookup(&prev); if (p) *p = now; else thread_ts.update(&prev, &now); "
                "u64 *n = thread_ts.lookup(&next); if (n) w->ts += now - *n;")
    if (kind, name) in (("tracepoint", "sched:sched_wakeup"), ("tracepoint", "sched:sched_wakeup_new")):
        return (f"u64 now = bpf_ktime_get_ns(); u32 tid = {field(field_offset(name, 'pid'))}; "
                "u64 *p = thread_ts.lookup(&tid); if (p) *p = now; else thread_ts.update(&tid, &now);")
    return None


def program(fn: str, slot: int, work: bool, kind: str, name: str, extra: str) -> str:
    """The C of one program: empty, or counting its event (and with clock, reading the clock; with
    state, keeping the thread's time as the module doc says)."""
    if not work:
        return f"int {fn}(void *ctx) {{ return 0; }}\n"
    body = (extra == "state" and state_work(kind, name)) or (" w->ts = bpf_ktime_get_ns();" if extra else "")
    return (f"int {fn}(void *ctx) {{ int k = {slot}; struct work_t *w = work.lookup(&k); "
            f"if (w) {{ w->events++; {body} }} return 0; }}\n")


def attach(b: BPF, fn: str, kind: str, name: str) -> None:
    if kind == "tracepoint":
        b.attach_tracepoint(tp=name.encode(), fn_name=fn.encode())
    elif kind == "raw_tracepoint":
        b.attach_raw_tracepoint(tp=name.encode(), fn_name=fn.encode())
    else:
        event, _, hz = name.partition("@")
        if event not in PERF_EVENTS:
            fail(f"unknown perf event {event!r} (known: {', '.join(sorted(PERF_EVENTS))})")
        ev_type, ev_config = PERF_EVENTS[event]
        timing = {"sample_freq": int(hz)} if hz else {"sample_period": 1}
        b.attach_perf_event(ev_type=ev_type, ev_config=ev_config, fn_name=fn.encode(), cpu=-1, **timing)


def main() -> None:
    args = sys.argv[1:]
    work = bool(args) and args[0] == "--work"
    probes = [parse(arg) for arg in args[work:]]
    if not probes:
        fail("no probe given")
    if not work and any(extra for _, _, extra in probes):
        fail(f"a probe written +{next(extra for _, _, extra in probes if extra)} needs --work")
    # program names say which probe each is on (bpftool and bpf_stats show the first 15 characters)
    names = [f"e{i}_{re.sub(r'[^A-Za-z0-9]', '_', name.split(':')[-1])}" for i, (_, name, _) in enumerate(probes)]
    text = (f"struct work_t {{ u64 events; u64 ts; }};\nBPF_PERCPU_ARRAY(work, struct work_t, {len(probes)});\n"
            if work else "")
    if any(extra == "state" for _, _, extra in probes):
        text += ("struct task_struct;\nstruct ts_t { u64 ts; };\nBPF_TASK_STORAGE(task_ts, struct ts_t);\n"
                 "BPF_HASH(thread_ts, u32, u64, 65536);\n")
    text += "".join(program(fn, i, work, *probe) for i, (fn, probe) in enumerate(zip(names, probes, strict=True)))
    with ksymstub.stub_kallsyms():
        b = BPF(text=text.encode())
    try:
        for fn, (kind, name, _) in zip(names, probes, strict=True):
            attach(b, fn, kind, name)
    except Exception as exc:  # noqa: BLE001 - BCC raises bare Exception when an attach fails
        fail(f"could not attach: {str(exc).splitlines()[0]}")
    hold(b)


if __name__ == "__main__":
    main()
