#!/usr/bin/python3
"""offcpu: where threads block — off-CPU time per thread and by kernel and user stack.

Traces sched_switch: a thread switched out while not runnable is blocked from then until it is switched
back in; its kernel and user stacks at the switch say where. Each interval is charged only the blocked
time inside it (a block longer than an interval is split across the intervals it spans). It prints the threads by blocked
time (count, min/avg/max, share) and the top stacks, symbolized, or with --folded, folded stacks.
User stacks: by default every block's is walked with DWARF CFI in the kernel at its switch out (each
stack stored once, a thread blocking again from the same registers takes its last walk), a python's
with its Python frames; --user-stacks dwarf gives a block of --dwarf-min-us or more a user stack
unwound here from a copy (taken when its syscall returns), shorter ones the kernel's frame-pointer walk;
--user-stacks fp gives every block the frame-pointer walk. Stacks are taken for a thread's first block
after 10 ms without any and for one block in N (--stack-every, default 16) of the rest, at random: every
block is still timed and counted, and each thread's time is shared among its sampled stacks (weighted by
the chance each had of being taken). --stack-every 1 takes every block's. Under load N is paced: a CPU
whose blocks would take more than --stack-rate walks a second (default 500) draws one in 2N, 4N... there.
"""

import ctypes
import os
import struct
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the harness: bcctool/

import bcctool
from bcctool import Tool, epochs, kernelfeatures, taskinfo

EXAMPLES = [
    ("offcpu", "blocked threads and their top stacks, every second"),
    ("offcpu -p 185 5", "process 185 only, 5-second intervals"),
    ("offcpu --tid 186 --min-block-us 1000", "thread 186, blocks of 1 ms or more"),
    ("offcpu --folded 10 1 > out.folded", "10 s of folded stacks for flamegraph.pl / speedscope"),
    ("offcpu --stack-depth 20 --json", "stacks cut at 20 frames; NDJSON records for the app"),
    ("offcpu --cgroup lab/job-7 --group-by cgroup", "one cgroup v2 group and those below, a row per group"),
    ("offcpu --user-stacks fp", "frame-pointer user stacks only (no stack copies)"),
    ("offcpu --user-stacks dwarf", "long blocks' user stacks copied and unwound with CFI here"),
    ("offcpu --stack-every 1", "every block's stacks: about twice the BPF time a switch on a busy server"),
    ("offcpu --python-frames off", "python processes: the interpreter's C frames only"),
]

# --state: sched_switch prev_state bits (bpf/sched_state.h): S interruptible, D uninterruptible
STATE_BITS = {"interruptible": 0x1, "uninterruptible": 0x2}

tool = Tool("offcpu", __doc__.strip().splitlines()[0], EXAMPLES)   # arguments: registry/entries/offcpu.py
args = tool.parse_args()

# --- probes ----------------------------------------------------------------------------------------
cflags = tool.filter_cflags(filter_pid=args.pid, filter_tid=args.tid)
cflags += [f"-DMIN_BLOCK_NS={args.min_block_us * 1000}", f"-DSTACK_DEPTH={args.stack_depth}"]
cflags += ["-DPREEMPTED"] * args.preempted
cflags += [f"-DSTACK_EVERY={args.stack_every}"] * (args.stack_every > 1)
cflags += [f"-DSTACK_RATE={args.stack_rate}"] * (args.stack_every > 1 and args.stack_rate > 0)
if args.state != "all":
    cflags.append(f"-DSTATE_MASK={STATE_BITS[args.state]}")
