#!/usr/bin/python3
"""probe_floor: one empty BPF program on each probe named on the command line, attached as a metric
attaches it; print "ready", wait for SIGINT or SIGTERM.

    probe_floor.py tracepoint:kmem:kmalloc raw_tracepoint:sys_exit perf_event:minor-faults
    probe_floor.py --work tracepoint:kmem:kmalloc raw_tracepoint:sys_exit+clock

A probe is TYPE:NAME as a metric's meta record lists it (bcctool's attached_probes): tracepoint
CATEGORY:EVENT, raw_tracepoint EVENT, perf_event a perf software event by name, on every CPU with a
sample period of 1 (pagefault counts every fault so) or at HZ samples a second when written NAME@HZ
(cpuprofile's cpu-clock). bench/app_cost.py runs one of these per metric, with that metric's probes:
the price of being attached where the metrics are, without any of their work.

--work: the least any tool does with an event instead of nothing: each program counts it (one per-CPU
array slot per program), and on a probe written TYPE:NAME+clock also reads the clock and keeps it, as
a tool that times what happens between two events must at each (a latency, a run, a block). Less than
any metric does (no per-thread state, no histogram): app_cost's "floor + least work" row, a bound no
tool of the ten's jobs can go under."""

import os
import re
import sys

from bcc import BPF
from hold import hold

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bcctool import PERF_EVENT_NAMES, ksymstub  # noqa: E402

PERF_EVENTS = {name: key for key, name in PERF_EVENT_NAMES.items()}


def fail(text: str) -> None:
    print(f"probe_floor: {text}", file=sys.stderr)
    sys.exit(2)


def parse(arg: str) -> tuple[str, str, bool]:
    """(type, name, timed) of TYPE:NAME[+clock]."""
    arg, timed = (arg[: -len("+clock")], True) if arg.endswith("+clock") else (arg, False)
    kind, _, name = arg.partition(":")
    if kind not in ("tracepoint", "raw_tracepoint", "perf_event") or not name:
        fail(f"not TYPE:NAME with TYPE tracepoint, raw_tracepoint or perf_event: {arg!r}")
    return kind, name, timed


def program(fn: str, slot: int, work: bool, timed: bool) -> str:
    """The C of one program: empty, or counting its event (and with timed, reading the clock)."""
    if not work:
        return f"int {fn}(void *ctx) {{ return 0; }}\n"
    clock = " w->ts = bpf_ktime_get_ns();" if timed else ""
    return (f"int {fn}(void *ctx) {{ int k = {slot}; struct work_t *w = work.lookup(&k); "
            f"if (w) {{ w->events++;{clock} }} return 0; }}\n")


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
    if not work and any(timed for _, _, timed in probes):
        fail("a probe written +clock needs --work")
    # program names say which probe each is on (bpftool and bpf_stats show the first 15 characters)
    names = [f"e{i}_{re.sub(r'[^A-Za-z0-9]', '_', name.split(':')[-1])}" for i, (_, name, _) in enumerate(probes)]
    text = (f"struct work_t {{ u64 events; u64 ts; }};\nBPF_PERCPU_ARRAY(work, struct work_t, {len(probes)});\n"
            if work else "")
    text += "".join(program(fn, i, work, timed) for i, (fn, (_, _, timed)) in enumerate(zip(names, probes, strict=True)))
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
