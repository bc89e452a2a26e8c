"""Tool: one metric script's life, so each script reads like a BCC tool.

It gives a script: BCC's argument conventions ([interval] [count], -p, -h with examples, --json), its BPF
C loaded from bpf/NAME.c with filters as -D cflags, the NDJSON envelope (docs/ndjson.md), lost-event
accounting, and a clean stop: SIGINT or SIGTERM ends the current interval early, prints it, detaches
every probe and exits 0. Bad arguments print one line and exit 2. Nothing here needs root or bcc until
load() is called, so --help works anywhere.

How long a metric runs, one rule for all (BCC's): `[interval] [count]` print every `interval` seconds,
`count` times; `-i SECONDS` is the interval positional, so with -i a lone positional is the count
(`-i 0.5 2`: two half-second intervals). `-d/--duration SECONDS` ends the run after that long whatever
the count (the last interval is cut to fit), and with no interval given it is the one interval, as in
BCC's syscount. Whichever of count and duration comes first ends the run.

Targets, one rule for all: a -p PID, --tid TID, --ppid PID or a device (see target()) that does not exist
is a one-line error and exit 2 before anything loads. When a traced process or thread exits, the
interval it exited in is still completed and printed, then an `end` record (docs/ndjson.md) says so
and the metric exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import config
from client.wire import RECORD_SCHEMA
from registry.spec import Field, field_of

from . import cgroups, footprint, kernelfeatures, ksymstub
from .arguments import HARNESS_DESTS, OneLineParser, add_argument, parser_options
from .bpfload import BPF_DIR, c_string, fdinfo_count, perf_event_name, quiet_load, text_of
from .epochs import Epochs
from .ndjson import encode
from .outstream import use_buffered_stdout
from .own import OwnProcesses
from .sleeping import Sleeper, Sources, event_sources
from .targets import TARGET_CHECKS

# arguments that name what to trace: with one, the run is not system-wide and leaves nothing out as the
# profiler's own (bcctool/own.py)
TARGET_DESTS = ("pid", "tid", "ppid", "cgroup")

# An interval whose wait ran less than this share of the interval was cut short (a stop, the
# --duration's end, a traced process's exit): its summary says `partial`, and no chart draws it as a rate
PARTIAL_SHARE = 0.9


# Fault injection for tests: BCCTOOL_FAULTS="-DFAULT_NAME=N ..." builds the BPF C with what the kernel does
# only rarely made to happen every N times (bpf/*.c's FAULT_ macros); anything else in it is ignored.
FAULT_FLAG = re.compile(r"-DFAULT_[A-Z_]+=[0-9]+")


def fault_cflags() -> list[str]:
    return [flag for flag in os.environ.get("BCCTOOL_FAULTS", "").split() if FAULT_FLAG.fullmatch(flag)]


class Tool:
    """One metric script's life: arguments, BPF load, output, the interval loop and a clean stop.

    Its arguments are those of the metric's registry entry (registry/entries/NAME.py, the one place they
    are declared): Tool("NAME", ...) builds the parser from them, each value converted by Arg.convert.
    `checks` gives an argument a further check of the script's own, of the converted value (e.g. a
    device name's rules; it returns the value or raises argparse.ArgumentTypeError); the declaration
    stays in the registry. `args` is for a tool that has no entry (the harness's own tests)."""

    def __init__(
        self,
        name: str,
        description: str,
        examples: list[tuple[str, str]],
        checks: dict[str, Callable[[Any], Any]] | None = None,
        args: tuple[config.Arg, ...] | None = None,
    ) -> None:
        self.name = name
        self._name_json = json.dumps(name)
        width = max((len(cmd) for cmd, _ in examples), default=0)
        epilog = "examples:\n" + "\n".join(
            f"    {cmd.ljust(width)}  # {note}" for cmd, note in examples
        )
        self.parser = OneLineParser(
            prog=name,
            description=description,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.spec = config.get(name) if args is None else None   # `args`: a tool with no entry (tests)
        declarations = self.spec.args if self.spec is not None else args
        self._targets: dict[str, str] = {}      # argument dest -> what it names (TARGET_CHECKS)
        declared = {arg.name: arg for arg in declarations}
        self.has_interval = "interval" in declared
        self.default_interval = declared["interval"].default if self.has_interval else None
        for arg in declarations:
            add_argument(self.parser, arg, (checks or {}).get(arg.name))
            if arg.target:
                self.target(arg.name, arg.target)
            if arg.name == "interval":
                # the interval's other spelling (part of the [interval] [count] rule, see _resolve_interval)
                self.parser.add_argument(
                    "-i", "--interval", dest="interval_opt", type=arg.convert, metavar="SECONDS",
                    help="the interval; a lone positional after it is the count (-i 0.5 2: two outputs)",
                )
        self.parser.add_argument("--json", action="store_true", help="print NDJSON records (docs/ndjson.md)")
        self.parser.add_argument("--validate-args", action="store_true", help=argparse.SUPPRESS)
        self.parser.add_argument("--list-args", action="store_true", help=argparse.SUPPRESS)
        self.args: argparse.Namespace | None = None
        self.json = False
        self.bpf: Any = None
        self.stopping = False
        self._wake_r: socket.socket | None = None
        self._lost: dict[str, int] = {}
        self._lost_reported: dict[str, int] = {}
        # programs whose skipped runs the metric counts itself, under a source of its own
        self.skips_counted_by_metric: set[str] = set()
        self._filters: dict[str, Any] = {}
        self.interval_index = 0
        self.partial = False                    # the interval being read was cut short (PARTIAL_SHARE)
        self.variant = ""
        self.perf_hz: dict[tuple[int, int], int] = {}   # perf events sampled by frequency: the meta names the rate
        self._cgroup_cflags: list[str] = []     # --cgroup as -D flags (bpf/common.h skip_cgroup)
        self.own: OwnProcesses | None = None    # the profiler's own processes, left out (bcctool/own.py)
        self.epochs: Epochs | None = None       # the intervals as epochs, once begun (begin_epochs)
        self.cgroup_names = cgroups.CgroupNames()   # fields(cgid), fields_json(cgid): see cgroup_fields

    # --- arguments ------------------------------------------------------------------------------
    def cgroup_fields(self, cgid: int) -> dict[str, Any]:
        """cgroup_id, cgroup (path under the v2 mount) and unit/container where its shape is known."""
        return self.cgroup_names.fields(cgid)

    def target(self, dest: str, kind: str) -> None:
        """Check argument `dest` names an existing `kind` (a TARGET_CHECKS key) before anything loads."""
        self._targets[dest] = kind

    def parse_args(self, argv: list[str] | None = None) -> argparse.Namespace:
        args = self.parser.parse_args(argv)
        if args.list_args:
            # Contract hook: the parser as built, for the test that compares it with the registry.
            print(json.dumps(parser_options(self.parser), default=str))
            sys.exit(0)
        if self.has_interval:
            self._resolve_interval(args)
        self.args = args
        self.json = bool(args.json)
        use_buffered_stdout(line_buffered=not (self.json and getattr(args, "interval", None)))   # whole writes
        if args.validate_args:
            # Contract hook: show what the script understood, touch nothing else.
            shown = {k: v for k, v in vars(args).items() if k not in HARNESS_DESTS}
            print(json.dumps(shown, default=str))
            sys.exit(0)
        for dest, kind in self._targets.items():
            value = getattr(args, dest, None)
            if value is not None and not TARGET_CHECKS[kind](value):
                self.parser.error(f"argument {dest}: no {kind} {value}")
        if hasattr(args, "include_self") and not args.include_self \
                and not any(getattr(args, dest, None) for dest in TARGET_DESTS):
            # a system-wide run leaves out the profiler's own processes unless --include-self; a target
            # names what to trace, whoever's it is (a command the app runs in a cgroup of its own is
            # the app's child, and what the user asked to see)
            self.own = OwnProcesses(getattr(args, "app_pid", None))
            self._filters["own_processes"] = "left out"
        if getattr(args, "cgroup", None) is not None:
            # --cgroup PATH: that group and every group below it, made now or later; the BPF side
            # compares the task's ancestor at the target's depth with the target (no map to keep)
            try:
                path, cgid, level = cgroups.resolve_target(args.cgroup)
            except ValueError as exc:
                self.parser.error(f"argument --cgroup: {exc}")
            self._filters["cgroup"] = path
            self._cgroup_cflags = [f"-DFILTER_CGROUP_ID={cgid}ULL", f"-DFILTER_CGROUP_LEVEL={level}"]
        return args

    def _resolve_interval(self, args: argparse.Namespace) -> None:
        """[interval] [count], -i and --duration as one rule (see the module docstring)."""
        if args.interval_opt is not None:
            if args.count is not None:
                self.parser.error("with -i SECONDS, one positional at most: the count")
            if args.interval is not None:
                if not float(args.interval).is_integer():
                    self.parser.error(f"argument count: not an integer: {args.interval:g}")
                args.count = int(args.interval)
            args.interval = args.interval_opt
        elif args.interval is None:
            args.interval = args.duration or self.default_interval

    # --- filters become -D cflags, so the probe returns in its first lines ---------------------------
    def filter_cflags(self, **filters: Any) -> list[str]:
        """-DNAME=value for each filter that is set; also recorded for the meta record."""
        flags = []
        for key, value in filters.items():
            if value is None or value is False:
                continue
            self._filters[key.lower()] = value
            if isinstance(value, str):
                flags.append(f"-D{key.upper()}={c_string(value)}")
            elif value is True:
                flags.append(f"-D{key.upper()}=1")
            else:
                flags.append(f"-D{key.upper()}={int(value)}")
        return flags

    def load(
        self, cflags: list[str] | None = None, src: str | None = None, variants: list[list[str]] | None = None
    ) -> Any:
        """Compile and load bpf/<src or name>.c; tracepoint and raw-tracepoint probes attach here.

        `variants` are extra cflag sets tried in order (e.g. a faster path the kernel may refuse);
        the one that loaded is kept in self.variant and reported in the meta record."""
        self._install_signals()
        try:
            from bcc import BPF  # noqa: PLC0415 - only needed once arguments are good
        except ImportError:
            self.die("bcc is not importable: install the distro's python3-bpfcc (make setup)")
        ok, how = kernelfeatures.privileges()
        if not ok:
            self.die(f"loading BPF needs root or CAP_BPF+CAP_PERFMON ({how})")
        footprint.restore_compiler_data()  # a second load in one process: the compiler runs again
        path = os.path.join(BPF_DIR, f"{src or self.name}.c")
        base = [f"-I{BPF_DIR}", "-Wno-macro-redefined", "-Wno-unused-function", *(cflags or []),
                *self._cgroup_cflags, *(["-DSKIP_OWN"] if self.own else []), *fault_cflags()]
        tries = variants or [[]]
        for n, extra in enumerate(tries):
            last = n == len(tries) - 1
            try:
                with ksymstub.stub_kallsyms():   # BCC's compile skips reading the kernel's symbols
                    self.bpf = quiet_load(BPF, path, base + extra, show_errors=last)
                self.variant = " ".join(extra)
                if self.own:
                    self.own.attach(self.bpf["own_tgids"], self.bpf["own_gen"])
                footprint.after_load()
                return self.bpf
            except Exception as exc:  # noqa: BLE001 - BCC raises bare Exception on compile/attach errors
                if last:
                    self.die(f"could not load {os.path.basename(path)}: {str(exc).splitlines()[0]}")
        return None

    def attached_probes(self) -> list[dict[str, str]]:
        """Every probe this script has attached, by type, read back from BCC's own bookkeeping."""
        b = self.bpf
        if b is None:
            return []
        probes = [{"name": text_of(tp), "type": "tracepoint"} for tp in b.tracepoint_fds]
        probes += [{"name": text_of(tp), "type": "raw_tracepoint"} for tp in b.raw_tracepoint_fds]
        probes += [{"name": text_of(k), "type": "kprobe"} for k in b.kprobe_fds]
        # "cpu-clock@100": a clock at 100 Hz, not on every tick (bench/probe_floor.py copies it so)
        probes += [{"name": perf_event_name(k) + (f"@{self.perf_hz[k]}" if k in self.perf_hz else ""), "type": "perf_event"}
                   for k in b.open_perf_events]
        return probes

    # --- output -----------------------------------------------------------------------------------
    def emit(self, kind: str, **fields: Any) -> None:
        """One NDJSON record in the envelope: metric, ts, kind, interval, then the fields."""
        if not self.json:
            return
        record = {"metric": self.name, "ts": round(time.time(), 6), "kind": kind, "interval": self.interval_index}
        record.update(fields)
        if kind == "summary" and self.partial:
            record["partial"] = True
        sys.stdout.write(encode(record) + "\n")

    def emit_encoded(self, kind: str, *encoded: str) -> None:
        """emit() of records whose fields are already in JSON, `"name":value` pairs each (a profiler's
        stacks: the same frames and the same process record after record, each encoded once): the
        envelope made as text once for them all."""
        if not self.json or not encoded:
            return
        head = (f'{{"metric":{self._name_json},"ts":{round(time.time(), 6)!r},"kind":{json.dumps(kind)},'
                f'"interval":{self.interval_index},')
        for fields in encoded:   # into the buffered stdout (outstream.py: an unbuffered one cut a long write)
            sys.stdout.write(f"{head}{fields}}}\n")

    def emit_event(self, **fields: Any) -> None:
        """An `event` record numbered with the interval it falls in: under poll_until_stopped that is
        the one not yet closed by a tick (interval_index + 1), never 0, which belongs to `meta`."""
        self.emit("event", **{**fields, "interval": self.interval_index + 1})

    def begin_epochs(self, discard: Callable[[], object] | None = None) -> Epochs:
        """The first interval begins (bcctool/epochs.py): `epochs[0]` set to 1, then `discard()` throws
        away what the programs wrote to slot 0 since load, which ended before the run began. Called
        before meta(), which refuses to come first: a span that ends once a reader has seen the meta
        must be counted, and begun after it, one ending in between would be thrown away with slot 0."""
        self.epochs = Epochs(self.bpf["epochs"])
        if discard is not None:
            discard()
        return self.epochs

    def meta(self, **extra: Any) -> None:
        """The first record: kernel, probes attached and of what type, filters, arguments."""
        if self.epochs is None and self._has_map("epochs"):
            raise RuntimeError(f"{self.name}: meta() before begin_epochs(): the first interval must begin first")
        hidden = ("json", *HARNESS_DESTS)
        args = {k: v for k, v in vars(self.args or argparse.Namespace()).items() if k not in hidden}
        self.emit(
            "meta",
            schema=RECORD_SCHEMA,
            host=socket.gethostname(),
            kernel=platform.release(),
            pid=os.getpid(),
            probes=self.attached_probes(),
            filters=self._filters,
            variant=self.variant,
            args=args,
            **extra,
        )
        self.flush()

    def _has_map(self, name: str) -> bool:
        if self.bpf is None:
            return False
        try:
            self.bpf[name]
        except KeyError:
            return False
        return True

    def fields(self, *names: str, kind: str = "") -> tuple[Field, ...]:
        """The registry's declarations (label in words, unit) of these fields of the metric's records, for
        a human table (bcctool.table) or line (bcctool.figures): the entry's own, a common one, else one
        guessed from the name; kind "summary" prefers the entry's summary fields."""
        return tuple(self.spec.field(n, kind) if self.spec is not None else field_of(n) for n in names)

    def say(self, text: str) -> None:
        """Human output only (a header, a table): silent under --json."""
        if not self.json:
            print(text)

    def warn(self, text: str) -> None:
        """A note on stderr, named after the metric, under --json too (the app logs stderr)."""
        print(f"{self.name}: {text}", file=sys.stderr, flush=True)

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            self.stopping = True

    # --- lost events ------------------------------------------------------------------------------
    def lost_callback(self, source: str) -> Callable[[int], None]:
        """A perf-buffer lost_cb that counts what the kernel dropped for `source`."""
        self._lost.setdefault(source, 0)

        def on_lost(count: int) -> None:
            self._lost[source] += count

        return on_lost

    def set_lost_total(self, source: str, total: int) -> None:
        """Record the running total of a kernel-side lost counter (e.g. a LOST_COUNTER map's sum)."""
        if total > self._lost.get(source, 0):
            self._lost[source] = total

    def count_skipped_runs(self) -> None:
        """The kernel skips a tracepoint or perf-event program that fires while another BPF program runs on
        its CPU (an interrupt's block completion during a sched_switch program of another tool): its event
        is lost. Each program's running count (fdinfo's recursion_misses) becomes the lost source
        `skipped:<program>`. Seen beside offcpu: 68 of biopwise's block_rq_complete runs in a few seconds."""
        for name, func in getattr(self.bpf, "funcs", {}).items():
            if text_of(name) in self.skips_counted_by_metric:
                continue
            misses = fdinfo_count(func.fd, "recursion_misses")
            if misses:
                self.set_lost_total(f"skipped:{text_of(name)}", misses)

    def report_lost(self) -> None:
        """Emit a `lost` record (or a stderr line) for whatever was lost since the last report."""
        self.count_skipped_runs()
        for source, total in self._lost.items():
            new = total - self._lost_reported.get(source, 0)
            if new > 0:
                self._lost_reported[source] = total
                if self.json:
                    self.emit("lost", source=source, count=new, total=total)
                else:
                    print(f"WARNING: {new} events lost ({source}), {total} in all", file=sys.stderr)

    # --- the loop -----------------------------------------------------------------------------------
    def _install_signals(self) -> None:
        if self._wake_r is not None:
            return
        self._wake_r, wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self._wake_w = wake_w
        self._sleeper = Sleeper(self._wake_r, self._drain_wakeups)

        def on_signal(signum: int, frame: Any) -> None:
            self.stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGHUP, on_signal)
        # Writing to a closed pipe ends the tool quietly instead of a traceback.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    def _drain_wakeups(self) -> None:
        """Read what the signal wakeup fd wrote: left there, a signal that does not stop the tool (one
        with a handler of its own, SIGUSR1 for a profiler) kept every later select() returning at once."""
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, serving the script's perf and ring buffers meanwhile if it opened any;
        False as soon as a stop was asked for."""
        self._install_signals()
        if self.stopping:
            return False
        sources, deadline = self._event_sources(), time.monotonic() + seconds
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            self._sleeper.serve(sources, left)
        return not self.stopping

    def intervals(self) -> Iterator[int]:
        """Yield 1, 2, ... once per interval; after a stop signal, once more (the partial interval). Ends
        after `count` intervals, at the --duration, or after the interval in which a target exited."""
        args = self.args
        interval = args.interval if self.has_interval else 1.0
        count = args.count if self.has_interval else None
        duration = args.duration if self.has_interval else None
        end = time.monotonic() + duration if duration else None
        last_read = False
        while True:
            step = interval if end is None else max(0.0, min(interval, end - time.monotonic()))
            began = time.monotonic()
            completed = self.wait(0.0 if last_read else step)
            self.partial = time.monotonic() - began < PARTIAL_SHARE * interval
            # the target's exit seen before the interval's read: the read holds everything it did. One
            # that exits during the read gets one more read, at once (its last events came after this one)
            gone = self._gone_target()
            self.interval_index += 1
            yield self.interval_index
            self.report_lost()
            self.flush()
            self._between_intervals()
            # A stop during the wait made this the last, partial interval; a stop while it was being
            # processed leaves one more read to do (wait() returns at once), so nothing since is lost.
            if not completed or self._target_exited(gone):
                return
            last_read = self._gone_target() is not None
            if count is not None and self.interval_index >= count:
                return
            if end is not None and time.monotonic() >= end:
                return

    def poll_until_stopped(self, on_tick: Callable[[], None] | None = None, tick: float | None = None) -> None:
        """For event tools: read perf/ring buffers as their events arrive until stopped; call on_tick
        every `tick` seconds. It sleeps in one select() on the buffers and the signal wakeup until the
        next tick, not in short polls: a wakeup costs ~0.1 ms of CPU on a VM, and ten a second were
        most of an idle event tool's CPU."""
        self._install_signals()
        next_tick = time.monotonic() + tick if tick else None
        count = getattr(self.args, "count", None) if self.has_interval else None
        duration = getattr(self.args, "duration", None) if self.has_interval else None
        end = time.monotonic() + duration if duration else None
        if end is not None and next_tick is not None:
            next_tick = min(next_tick, end)
        last_tick = time.monotonic()
        sources = self._event_sources()
        try:
            while not self.stopping:
                wake_at = min((t for t in (next_tick, end) if t is not None), default=None)
                self._sleeper.serve(sources, None if wake_at is None else max(0.0, wake_at - time.monotonic()))
                if next_tick is not None and (now := time.monotonic()) >= next_tick:
                    next_tick += tick
                    if end is not None:
                        next_tick = min(next_tick, end)
                    # a late tick's follower is short but whole; only the --duration's end cuts one
                    self.partial = end is not None and now >= end and now - last_tick < PARTIAL_SHARE * tick
                    last_tick = now
                    for _fd, consume in sources:   # what waits below a wakeup_events batch is this interval's
                        consume()
                    self.interval_index += 1
                    if on_tick:
                        on_tick()
                    self.report_lost()
                    self.flush()
                    self._between_intervals()
                    if count is not None and self.interval_index >= count:
                        break
                    if (end is not None and time.monotonic() >= end) or self._target_exited(self._gone_target()):
                        break
                elif end is not None and next_tick is None and time.monotonic() >= end:
                    break
        finally:
            self._sleeper.close()
        for _fd, consume in sources:   # drain what is already in the buffers before detaching
            consume()
        if on_tick and self.stopping:
            self.partial = tick is not None and time.monotonic() - last_tick < PARTIAL_SHARE * tick
            self.interval_index += 1
            on_tick()
        self.report_lost()
        self.flush()

    def wakeup_events(self, batch: int = 256) -> int:
        """open_perf_buffer()'s wakeup_events: under --json with ticks, woken once `batch` events wait on a
        CPU (well under what the buffer holds) and the rest read at each tick, not one wakeup an event
        (~50 us of CPU each on a VM: tcpconnlat spent 64 ms/s at 900 connects/s); by hand, one an event."""
        return batch if self.json and getattr(self.args, "interval", None) else 1

    def _event_sources(self) -> Sources:
        return event_sources(self.bpf)

    def is_own(self, pid: int) -> bool:
        """A process left out as the profiler's own: the kernel skips it once the map holds it; the
        user side drops what it did before (the script's own syscalls between attach and the map's fill)."""
        return self.own is not None and pid in self.own.tgids

    def _between_intervals(self) -> None:
        footprint.between_intervals()
        if self.own:
            self.own.refresh()      # a metric or helper the app started since joins the left out

    def _gone_target(self) -> tuple[str, str, int] | None:
        """(dest, kind, value) of a traced process or thread that is gone, if one is."""
        for dest, kind in self._targets.items():
            value = getattr(self.args, dest, None)
            if kind in ("process", "thread") and value is not None and not TARGET_CHECKS[kind](value):
                return dest, kind, value
        return None

    def _target_exited(self, gone: tuple[str, str, int] | None) -> bool:
        """True for a gone target; says so in an `end` record (or a line)."""
        if gone is None:
            return False
        dest, kind, value = gone
        self.emit("end", reason=f"{kind} exited", target={dest: value})
        if not self.json:   # stderr: stdout may be data (folded stacks)
            print(f"{kind} {value} exited; ending after interval {self.interval_index}", file=sys.stderr)
        self.flush()
        return True

    def finish(self) -> None:
        """Detach everything now (not at interpreter exit) and leave with status 0."""
        if self.bpf is not None:
            footprint.restore_compiler_data()  # BCC's cleanup runs the compiler's destructors
            try:
                # Close perf buffers while their maps are open: BCC's cleanup() only forgets the
                # tables, and a script's own reference would close them at exit with a traceback.
                for perf_table in [t for t in self.bpf.tables.values() if hasattr(t, "_open_key_fds")]:
                    for key in list(perf_table._open_key_fds):
                        del perf_table[key]
                self.bpf.cleanup()
            except Exception:  # noqa: BLE001 - detaching at exit must never turn into a traceback
                pass
            self.bpf = None
        self.flush()
        sys.exit(0)

    def die(self, message: str, status: int = 1) -> None:
        print(f"{self.name}: error: {message}", file=sys.stderr)
        sys.exit(status)