dwarf_cflags = ["-DUSER_DWARF", f"-DDWARF_MIN_NS={args.dwarf_min_us * 1000}", f"-DUSTACK_PAGES={args.stack_size // 4096}"]
PY_FRAMES = 64   # Python frames taken per block (dwarf: per long block) (bpf/pystack.h)
python_cflags = ["-DPYTHON_FRAMES", f"-DPY_FRAMES={PY_FRAMES}"] * (args.python_frames == "on")
dwarf_cflags += python_cflags
# kernel: the rows of every file on a walked stack, 8 MiB (a million rows) for one process, 16 MiB for the
# whole machine (bcctool/kunwind.py)
kernel_cflags = ["-DUSER_KERNEL", f"-DKU_ROWS={(1 << 20) if args.pid or args.tid else (1 << 21)}", *python_cflags]
unwound_cflags = {"dwarf": dwarf_cflags, "kernel": kernel_cflags}.get(args.user_stacks)
# --stack-every: each thread's last block with stacks in its task storage, or an LRU where the kernel
# refuses it (as schparm and sysnest do)
storage = kernelfeatures.task_storage_variants() if args.stack_every > 1 else [[]]
b = tool.load(cflags, variants=[u + s for u in ([unwound_cflags, []] if unwound_cflags else [[]]) for s in storage])
blocked, stacks = b["blocked"], b["stacks"]
dwarf = "USER_DWARF" in tool.variant
in_kernel = "USER_KERNEL" in tool.variant


from bcctool.blockfigures import UNSAMPLED, merge, one_block, open_part, shared_among_sampled, weighted  # noqa: E402
from bcctool.kstacks import StoredStacks, Walked, WalkFigures, walks_line  # noqa: E402
from bcctool.kunwind import stop_tables, tracepoint_tables  # noqa: E402
from bcctool.maps import value_of  # noqa: E402
from bcctool.pace import largest_divisor  # noqa: E402
from bcctool.procmaps import ProcessMaps  # noqa: E402
from bcctool.procnames import ProcessNames  # noqa: E402
from bcctool.pyframes import KIND as PYTHON_KIND  # noqa: E402
from bcctool.pyframes import PYSTACK_HEAD, PythonFrames  # noqa: E402
from bcctool.symbols import UNKNOWN, Frame, Symbolizer  # noqa: E402 - pyelftools; --help works without it
from bcctool.unwind import USTACK_HEADER, Unwinder, default_cache_dir  # noqa: E402

USTACK_HEAD = USTACK_HEADER.size   # struct ustack_t before its stack bytes


