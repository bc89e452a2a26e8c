#!/usr/bin/python3
"""cpuprofile: which code burns the CPU — sampled on-CPU stacks, kernel and user, per process.

A CPU-clock perf event fires HZ times a second on every CPU (or on the threads of -p/--tid) and sends
the interrupted task's stacks to a ring buffer. Each interval prints the top functions per process
(self and total samples) and, with --json, every distinct stack with its count; --folded prints the
whole run as folded stacks. Rows and stacks carry the sampled task's cgroup; --group-by cgroup ranks
the top functions per cgroup instead of per process.
"""

import argparse
import ctypes
import json
import os
import struct
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

import bcctool
from bcctool import Tool, taskinfo
from bcctool.maps import value_of

EXAMPLES = [
    ("cpuprofile", "top functions of every process, every second, at 49 Hz"),
    ("cpuprofile -F 999 -p 185 5", "process 185 at 999 Hz, 5-second intervals"),
    ("cpuprofile -U --tid 186", "thread 186, user stacks only"),
    ("cpuprofile --user-stacks fp", "user stacks by frame pointers (no stack copy)"),
    ("cpuprofile --user-stacks kernel", "user stacks unwound with CFI in the kernel, counted there per interval"),
    ("cpuprofile --python-frames off", "python processes: the interpreter's C frames only"),
    ("cpuprofile --folded --duration 30 > out.folded", "30 s of folded stacks for flamegraph.pl / speedscope"),
    ("cpuprofile --json", "NDJSON: summary, top-function rows and every stack, each interval"),
    ("cpuprofile --cgroup lab/job-7 --group-by cgroup", "one cgroup v2 group and those below, top functions per group"),
]
PAGE = 4096


def whole_pages(size: int) -> int:
    """--stack-size: whole pages (the copy is taken page by page); its type and bounds are the registry's."""
    if size % PAGE:
        raise argparse.ArgumentTypeError(f"a multiple of 4096: {size}")
    return size


tool = Tool("cpuprofile", __doc__.strip().splitlines()[0], EXAMPLES, checks={"stack_size": whole_pages})
args = tool.parse_args()
if args.user_only and args.kernel_only:
    tool.parser.error("-U/--user-only and -K/--kernel-only exclude each other")
# --folded by frame pointers is BCC profile's job, a whole run printed at the end: counted as profile
# counts, in a kernel map by stack id, so no sample reaches this process while the run lasts
counted = args.folded and not tool.json and (args.kernel_only or args.user_stacks == "fp")
if counted and args.count is None and not (args.pid or args.tid):
    # nothing is printed between intervals: the loop wakes once a minute (a stop signal or the
    # --duration ends it at once; a -p/--tid target's exit is looked for every interval)
    args.interval = max(args.interval, 60.0)

# --- probes ----------------------------------------------------------------------------------------
POLL_S = 0.1                         # the longest the user side leaves the ring buffer unread
DEPTH = 127                          # frames of one kernel walk (bpf/cpuprofile.c STACK_DEPTH)
HEADER = struct.Struct("<II16siiQ")  # struct sample_t: tgid, tid, comm, kdepth, udepth, cgid
KIPS = HEADER.size                   # then kips[127]; then uips[127] (fp) or struct ustack_t (dwarf)
USER = KIPS + DEPTH * 8
USTACK_HEAD = 40                     # bpf/ustack.h: ip, sp, bp, base, size, err
USTACK_SIZE = struct.Struct("<I")    # its size field
NO_STACK = -14                       # -EFAULT from a stack walk: no stack of that kind (not a loss)
PY_FRAMES = 64                       # Python frames taken per sample (bpf/pystack.h)
PYSTACK_HEAD = 8                     # struct pystack_t: depth, err, then 16 bytes a frame
PY_NOT_PYTHON = 1                    # its err for a process not registered in py_procs
FORK_ARRAY_MAX = 1 << 20             # pid_max up to which fork parents are kept in an array (4 MiB)