class Symbols:
    """Frame names for stack ids, cached: kernel by address, user by (process, address).

    User addresses resolve through a snapshot of the process's maps (bcctool.symbols), taken for every
    process at start and for a new one when its first stack is read, so a process that exits keeps its
    names. A frame-pointer walk through code built without frame pointers follows garbage: the user
    stack is cut at its first address outside the process's executable mappings, and counted."""

    def __init__(self) -> None:
        self.sym = Symbolizer(lines=args.source_lines)
        self.kernel: dict[int, str] = {}   # kernel return addresses: as many as the kernel's code has
        self.cut = 0        # user stacks cut where the walk left mapped code
        self.seen: set[int] = set()
        # python processes' own frames in blocks' stacks (bpf/pystack.h): dwarf mode's long blocks, kernel
        # mode's every block
        self.python = PythonFrames() if (dwarf or in_kernel) and "PYTHON_FRAMES" in tool.variant else None

    def snapshot(self, pids: list[int]) -> None:
        for pid in pids:
            snap = self.sym.snapshot(pid)
            if snap is not None:
                self.seen.add(pid)
                self.watch_python(pid, snap)

    def watch_python(self, pid: int, snap: ProcessMaps | None) -> None:
        """A CPython process of a known version goes into py_procs: its long blocks carry its frames."""
        value = self.python.register(pid, snap) if self.python is not None else None
        if value is not None:
            procs = b["py_procs"]
            try:
                procs[procs.Key(pid)] = procs.Leaf.from_buffer_copy(value)
            except Exception:  # noqa: BLE001 - BCC raises bare Exception: the map is full (1,024 processes)
                self.python.forget(pid)

    def retry_python(self) -> None:
        """Python processes whose runtime was not up when they first blocked: once an interval."""
        for pid in [p for p in self.python.unready if self.python.retry(p)] if self.python is not None else []:
            self.watch_python(pid, self.sym.maps(pid))

    def frames(self, stack_id: int, tgid: int) -> list[str]:
        """Innermost first; [] for no stack (a kernel thread's user stack, a lost one)."""
        if stack_id < 0:
            return []
        try:
            leaf = stacks[stacks.Key(stack_id)]
        except KeyError:
            return ["[lost]"]
        addrs = []
        for addr in leaf.ip:
            if not addr:
                break
            addrs.append(addr)
        if tgid < 0:
            names = [self._kernel(a) for a in addrs]
            # the tracepoint's dispatcher, on the stack only while a second probe shares sched_switch
            # (ftrace's comm recording stays on it from the first bpf_trace_printk until reboot)
            while names and names[0].startswith("__traceiter_"):
                names.pop(0)
            return names
        if self.sym.maps(tgid) is None:
            return [UNKNOWN]       # gone before its maps could be read
        self.seen.add(tgid)
        return self._cut(addrs, tgid)

    def _cut(self, addrs: Any, tgid: int) -> list[str]:
        """A frame-pointer walk's addresses named up to the first outside the process's mappings."""
        names = []
        for addr in addrs:
            frame = self.sym.user(tgid, addr)   # memoized per process snapshot, bounded
            if frame.module == UNKNOWN:
                self.cut += 1
                break
            names.append(str(frame))
        return names

    def walked_frames(self, walked: Walked, tgid: int) -> list[str]:
        """kernel: a stack walked in BPF; a fork child gone before its maps were read is named from its
        parent's (it ran in the parent's address space), one walked by frame pointers (its process's
        mappings were not loaded yet) as far as it stays in mapped code."""
        if walked.pcs is None:
            return ["[lost]"]
        if self.sym.maps(tgid) is None:
            self.sym.adopt(tgid, lambda pid: value_of(b["forked"], pid))
        self.seen.add(tgid)
        if walked.by_frame_pointers:   # a process's first blocks: its Python frames are not merged
            return self._cut(walked.pcs, tgid)
        return self._with_python(tgid, self.sym.user_stack(tgid, list(walked.pcs)), walked.python)

    def dwarf_frames(self, pcs: tuple, tgid: int) -> list[str]:
        """An unwound user stack's frames, innermost first; a python process's block ends with its
        Python frames (bytes, a struct pystack_t)."""
        py = pcs[-1] if pcs and isinstance(pcs[-1], bytes) else None
        return self._with_python(tgid, self.sym.user_stack(tgid, list(pcs[:-1] if py is not None else pcs)), py)

    def _with_python(self, tgid: int, frames: list[Frame], py: bytes | None) -> list[str]:
        """Native frames named, with a python's Python frames merged above the eval loops that run them."""
        if py is None or self.python is None:
            return [str(f) for f in frames]
        merged = self.python.merge(tgid, [(f.name, f.module, "user") for f in frames], py, n=0)
        return [f[0] if f[2] == PYTHON_KIND else str(Frame(f[0], f[1])) for f in merged]

    def _kernel(self, addr: int) -> str:
        if addr not in self.kernel:
            self.kernel[addr] = self.sym.kernel(addr)
        return self.kernel[addr]

    def on_new_maps(self, ctx: object, data: object, size: int) -> int:
        """Ring buffer `new_maps`: a process blocked for the first time or exec'ed; read its maps now."""
        self.snapshot([ctypes.cast(data, ctypes.POINTER(ctypes.c_uint32)).contents.value])
        return 0

    def forget(self, alive: set[int]) -> None:
        """Drop what belongs to processes that have exited (their addresses may be reused)."""
        gone = self.seen - alive
        for tgid in gone:
            self.sym.forget(tgid)
            if self.python is not None and tgid in self.python.processes:
                self.python.forget(tgid)
                try:
                    del b["py_procs"][b["py_procs"].Key(tgid)]
                except KeyError:
                    pass
            try:
                del seen_map[seen_map.Key(tgid)]
            except KeyError:
                pass
        self.seen -= gone


def open_blocks(began_ns: int, now_ns: int) -> tuple[dict[tuple, dict[str, int]], set[tuple[int, int]]]:
    """The part since began_ns of every block still in progress at the cut now_ns (map `start`), keyed
    like read_blocks(); count 0: the block is counted in the interval in which it ends. With them, the
    (tid, start) of each: a block that ended after the cut and before this read left its part in
    `crossed` (blocks_crossed), charged there unless it is among these."""
    out, open_keys = {}, set()
    for key, st in bcctool.all_items(start_map):
        tid = getattr(key, "value", key)   # the batch op gives ints, items() c_uint
        if not st.ts or now_ns - st.ts < args.min_block_us * 1000 or st.ts >= now_ns:
            continue   # ts 0: a thread's entry between its blocks (bpf/offcpu.c, block_ended)
        open_keys.add((tid, st.ts))
        comm = taskinfo.comm_of(tid) or "[gone]"
        part = now_ns - max(st.ts, began_ns)
        merge(out.setdefault((st.tgid, tid, comm, st.kstack, user_key(st), st.cgid), {}),
              open_part(part, st.weight))
    return out, open_keys


def block_key(key: Any) -> tuple:   # BCC's struct key_t
    """A struct key_t as read_blocks() keys it."""
    return key.tgid, key.tid, key.comm.decode(errors="replace"), key.kstack, user_key(key), key.cgid


LOST_WALK = Walked(None, False)   # kernel: a walked stack gone from `ustacks` (not seen by this side in time)


def user_key(block: Any) -> int | Walked:   # BCC's struct start_t or key_t
    """A block's user stack as its records' key: kernel, the stack walked in BPF (read from `ustacks` the
    first time it is met, its hash kept in walked_used for this interval's retire); else, or where
    `ustacks` was full, the frame-pointer stack id."""
    h = getattr(block, "uhash", 0)
    if not h:
        return block.ustack
    walked_used.add(h)
    walked = stored.walked(h) or LOST_WALK
    py = getattr(block, "pyhash", 0)
    if not py:
        return walked
    walked_used.add(py)
    return walked._replace(python=stored.python(py))


def blocks_crossed(open_keys: set[tuple[int, int]]) -> dict[tuple, dict[str, int]]:
    """The parts before the cut of the blocks that ended between the cut and open_blocks()' read, but
    for those that read found still open (it charged them)."""
    out = {}
    for ck, c in epochs.take_all(crossed):
        if (ck.tid, ck.start) not in open_keys:
            merge(out.setdefault(block_key(c.key), {}),
                  open_part(c.part, c.key.weight))
    return out


def read_blocks(slot: int) -> dict[tuple, dict[str, int]]:
    """(tgid, tid, comm, kstack, ustack, cgroup id) -> total_ns, count, min_ns, max_ns of the blocks
    that ended in the finished epoch of this slot; read and cleared (nothing writes that slot now)."""
    out = {}
    for key, per_cpu in epochs.take_slot(blocked, slot):
        used = [v for v in per_cpu if v.count]
        if not used:
            continue
        total_ns, length_ns, count = (sum(v.total_ns for v in used), sum(v.length_ns for v in used),
                                      sum(v.count for v in used))
        merge(out.setdefault(block_key(key), {}), {
            "total_ns": total_ns, "length_ns": length_ns, "count": count,
            "min_ns": min(v.min_ns for v in used), "max_ns": max(v.max_ns for v in used),
            **weighted(total_ns, length_ns, count, key.weight)})
    return out