def ring_pages(sample_bytes: int) -> int:
    """Ring buffer pages for 0.25 s of samples from every CPU, over twice the longest the ring is left
    unread (a power of two, >= 16)."""
    need = args.frequency * (os.cpu_count() or 1) * 0.25 * sample_bytes / PAGE
    pages = 16
    while pages < need:
        pages *= 2
    return pages


def load(mode: str) -> Any:   # BCC's BPF object
    cflags = tool.filter_cflags(filter_pid=args.pid, filter_tid=args.tid)
    cflags += ["-DINCLUDE_IDLE"] * args.include_idle + ["-DUSER_ONLY"] * args.user_only
    cflags += ["-DKERNEL_ONLY"] * args.kernel_only
    pid_max = taskinfo.pid_max()
    cflags += [f"-DFORK_PIDS={pid_max}"] * (0 < pid_max <= FORK_ARRAY_MAX)
    if counted:
        return tool.load([*cflags, "-DCOUNT_IN_KERNEL"])
    if mode == "kernel" and not args.kernel_only:
        # the walk with stack-delta tables and the counts per interval in BPF; where the kernel refuses
        # its helpers, the frame-pointer walk (said in the meta record)
        # rows for every file on a sampled stack: 8 MiB (a million rows) for one process, 16 MiB for the
        # whole machine (libLLVM alone has a million, should a BCC tool's compile be sampled)
        rows = (1 << 20) if args.pid or args.tid else (1 << 21)
        cflags += ["-DUSER_KERNEL", f"-DKU_ROWS={rows}"]
        cflags += ["-DPYTHON_FRAMES", f"-DPY_FRAMES={PY_FRAMES}"] * (args.python_frames == "on")
        return tool.load(cflags, variants=[[], ["-UUSER_KERNEL", f"-DRING_PAGES={ring_pages(USER + DEPTH * 8)}"]])
    if mode == "dwarf" and not args.kernel_only:
        pages = args.stack_size // PAGE
        python = args.python_frames == "on"
        py_bytes = PYSTACK_HEAD + 16 * PY_FRAMES if python else 0
        cflags += ["-DUSER_DWARF", f"-DUSTACK_PAGES={pages}",
                   f"-DRING_PAGES={ring_pages(USER + USTACK_HEAD + (pages + 1) * PAGE + py_bytes)}"]
        cflags += ["-DPYTHON_FRAMES", f"-DPY_FRAMES={PY_FRAMES}"] * python
    else:
        cflags += [f"-DRING_PAGES={ring_pages(USER + DEPTH * 8)}"]
    # dwarf needs bpf_get_current_task_btf() and bpf_task_pt_regs(): where the kernel refuses them,
    # the frame-pointer walk, said in the meta record
    return tool.load(cflags, variants=[[], ["-UUSER_DWARF"]] if "-DUSER_DWARF" in cflags else None)


b = load(args.user_stacks)


from bcctool.kstacks import LOST as LOST_STACK  # noqa: E402 - a stack key with no stack in the map
from bcctool.kstacks import KernelCounts, StoredStacks  # noqa: E402
from bcctool.kunwind import KernelTables  # noqa: E402
from bcctool.procnames import ProcessNames  # noqa: E402
from bcctool.pyframes import PythonFrames, is_python_exe  # noqa: E402
from bcctool.ringreader import RingReader  # noqa: E402
from bcctool.stacknames import StackNames  # noqa: E402
from bcctool.symbols import Symbolizer  # noqa: E402 - pyelftools; --help works without it
from bcctool.unwind import Unwinder, default_cache_dir  # noqa: E402