class DwarfBlocks:
    """Ring buffer `dwarf_blocks`: a long block and a copy of its user stack, unwound as it arrives
    (the maps snapshot is the one taken when the process first blocked). Kept by the epoch it ended in,
    keyed like read_blocks(), with the unwound pcs in place of the frame-pointer stack id."""

    # tgid, tid, kstack, ustack (fp), delta, charged, end, epoch, cgroup, comm, weight; then ustack_t
    HEADER = struct.Struct("<IIiiQQQQQ16sI4x")
    # parsing a new object's CFI costs up to seconds (once per build-id, then read from the disk cache);
    # past this much parsing in one interval, blocks keep their frame-pointer stack until the next
    PARSE_BUDGET_S = 1.0
    PENDING_WAIT_S = 0.02

    def __init__(self) -> None:
        self.unwinder = Unwinder(cache_dir=default_cache_dir())
        self.by_epoch: dict[int, dict[tuple, dict[str, int]]] = {}
        self.parse_mark = 0.0
        self.deferred = 0   # blocks left with their frame-pointer stack: the parse budget, or claimed at a cut

    def on_block(self, ctx: object, data: object, size: int) -> int:
        raw = ctypes.string_at(data, size)
        tgid, tid, kstack, ustack, delta, charged, end, epoch, cgid, comm, weight = self.HEADER.unpack_from(raw)
        if self.unwinder.parse_seconds - self.parse_mark > self.PARSE_BUDGET_S:
            self.deferred += 1
            user = ustack
        else:
            result = self.unwinder.unwind_ustack(symbols.sym.maps(tgid), memoryview(raw)[self.HEADER.size :])
            user = tuple(result.pcs) if result.pcs else ustack
            py = self.python_part(tgid, raw)
            if py is not None and result.pcs:
                user += (py,)
        key = (tgid, tid, taskinfo.comm_text(comm), kstack, user, cgid)
        merge(self.by_epoch.setdefault(epoch, {}).setdefault(key, {}), one_block(charged, delta, weight))
        return 0

    def python_part(self, tgid: int, raw: bytes) -> bytes | None:
        """The block's Python frames (struct pystack_t after the stack copy), its walk counted; None
        for a process not registered as python."""
        if symbols.python is None or tgid not in symbols.python.processes:
            return None
        at = self.HEADER.size + USTACK_HEAD + (args.stack_size // 4096 + 1) * 4096
        if len(raw) < at + PYSTACK_HEAD.size:
            return None
        depth, err = PYSTACK_HEAD.unpack_from(raw, at)
        if err == 1:   # PY_NOT_PYTHON: taken before the process was registered
            return None
        py = raw[at : at + PYSTACK_HEAD.size + 16 * min(depth, PY_FRAMES)]
        symbols.python.count(tgid, py)
        return py

    def claim_at(self, closing: int) -> dict[tuple, dict[str, int]]:
        """The blocks of epoch `closing` (or before) still waiting for their syscall to return: a moment
        for them to come through the ring with their stack, then what is left is taken from `pending`
        (each either sent by its program or taken here, never both) and counted with its frame-pointer
        stack. After this and a grace period, every block of the epoch is in the ring or returned."""
        pending = b["pending"]
        b.ring_buffer_consume()
        deadline = time.monotonic() + self.PENDING_WAIT_S
        while any(p.epoch <= closing for p in pending.values()) and time.monotonic() < deadline:
            b.ring_buffer_poll(timeout=2)
        late = [k for k, p in pending.items() if p.epoch <= closing]
        out = {}
        for _, p in epochs.claim(pending, late):
            self.deferred += 1
            merge(out.setdefault(block_key(p.key), {}), one_block(p.charged, p.delta, p.key.weight))
        return out

    def take(self, closing: int) -> dict[tuple, dict[str, int]]:
        """The blocks that ended in epoch `closing` or before, once it is finished."""
        b.ring_buffer_consume()
        taken: dict[tuple, dict[str, int]] = {}
        for epoch in [e for e in self.by_epoch if e <= closing]:
            for key, v in self.by_epoch.pop(epoch).items():
                merge(taken.setdefault(key, {}), v)
        self.parse_mark = self.unwinder.parse_seconds
        return taken

    def outcomes(self) -> dict[str, int]:
        return {k: self.unwinder.outcomes[k] for k in ("complete", "truncated", "failed")}


def timing(v: dict, grand_total: int) -> dict:
    """The table fields of one thread or stack: ms blocked in the interval, us for the lengths of the
    blocks that ended in it (0 when none did)."""
    return {"total_ms": round(v["total_ns"] / 1e6, 3), "count": v["count"],
            "min_us": round(v["min_ns"] / 1e3, 1),
            "avg_us": round(v["length_ns"] / v["count"] / 1e3, 1) if v["count"] else 0.0,
            "max_us": round(v["max_ns"] / 1e3, 1),
            "percentage": round(100.0 * v["total_ns"] / grand_total, 2) if grand_total else 0.0}


def stack_record(key: tuple, v: dict, grand_total: int) -> dict:
    tgid, tid, comm, kstack, ustack, cgid = key
    kernel = ["[not sampled]"] if kstack == UNSAMPLED else symbols.frames(kstack, -1)
    user = (symbols.walked_frames(ustack, tgid) if isinstance(ustack, Walked)
            else symbols.dwarf_frames(ustack, tgid) if isinstance(ustack, tuple) else symbols.frames(ustack, tgid))
    folded = ";".join([comm, *reversed(user), *reversed(kernel)])   # root first, as flame graphs read
    return {"pid": tgid, "tid": tid, "comm": comm, **tool.cgroup_fields(cgid), **timing(v, grand_total),
            "kernel_frames": kernel,
            "user_frames": user, "folded": folded}


# the table's columns: the registry's labels and units (registry/entries/offcpu.py)
COLUMNS = tool.fields(*(("pid", "tid", "comm") if args.group_by == "process" else ("cgroup", "threads")), "total_ms",
                      "count", "min_us", "avg_us", "max_us", "percentage")


def print_tables(summary: dict, threads: list[dict], top_stacks: list[dict]) -> None:
    print(f"\n[{time.strftime('%H:%M:%S')}] off-CPU {bcctool.quantity(summary['total_time_ns'], 'ns')} in "
          f"{summary['total_events']:,} blocks, {summary['threads']:,} threads")
    print(bcctool.table(COLUMNS, threads))
    for s in top_stacks:
        print(f"\n  {bcctool.quantity(s['total_ms'], 'ms')} in {s['count']:,} blocks ({s['percentage']:.1f}%) "
              f"{s['comm']} ({s['pid']}/{s['tid']})")
        bcctool.print_stack(s["kernel_frames"][: args.stack_depth], s["user_frames"][: args.stack_depth], "    ")


# --- loop ------------------------------------------------------------------------------------------
pace = b["pace"] if args.stack_every > 1 and args.stack_rate > 0 else None
symbols = Symbols()
seen_map = b["seen"]
b["new_maps"].open_ring_buffer(symbols.on_new_maps)     # served while the harness waits
dwarf_blocks = DwarfBlocks()
if dwarf:
    b["dwarf_blocks"].open_ring_buffer(dwarf_blocks.on_block)
symbols.snapshot([args.pid] if args.pid else [int(p) for p in os.listdir("/proc") if p.isdigit()])
stored = StoredStacks(b["ustacks"]) if in_kernel else None
walked_used: set[int] = set()   # kernel: the hashes of the stacks this interval's blocks refer to
tables = reader = walk_figures = None
if in_kernel:   # the traced process's tables (-p, --tid) before its first walk; those met later on a thread
    target = args.pid or (taskinfo.tgid_of(args.tid) if args.tid else None)
    tables, reader = tracepoint_tables(b, default_cache_dir(), tool.warn, target)
    walk_figures = WalkFigures(b, tables, stored)
start_map, crossed = b["start"], b["crossed"]


def ended_before_the_run() -> None:
    """Blocks that ended before the first interval began (slot 0) are not the run's."""
    read_blocks(0), epochs.take_all(crossed)
    if dwarf:
        dwarf_blocks.claim_at(0), dwarf_blocks.take(0)


cuts = tool.begin_epochs(ended_before_the_run)
# ready once every running process's maps are read: meta says so
refused = args.user_stacks != "fp" and not (dwarf or in_kernel)   # the kernel refused bpf_task_pt_regs() and co.
tool.meta(min_block_us=args.min_block_us, stack_depth=args.stack_depth, preempted=args.preempted,
          user_stacks="dwarf" if dwarf else "kernel" if in_kernel else "fp",
          dwarf_min_us=args.dwarf_min_us if dwarf else None,
          python_frames="on" if symbols.python is not None else "off",
          **({"note": f"{'DWARF' if args.user_stacks == 'dwarf' else 'CFI'} user stacks refused by the kernel: "
                      "frame pointers instead"} if refused else {}))
if not args.folded:
    tool.say("Tracing off-CPU time (blocked threads)... Hit Ctrl-C to end.")
full, stack_errors, unseen = b["full"], b["stack_errors"], b["unseen_switch_ins"]
ustacks_full = b["ustacks_full"] if in_kernel else None
unseen_before = 0
dwarf_seen: dict[str, int] = {}
python_seen: dict[str, int] = {}
process_names = ProcessNames()
for _interval in tool.intervals():
    # the cut: every block from here on is the next interval's, and this one is finished
    closing, began, now = cuts.flip()
    elapsed = max(now - began, 1) / 1e9
    blocks, open_keys = open_blocks(began, now)
    claimed = dwarf_blocks.claim_at(closing) if dwarf else {}
    cuts.collected_open(closing)
    for part in (blocks_crossed(open_keys), read_blocks(epochs.Epochs.slot(closing)), claimed,
                 dwarf_blocks.take(closing) if dwarf else {}):
        for key, v in part.items():
            merge(blocks.setdefault(key, {}), v)
    if in_kernel:   # the walked stacks no block of the interval refers to leave `ustacks` (when half full)
        stored.retire(walked_used)
        walked_used.clear()
    # a comm several processes share is shown with its command line's script: "python3 (server.py)"
    blocks = {key: v for key, v in blocks.items() if not tool.is_own(key[0])}   # blocks begun before the map's fill
    names = process_names.names((key[0], key[2]) for key in blocks)
    blocks = {(key[0], key[1], names[(key[0], key[2])], *key[3:]): v for key, v in blocks.items()}
    per_thread: dict[tuple, dict] = {}
    for key, v in blocks.items():
        merge(per_thread.setdefault((*key[:3], key[5]), {}), v)
    grand = sum(v["total_ns"] for v in per_thread.values())
    events = sum(v["count"] for v in per_thread.values())
    threads = [{"pid": k[0], "tid": k[1], "comm": k[2], **tool.cgroup_fields(k[3]), **timing(v, grand)}
               for k, v in sorted(per_thread.items(), key=lambda kv: kv[1]["total_ns"], reverse=True)]
    if args.group_by == "cgroup":
        per_group: dict[int, dict] = {}
        for k, v in per_thread.items():
            merge(per_group.setdefault(k[3], {}), v)
        groups = [{**tool.cgroup_fields(cgid), "threads": sum(1 for k in per_thread if k[3] == cgid),
                   **timing(v, grand)}
                  for cgid, v in sorted(per_group.items(), key=lambda kv: kv[1]["total_ns"], reverse=True)]
    by_stacks = shared_among_sampled(blocks, per_thread) if args.stack_every > 1 else blocks
    by_time = sorted(by_stacks.items(), key=lambda kv: kv[1]["total_ns"], reverse=True)
    summary = {"total_time_ns": grand, "total_events": events, "stack_every": args.stack_every,
               "stack_every_paced": largest_divisor(pace, args.stack_every),   # N doubled under load (pace.h)
               "avg_time_ns": sum(v["length_ns"] for v in per_thread.values()) // events if events else 0,
               "min_time_ns": min((v["min_ns"] for v in per_thread.values() if v["count"]), default=0),
               "max_time_ns": max((v["max_ns"] for v in per_thread.values()), default=0),
               "threads": len(threads), "interval_s": round(elapsed, 3)}
    # blocks whose switch back in the kernel did not deliver: counted, ended at their next switch out
    unseen_total = sum(unseen[unseen.Key(0)])
    summary["unseen_switch_ins"], unseen_before = unseen_total - unseen_before, unseen_total
    cut_before = symbols.cut
    if dwarf:   # this interval's DWARF stacks by outcome, and the long blocks that kept an fp stack
        outcomes = dwarf_blocks.outcomes()
        missed = sum(b["dwarf_missed"][b["dwarf_missed"].Key(0)]) + dwarf_blocks.deferred
        summary["dwarf_stacks"] = {**{k: n - dwarf_seen.get(k, 0) for k, n in outcomes.items()},
                                   "kept_fp": missed - dwarf_seen.get("kept_fp", 0)}
        dwarf_seen = {**outcomes, "kept_fp": missed}
    if in_kernel:   # this interval's walks by outcome, and what the kernel's unwinder holds
        summary["user_stacks"], summary["kernel_unwind"] = walk_figures.take(sum(ustacks_full[ustacks_full.Key(0)]))
        tables.forget_gone(taskinfo.processes())
    if symbols.python is not None:
        if in_kernel:   # a walk per block (dwarf: counted as each long block arrives)
            for key, v in blocks.items():
                if isinstance(key[4], Walked) and key[4].python:
                    symbols.python.count(key[0], key[4].python, v["count"])
        # python processes' blocks: their frame walks (complete, truncated, no_thread, unreadable)
        summary["python"] = {k: n - python_seen.get(k, 0) for k, n in symbols.python.outcomes.items()}
        python_seen = dict(symbols.python.outcomes)
        symbols.retry_python()
    if args.folded and not tool.json:
        for key, v in by_time:
            print(f"{stack_record(key, v, grand)['folded']} {v['total_ns'] // 1000}")
    elif tool.json:
        tops = [{"pid": t["pid"], "tid": t["tid"], "comm": t["comm"], "time_ms": t["total_ms"],
                 "percentage": t["percentage"]} for t in threads[: args.top]]
        records = [stack_record(key, v, grand) for key, v in by_time]   # every stack: the flame graph's
        tool.emit("summary", **summary, top_blocking_threads=tops, user_stacks_cut=symbols.cut - cut_before)
        if args.group_by == "cgroup":
            for rank, g in enumerate(groups[: args.top], 1):
                tool.emit("row", level="cgroup", rank=rank, **g)
        else:
            for rank, t in enumerate(threads[: args.top], 1):
                tool.emit("row", level="thread", rank=rank, **t)
        for rank, record in enumerate(records, 1):
            tool.emit("row", level="stack", rank=rank, **record)
    else:
        print_tables(summary, (groups if args.group_by == "cgroup" else threads)[: args.top], [stack_record(k, v, grand) for k, v in by_time[: args.stacks]])
    if dwarf and not tool.json and not args.folded and any(summary["dwarf_stacks"].values()):
        d = summary["dwarf_stacks"]
        print(f"(DWARF user stacks: {d['complete']} complete, {d['truncated']} truncated, {d['failed']} failed; "
              f"{d['kept_fp']} long blocks kept their frame-pointer stack)")
    if in_kernel and not tool.json and not args.folded and any(summary["user_stacks"].values()):
        print(walks_line(summary["user_stacks"]))
    if symbols.cut > cut_before and not tool.json and not args.folded:
        print(f"({symbols.cut - cut_before} user stacks cut where the frame-pointer walk left mapped code)")
    tool.set_lost_total("map_full", sum(full[full.Key(0)]))
    tool.set_lost_total("kernel_stack", sum(stack_errors[stack_errors.Key(0)]))
    if in_kernel:
        tool.set_lost_total("user_stacks_map_full", sum(ustacks_full[ustacks_full.Key(0)]))
    symbols.forget({int(p) for p in os.listdir("/proc") if p.isdigit()})

if tables is not None:
    stop_tables(tables, reader)
tool.finish()