sym = Symbolizer(lines=args.source_lines)
names = StackNames(sym)   # each distinct stack named once, its frames kept
process_names = ProcessNames()   # "python3 (server.py)" where processes share a comm
unwinder = Unwinder(cache_dir=default_cache_dir())
dwarf = args.user_stacks == "dwarf" and not args.kernel_only and not tool.variant
# kernel: user stacks unwound in BPF with the tables KernelTables loads, samples counted there per interval
in_kernel = args.user_stacks == "kernel" and not args.kernel_only and not tool.variant
tables = KernelTables(b, cache_dir=unwinder.cache_dir, say=tool.warn) if in_kernel else None
# counted per epoch, begun before the perf event is attached: no sample ended before the first interval
kcounts = KernelCounts(b, tool.begin_epochs()) if in_kernel else None
# python processes' own frames (bpf/pystack.h), in dwarf and kernel modes: they are merged where the
# unwound native stack runs _PyEval_EvalFrameDefault
python = PythonFrames() if (dwarf or in_kernel) and args.python_frames == "on" else None
PY = USER + USTACK_HEAD + (args.stack_size // PAGE + 1) * PAGE   # struct pystack_t's offset in a sample
BACKLOG_BYTES = 64 << 20         # dwarf: stack copies waiting to be unwound, at most
lock = threading.Lock()          # pending and backlog are filled on the reader thread
pending: dict[tuple, int] = {}   # (tgid, comm, cgroup id, kernel addrs, user addrs) -> samples, this interval
backlog: list[tuple] = []        # dwarf: (tgid, comm, cgroup id, kernel addrs, the ustack_t record, python frames)
backlog_bytes = 0
walk_errors = {"kernel_stack": 0, "user_stack": 0, "unwind_backlog": 0}
seen: set[int] = set()           # processes whose maps are snapshot (at their first sample's interval)


def on_record(raw: bytes) -> None:
    """On the reader thread, per sample: keep its raw addresses (named once per distinct stack when
    the interval ends), or in dwarf mode its stack copy (unwound then)."""
    global backlog_bytes
    tgid, _tid, comm, kdepth, udepth, cgid = HEADER.unpack_from(raw)
    kernel = raw[KIPS: KIPS + 8 * kdepth] if kdepth > 0 else kdepth
    with lock:
        if dwarf and udepth >= 0:
            size = USTACK_SIZE.unpack_from(raw, USER + USTACK_HEAD - 8)[0]
            if backlog_bytes + size > BACKLOG_BYTES:
                walk_errors["unwind_backlog"] += 1
                return
            py = None
            if python is not None:
                depth, err = HEADER_PY.unpack_from(raw, PY)
                if err != PY_NOT_PYTHON:
                    py = raw[PY: PY + PYSTACK_HEAD + 16 * min(depth, PY_FRAMES)]
            backlog.append((tgid, comm, cgid, kernel, raw[USER: USER + USTACK_HEAD + size], py))
            backlog_bytes += size
            return
        user = raw[USER: USER + 8 * udepth] if udepth > 0 else udepth
        key = (tgid, comm, cgid, kernel, user, None)
        pending[key] = pending.get(key, 0) + 1


HEADER_PY = struct.Struct("<Ii")
def on_new_proc(raw: bytes) -> None:
    """Counted, on the reader thread (the main thread names nothing until the end): a process's
    first sample, its maps read now, while it runs."""
    meet_counted(struct.unpack_from("<I", raw)[0])


if counted:
    reader = RingReader(b["new_procs"], on_new_proc, poll_ms=1000)   # it wakes the reader: rare events
elif in_kernel:
    # processes met for the first time, or with a pc in no mapping: their mappings loaded on the reader
    # thread (a file's rows take up to half a second the first time), while BPF walks them by frame pointers
    reader = RingReader(b["ku_events"], tables.on_event, poll_ms=1000)
    reader.start()
else:
    reader = RingReader(b["samples"], on_record, poll_ms=int(POLL_S * 1000))   # every 0.1 s: the ring holds 0.25 s
    reader.start()


def attach_sampling() -> None:
    """All CPUs: one CPU-clock event per CPU, which samples whatever runs there. A process or thread:
    one event per thread, bound to it and inherited by the threads it creates (perf record -p does
    the same): its timer runs on the task's own CPU time, so the samples count its CPU time exactly,
    where a per-CPU timer shared with other busy tasks over- or under-counts it by several per cent."""
    from bcc import BPF, Perf, PerfSWConfig, PerfType  # noqa: PLC0415 - importable once load() succeeded
    from bcc.libbcc import lib  # noqa: PLC0415

    event = (PerfType.SOFTWARE, PerfSWConfig.CPU_CLOCK)
    if not (args.pid or args.tid):
        b.attach_perf_event(ev_type=event[0], ev_config=event[1], fn_name="on_sample", sample_freq=args.frequency)
        return
    fn = b.load_func(b"on_sample", BPF.PERF_EVENT)
    attr = Perf.perf_event_attr()
    attr.type, attr.config = event
    attr.sample_freq, attr.freq, attr.inherit = args.frequency, 1, 1
    fds = b.open_perf_events.setdefault(event, {})   # BCC's cleanup() closes what is listed here
    for tid in [args.tid] if args.tid else taskinfo.thread_ids(args.pid):
        fd = lib.bpf_attach_perf_event_raw(fn.fd, ctypes.byref(attr), tid, -1, -1, 0)
        if fd >= 0:
            fds[tid] = fd
    if not fds:
        raise RuntimeError(f"no thread of {args.tid or args.pid} could be sampled (it exited)")


def watch_python(tgid: int) -> None:
    """A CPython process of a known version goes into py_procs: BPF takes its frames from now on."""
    value = python.register(tgid, sym.maps(tgid))
    if value is not None:
        procs = b["py_procs"]
        try:
            procs[procs.Key(tgid)] = procs.Leaf.from_buffer_copy(value)
        except Exception:  # noqa: BLE001 - BCC raises bare Exception: the map is full (1,024 processes)
            python.forget(tgid)


def forget_python(tgid: int) -> None:
    if python is not None and tgid in python.processes:
        python.forget(tgid)
        try:
            del b["py_procs"][b["py_procs"].Key(tgid)]
        except KeyError:
            pass


if python is not None:
    # the python processes running now, before the first sample (the others at their first interval)
    running = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    for tgid in [args.pid] if args.pid else [taskinfo.tgid_of(args.tid)] if args.tid else running:
        if tgid and (args.pid or args.tid or is_python_exe(tgid)):
            seen.add(tgid)
            watch_python(tgid)
target = args.pid or (taskinfo.tgid_of(args.tid) if args.tid else 0)
if tables is not None and target:
    tables.meet(target, rows=True)   # its tables before its first sample: no frame walked by frame pointers
try:
    attach_sampling()
except Exception as exc:  # noqa: BLE001 - BCC raises bare Exception when the event cannot be opened
    tool.die(f"could not attach the cpu-clock perf event: {str(exc).splitlines()[0]}")
if args.pid:
    seen.add(args.pid)
    sym.snapshot(args.pid)
elif args.tid and taskinfo.tgid_of(args.tid):
    seen.add(taskinfo.tgid_of(args.tid))
    sym.snapshot(taskinfo.tgid_of(args.tid))
user_stacks = "none" if args.kernel_only else ("dwarf" if dwarf else "kernel" if in_kernel else "fp")
note = "bpf_task_pt_regs() refused: frame pointers instead" if args.user_stacks != "fp" and tool.variant else ""
_ = sym.kernel_symbols   # /proc/kallsyms read now (about a second), not in the first interval
tool.meta(frequency_hz=args.frequency, cpus=os.cpu_count(), user_stacks=user_stacks, group_by=args.group_by,
          stack_size=args.stack_size if dwarf else 0, python_frames="on" if python is not None else "off",
          **({"note": note} if note else {}))
started = f"Sampling on-CPU stacks at {args.frequency} Hz ({user_stacks} user stacks)... Hit Ctrl-C to end."
if not args.folded:
    tool.say(started)
elif not tool.json:
    print(started + (" Counted in the kernel." if counted else ""), file=sys.stderr, flush=True)   # stdout: the stacks


# after a stop signal, the last interval is named for this long at most (the app waits on a stop); a
# counted run names everything then, as profile does
STOP_BUDGET_S = 30.0 if counted else 1.0
unnamed = 0           # samples of this interval left as addresses (the stop's budget ran out)
alive: set[int] = set()   # the processes listed once an interval's samples were taken


def hurried() -> bool:
    """True once a stop has waited STOP_BUDGET_S for the last interval: name nothing new (a large
    object's first symbols or CFI take seconds), print addresses."""
    global stop_seen
    if not tool.stopping:
        return False
    if not stop_seen:
        stop_seen = time.monotonic()
    return time.monotonic() - stop_seen > STOP_BUDGET_S


def address(addr: int, kind: str) -> tuple:
    return (f"0x{addr:x}", "", kind)


LOST = {"kernel": ("[lost]", "", "kernel"), "user": ("[lost]", "", "user")}


def meet_counted(tgid: int) -> None:
    """Counted: a process sampled for the first time (or the parent of a fork child sampled for the
    first time), its maps read. One said again has exec'd (or left the BPF side's LRU): read again."""
    if tgid in seen:
        sym.forget(tgid)
        seen.discard(tgid)
    meet([tgid])


def counted_stacks() -> dict[tuple, int]:
    """Counted: the whole run's samples from the kernel's map, named (processes gone since their maps
    were read keep them; one gone before, forked and never exec'd, takes its parent's)."""
    reader.stop()
    stored = StoredStacks(b["stacks"])

    def stack(h: int) -> int | bytes:
        """A key's stack as named() takes it: its addresses, the walk's error, or none."""
        if not h:
            return NO_STACK
        got = stored.get(h)
        if got is None:
            return LOST_STACK   # not in the map: lost
        return got[1] if got[1] < 0 else stored.addresses(h)   # a failed walk: its error
    children = {} if args.kernel_only else {k.value: v.value for k, v in b["children"].items()}
    out: dict[tuple, int] = {}
    for key, n in sorted(b["counts"].items(), key=lambda kv: kv[0].tgid):
        kernel, user = stack(key.kstack), stack(key.ustack)
        if key.tgid in children and key.tgid not in seen:
            sym.inherit(key.tgid, children[key.tgid])   # at its turn: the symbolizer keeps so many
        k = (key.tgid, bytes(key.comm), key.cgid, kernel, user, None)
        for named_key, m in named({k: n.value}).items():
            out[named_key] = out.get(named_key, 0) + m
    return out


def take_interval() -> dict[tuple, int]:
    """The samples since the last call, named: {(tgid, comm, cgroup id, frames root first): samples}, each frame a
    (name, module, kind) tuple; a walk that failed is one "[lost]" frame."""
    global pending, backlog, backlog_bytes, alive
    if kcounts is not None:   # counted in the kernel: the interval's counts, each new stack read once
        taken = kcounts.take()
        alive = taskinfo.processes()   # listed after the take: a process sampled and not listed is gone
        meet({k[0] for k in taken}, alive)
        return named(taken)
    reader.sync()
    with lock:
        taken, pending = pending, {}
        copies, backlog, backlog_bytes = backlog, [], 0
    alive = taskinfo.processes()
    meet({k[0] for k in taken} | {c[0] for c in copies}, alive)
    for tgid, comm, cgid, kernel, record, py in copies:
        if hurried():
            pcs = [struct.unpack_from("<Q", record)[0]]   # the ip only
        else:
            pcs = unwinder.unwind_ustack(sym.maps(tgid) if tgid else None, record).pcs
        key = (tgid, comm, cgid, kernel, tuple(pcs) if pcs else NO_STACK, py)
        taken[key] = taken.get(key, 0) + 1
    return named(taken)


def counted_lost() -> None:
    """Counted: samples the kernel's maps had no room for, said as lost."""
    for source in ("counts_full", "stacks_full", "children_full"):
        tool.set_lost_total(source, sum(b[source][b[source].Key(0)]))


def meet(tgids: Iterable[int], alive: set[int] | None = None) -> None:
    """Each process's maps read at its first sample; one gone before (not in `alive`, when the caller
    listed the processes: no /proc read tried), if it was forked and never exec'd (BPF's `forked`), takes
    its parent's (bcctool.symbols); the parents' snapshots are forgotten once they are gone."""
    for tgid in tgids:
        if tgid and tgid not in seen:
            seen.add(tgid)
            gone = alive is not None and tgid not in alive
            if (gone or sym.snapshot(tgid) is None) and not args.kernel_only:
                seen.update(sym.adopt(tgid, lambda pid: value_of(b["forked"], pid)))
            if python is not None and not gone:
                watch_python(tgid)
        elif python is not None and python.retry(tgid):
            watch_python(tgid)   # a python whose runtime was not up yet


def frames_of(tgid: int, kernel: Any, user: Any, py: Any, quick: bool, n: int) -> list[tuple]:
    """A sample's frames, root first: user (with its python frames), then kernel; addresses only when
    `quick`; a walk that failed is one "[lost]" frame."""
    frames: list[tuple] = []
    if isinstance(user, (bytes, tuple)):
        addrs = user if isinstance(user, tuple) else struct.unpack(f"<{len(user) // 8}Q", user)
        named = [address(a, "user") for a in addrs] if quick else names.user_frames(tgid, addrs)
        if py and not quick:
            named = python.merge(tgid, named, py, n)   # each eval loop's Python frames above it
        frames += reversed(named)
    elif py and not quick:
        frames += reversed(python.merge(tgid, [], py, n))
    elif user != NO_STACK and user != 0:
        frames.append(LOST["user"])
    if isinstance(kernel, bytes) and quick:
        frames += [address(a, "kernel") for a in reversed(struct.unpack(f"<{len(kernel) // 8}Q", kernel))]
    elif isinstance(kernel, bytes):
        frames += names.kernel_frames(kernel)
    elif kernel != NO_STACK and kernel != 0:
        frames.append(LOST["kernel"])
    return frames or [("[no stack]", "", "user")]


def named(taken: dict[tuple, int]) -> dict[tuple, int]:
    """{(tgid, comm, cgroup id, kernel addresses, user addresses, python frames): samples} named:
    {(tgid, comm, cgroup id, frames root first): samples}. A stack is its addresses as bytes (the
    sample's), a tuple (unwound) or the walk's error; a walk that failed is one "[lost]" frame."""
    out: dict[tuple, int] = {}
    global unnamed
    for (tgid, comm, cgid, kernel, user, py), n in taken.items():
        quick = hurried()
        unnamed += n if quick else 0
        if kernel.__class__ is int or user.__class__ is int:   # a walk's error, or no stack of that kind
            for source, depth in (("kernel_stack", kernel), ("user_stack", user)):
                if isinstance(depth, int) and depth < 0 and depth != NO_STACK:
                    walk_errors[source] += n
        # the same stack interval after interval is named once; a python process's frames are read live
        memo = None if quick or py else names.stack_key(tgid, kernel, user)
        stack = names.known(memo) if memo else None
        if stack is None:
            stack = names.keep(memo, frames_of(tgid, kernel, user, py, quick, n))
        key = (tgid, taskinfo.comm_text(comm), cgid, stack)
        out[key] = out.get(key, 0) + n
    return out


def top_functions(stacks: dict[tuple, int]) -> list[dict]:
    """Per process (per cgroup with --group-by cgroup), most samples first: its top functions by self
    samples, with total samples (the samples whose stack holds the function anywhere, each sample
    once). A process sampled in two cgroups (moved while running) is a row set in each."""
    by_cgroup = args.group_by == "cgroup"
    groups: dict[tuple, dict] = {}
    for (tgid, comm, cgid, stack), n in stacks.items():
        g = groups.setdefault((cgid,) if by_cgroup else (tgid, cgid),
                              {"comm": comm, "samples": 0, "stacks": [], "self": {}, "total": {}, "pids": set()})
        g["samples"] += n
        g["pids"].add(tgid)
        g["stacks"].append((stack, n))
    rows = []
    ranked = sorted(groups.items(), key=lambda kv: kv[1]["samples"], reverse=True)
    for key, g in ranked[: args.processes]:
        for stack, n in g["stacks"]:   # the functions of the groups shown only (a fork child's are not)
            g["self"][stack[-1]] = g["self"].get(stack[-1], 0) + n
            for fn in stack.distinct:
                g["total"][fn] = g["total"].get(fn, 0) + n
        who = ({**tool.cgroup_fields(key[0]), "processes": len(g["pids"]), "cgroup_samples": g["samples"]}
               if by_cgroup else
               {"pid": key[0], "comm": g["comm"], **tool.cgroup_fields(key[1]), "process_samples": g["samples"]})
        best = sorted(g["total"], key=lambda fn: (g["self"].get(fn, 0), g["total"][fn]), reverse=True)
        for rank, fn in enumerate(best[: args.top], 1):
            own, total = g["self"].get(fn, 0), g["total"][fn]
            rows.append({**who, "rank": rank, "function": fn[0], "module": fn[1], "frame_kind": fn[2],
                         "self_samples": own, "self_pct": round(100.0 * own / g["samples"], 2),
                         "total_samples": total, "total_pct": round(100.0 * total / g["samples"], 2)})
    return rows


def folded_name(frame: tuple) -> str:
    name = frame[0].replace(";", ":")   # ';' separates frames
    return name + "_[k]" if frame[2] == "kernel" else name


# the table's columns: the registry's labels and units (registry/entries/cpuprofile.py)
COLUMNS = tool.fields(*(("cgroup", "processes") if args.group_by == "cgroup" else ("pid", "comm")), "self_samples",
                      "self_pct", "total_samples", "total_pct", "function")


def print_tables(summary: dict, rows: list[dict]) -> None:
    print(f"\n[{time.strftime('%H:%M:%S')}] {summary['samples']:,} samples, {summary['processes']:,} processes"
          + (f" in {summary['cgroups']:,} cgroups" if args.group_by == "cgroup" else "")
          + (f", {summary['lost']:,} lost" if summary["lost"] else ""))
    shown = []
    for r in rows:
        # a python frame's name carries its file and line already: "outer (prog.py:12)"
        where = f" [{r['module']}]" if r["module"] and r["frame_kind"] != "python" else (
            " [k]" if r["frame_kind"] == "kernel" else "")
        shown.append({**r, "cgroup": r.get("cgroup") or str(r.get("cgroup_id")), "function": r["function"] + where})
    print(bcctool.table(COLUMNS, shown))


def fold(stacks: dict[tuple, int]) -> None:
    """Add named stacks to the whole run's folded lines."""
    for (_, comm, cgid, stack), n in stacks.items():
        # the root frame: the command, or with --group-by cgroup the cgroup's path (a flame graph per group)
        root = (tool.cgroup_fields(cgid)["cgroup"] or str(cgid)) if args.group_by == "cgroup" else comm
        line = ";".join([root.replace(";", ":"), *map(folded_name, stack)])
        whole_run[line] = whole_run.get(line, 0) + n


# --- loop ------------------------------------------------------------------------------------------
def target_gone() -> bool:
    if args.pid:
        return not bcctool.TARGET_CHECKS["process"](args.pid)
    return bool(args.tid) and not bcctool.TARGET_CHECKS["thread"](args.tid)


whole_run: dict[str, int] = {}
stop_seen = 0.0
lost_seen = 0
unwound_seen: dict[str, int] = {}
python_seen: dict[str, int] = {}
failed_seen: dict[str, int] = {}
frames_seen = [0, 0]   # kernel: frames walked by frame pointers, for an expression row and for rows not loaded yet
# per-CPU counters of samples the kernel dropped: the ring was full; counted in the kernel, the counts or
# the stacks map was full, or the kernel's own stack walk failed
LOST_MAPS = ("counts_full", "stacks_full", "kernel_walk") if in_kernel else ("ring_full",)
last = time.monotonic()
if counted:
    reader.start()   # now that what it calls is defined; it alone uses the symbolizer until the end


for _interval in tool.intervals():
    if counted:   # the samples stay in the kernel until the end (new processes are met on the reader thread)
        counted_lost()
        continue
    now = time.monotonic()
    elapsed, last = max(now - last, 1e-9), now
    unnamed = 0
    stacks = take_interval()
    if target_gone():   # it ended in the interval: what it ran after the take above is in the ring too
        for key, n in take_interval().items():
            stacks[key] = stacks.get(key, 0) + n
    stacks = process_names.renamed(stacks, skip=tool.is_own, alive=alive)
    with lock:
        lost_totals = {source: sum(b[source][b[source].Key(0)]) for source in LOST_MAPS} | walk_errors
    for source, total in lost_totals.items():
        tool.set_lost_total(source, total)
    lost_total = sum(lost_totals.values())
    samples = sum(stacks.values())
    summary = {"samples": samples, "processes": len({k[0] for k in stacks}), "cgroups": len({k[2] for k in stacks}),
               "lost": lost_total - lost_seen,
               "interval_s": round(elapsed, 3), "frequency_hz": args.frequency,
               "perf_map_lines_skipped": sym.stats()["perf_map_garbage"], "unnamed": unnamed}
    if dwarf:
        # every user stack's unwinding outcome: complete (reached the outermost frame), truncated
        # (the copy or the frame limit ended first), failed (no CFI and no frame pointer, no mapping)
        summary["unwound"] = {k: v - unwound_seen.get(k, 0) for k, v in unwinder.outcomes.items()}
        unwound_seen = dict(unwinder.outcomes)
    if in_kernel:
        # the same outcomes of the kernel's walks, and frame_pointers: a process's samples before its
        # mappings were loaded (its first interval); frames walked by frame pointers where the CFI needs
        # a DWARF expression, and where the file's rows were not loaded yet (its first samples); what the
        # tables and the stored stacks hold
        summary["unwound"] = {k: v - unwound_seen.get(k, 0) for k, v in kcounts.outcomes.items()}
        unwound_seen = dict(kcounts.outcomes)
        failed = {reason: n - failed_seen.get(reason, 0) for (outcome, reason), n in kcounts.reasons.items()
                  if outcome == "failed" and n > failed_seen.get(reason, 0)}
        failed_seen = {reason: n for (outcome, reason), n in kcounts.reasons.items() if outcome == "failed"}
        frames = [sum(b["ku_counters"][b["ku_counters"].Key(i)]) for i in (0, 2)]
        summary["kernel_unwind"] = {"expression_frames": frames[0] - frames_seen[0],
                                    "rows_pending_frames": frames[1] - frames_seen[1], "failed": failed,
                                    **tables.stats(), **kcounts.stats()}
        frames_seen = frames
    if python is not None:
        # python processes' frame walks: complete (the chain's end), truncated (PY_FRAMES), no_thread (a
        # thread with no Python thread state), unreadable; unmatched: runs of frames and eval loops differ
        summary["python"] = {k: v - python_seen.get(k, 0) for k, v in python.outcomes.items()}
        python_seen = dict(python.outcomes)
    lost_seen = lost_total
    rows = top_functions(stacks)
    if args.folded:
        fold(stacks)
    if tool.json:
        tool.emit("summary", **summary)
        for r in rows:
            tool.emit("row", **r)
        who_json: dict[tuple, str] = {}   # (pid, comm, cgroup id) -> those fields in JSON, once an interval
        encoded = []
        for (tgid, comm, cgid, stack), n in sorted(stacks.items(), key=lambda kv: kv[1], reverse=True):
            who = who_json.get((tgid, comm, cgid))
            if who is None:
                who = who_json[(tgid, comm, cgid)] = f'"pid":{tgid},"comm":{json.dumps(comm)},{tool.cgroup_names.fields_json(cgid)}'
            encoded.append(f'{who},"count":{n},{names.stack_json(stack)}')
        tool.emit_encoded("stack", *encoded)
    elif not args.folded:
        print_tables(summary, rows)
    # processes gone: their samples are all named now; drop their maps (their addresses may be reused)
    for tgid in seen - alive:   # listed by take_interval()
        seen.discard(tgid)
        sym.forget(tgid)
        forget_python(tgid)
    if tables is not None:
        tables.forget_gone(alive)

if counted:
    fold(process_names.renamed(counted_stacks(), skip=tool.is_own))
    counted_lost()   # the loop read them once an interval: a run shorter than one never did
    for source, total in walk_errors.items():
        tool.set_lost_total(source, total)
    tool.report_lost()
if tables is not None:
    tables.close()   # the processes met while stopping would be loaded for nothing
reader.stop()
if args.folded and not tool.json:
    for line, n in sorted(whole_run.items(), key=lambda kv: kv[1], reverse=True):
        print(f"{line} {n}")
tool.finish()
