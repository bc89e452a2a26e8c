"""The registry: one entry per metric script — what it is, its arguments, and how to show its output.

A student adding a metric writes bpf/NAME.c, metrics/NAME.py, one MetricSpec below and its doc page
(docs/metrics/NAME.md); the contract test (tests/test_registry_contract.py) checks every entry against
the real script and the page. The GUI builds argument forms, tables and charts from these declarations,
and the collector stores any metric's records, so neither needs code per metric (docs/adding-a-metric.md).

One declaration per argument. Each argument of a metric is declared once, as an Arg in its entry, and
nowhere else: the script's argparse is built from the entry (bcctool.Tool("NAME", ...) looks it up and
adds every Arg: flag, short flag, type, bounds, choices, default, help), the GUI's form from the same
Args, and the doc page's options table is generated from them (scripts/gen_docs.py). So a metric
script never calls parser.add_argument; it reads `args = tool.parse_args()`. To add an argument:
    Arg("top", "--top", "int", "processes shown", default=10, minimum=1, maximum=1000, short="-T")
  - name is the argparse dest and the form's key; flag None makes it positional ([interval] [count]).
  - type "int"/"float" with minimum/maximum (checked by the form and by the script's parser alike),
    "choice" with choices, "str", or "flag" (store_true; the script's default is always off, `default`
    is only the form's initial state).
  - short ("-p"), aliases ("--per-packet"), metavar, cli_help (what --help says when it says more than
    the form's one-line help), target ("process", "thread", "block device", "network device": checked
    to exist before anything loads), shortcuts (e.g. -4/-6 setting --family), form=False for a
    script-only option (offcpu --folded), sample (a valid value the contract test passes).
A value a script must parse further (a device name) gets a check through Tool(types={name: function});
the declaration stays here. Shared declarations: interval_args() ([interval] [count], --duration),
PID, TID, PPID.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from client.wire import RECORD_KINDS

ROOT = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Shortcut:
    """A flag that sets its argument to a fixed value, e.g. -4/--ipv4 for --family 4."""

    flags: tuple[str, ...]
    value: Any
    help: str


@dataclass(frozen=True)
class Arg:
    """One command-line argument of a metric script, as the GUI shows and validates it.

    type: "int", "float", "str", "choice" or "flag". flag None means positional (in declared order).
    sample: a valid value the contract test passes to the script (defaults to `default`)."""

    name: str
    flag: str | None
    type: str
    help: str
    default: Any = None
    required: bool = False
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    sample: Any = None
    short: str = ""                      # the script's short flag, e.g. "-p"
    aliases: tuple[str, ...] = ()        # more long spellings the script accepts, e.g. "--per-packet"
    metavar: str = ""
    cli_help: str = ""                   # the script's --help text, when it says more than `help`
    target: str = ""                     # what the value names, checked to exist before loading
    shortcuts: tuple[Shortcut, ...] = ()  # flags that set this argument to a value (-4: --family 4)
    form: bool = True                    # False: the script's option only, not on the app's form
    label: str = ""                      # the form's label, when the name read as words says too little

    @property
    def title(self) -> str:
        """The form's label for a person: `label`, else the name as words ("min_block_us": "Min block (us)")."""
        if self.label:
            return self.label
        words = self.name.split("_")
        unit = words.pop() if len(words) > 1 and words[-1] in ("us", "ms", "ns", "s", "kb", "mb") else ""
        text = " ".join(words).capitalize().replace("Pid", "PID").replace("Tid", "TID").replace("Ppid", "PPID")
        return f"{text} ({unit})" if unit else text

    @property
    def flags(self) -> tuple[str, ...]:
        """Every option string the script accepts for this argument (none for a positional)."""
        if self.flag is None:
            return ()
        return (*((self.short,) if self.short else ()), self.flag, *self.aliases)

    def validate(self, value: Any) -> tuple[Any, str | None]:
        """(converted value, None) or (None, reason). Empty optional values convert to None."""
        if value is None or value == "":
            return (None, f"{self.name} is required") if self.required else (None, None)
        if self.type == "flag":
            return bool(value), None
        if self.type in ("int", "float"):
            try:
                number = int(value) if self.type == "int" else float(value)
            except (TypeError, ValueError):
                return None, f"{self.name} must be {'an integer' if self.type == 'int' else 'a number'}"
            if not math.isfinite(number):     # NaN would pass both bounds below; inf and 1e400 overflow
                return None, f"{self.name} must be a finite number"
            if self.minimum is not None and number < self.minimum:
                return None, f"{self.name} must be at least {self.minimum:g}"
            if self.maximum is not None and number > self.maximum:
                return None, f"{self.name} must be at most {self.maximum:g}"
            return number, None
        if self.type == "choice":
            return (value, None) if value in self.choices else (None, f"{self.name} must be one of {', '.join(self.choices)}")
        text = str(value)
        if any(c in text for c in "\0\n"):
            return None, f"{self.name} has a control character"
        return text, None


@dataclass(frozen=True)
class Field:
    """A field of the records the GUI tables show; unit is one of '', 'count', 'us', 'ms', 'ns',
    'bytes', 'pct', '/s'."""

    name: str
    label: str
    unit: str = ""


@dataclass(frozen=True)
class Chart:
    """What to draw for a metric.

    kind: "timeseries" (y over time, one point per record of `kind`), "histogram" (log2 buckets from
    `hist` records named `series`), "scatter" (y per event), "stacks" (a flame graph of the stack records,
    each weighted by its field y: see profile_data.stack_of), "heatmap" (log2 buckets over time: one
    column per interval, from `hist` records named `series`, or from each event's y times `scale`).
    series: field whose value splits lines (e.g. per-device), or the hist name for histograms.
    snapshot (stacks): each interval's stacks restate the whole state (outstanding bytes), so a range
    shows the newest interval instead of a sum.
    lines (timeseries): several fields of one record, each its own line: ((field, legend name), ...).
    per: a record field each value is divided by (interval_s: an interval's total becomes a rate).
    scale (heatmap of events): y times scale is binned (latency_ms x 1000: log2 buckets of us)."""

    kind: str
    y: str
    record_kind: str = "summary"
    label: str = ""
    unit: str = ""
    series: str | None = None
    snapshot: bool = False
    lines: tuple[tuple[str, str], ...] = ()
    per: str = ""
    scale: float = 1.0


def parse_ndjson(line: str) -> dict | None:
    """The default output_parser: one NDJSON envelope line -> dict; anything else -> None (a log line)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("kind") not in RECORD_KINDS or "metric" not in record:
        return None
    return record


@dataclass(frozen=True)
class MetricSpec:
    name: str
    file: str
    description: str
    args: tuple[Arg, ...]
    probes: tuple[str, ...]                      # tracepoints required, "category:event"
    fields: tuple[Field, ...]                    # table columns, from records of table_kind
    chart: Chart
    table_kind: str = "row"                      # "row" (per interval) or "event" (per event)
    output_parser: Callable[[str], dict | None] = parse_ndjson
    doc: str = ""
    # the one number headless progress shows per interval: (summary field, unit text, scale)
    key_figure: tuple[str, str, float] | None = None
    # the window's further charts of this metric, each in its own tab beside `chart` (the collector's)
    more_charts: tuple[Chart, ...] = ()

    @property
    def charts(self) -> tuple[Chart, ...]:
        return (self.chart, *self.more_charts)

    def key_figure_text(self, summary: dict) -> str:
        """'33,374 syscalls/s' from an interval's summary record; '' when it lacks the field."""
        if self.key_figure is None or not isinstance(summary.get(self.key_figure[0]), (int, float)):
            return ""
        field, unit, scale = self.key_figure
        return f"{summary[field] * scale:,.0f} {unit}"

    @property
    def path(self) -> str:
        return os.path.join(ROOT, self.file)

    def validate(self, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """(converted values, {arg name: reason}) for a form's raw values."""
        converted, errors = {}, {}
        for arg in self.args:
            value, error = arg.validate(values.get(arg.name, arg.default))
            if error:
                errors[arg.name] = error
            else:
                converted[arg.name] = value
        return converted, errors

    def command(self, values: dict[str, Any], python: str | None = None, json_output: bool = True) -> list[str]:
        """argv that runs this metric with validated values (raises ValueError on a bad value)."""
        converted, errors = self.validate(values)
        if errors:
            raise ValueError("; ".join(errors.values()))
        argv = [python or sys.executable, self.path]
        positionals = []
        for arg in self.args:
            value = converted.get(arg.name)
            if value is None or value is False:
                if arg.flag is None:
                    positionals.append(None)
                continue
            if arg.flag is None:
                positionals.append(str(value))
            elif arg.type == "flag":
                argv.append(arg.flag)
            else:
                argv += [arg.flag, str(value)]
        # positionals are [interval] [count]: a later one needs the earlier ones present
        while positionals and positionals[-1] is None:
            positionals.pop()
        if None in positionals:
            raise ValueError("a positional argument is missing before a later one")
        argv += positionals
        if json_output:
            argv.append("--json")
        return argv


# --- shared argument declarations ------------------------------------------------------------------
def interval_args(default: float = 1.0) -> tuple[Arg, ...]:
    return (
        Arg("interval", None, "float", "seconds between outputs", default=default, minimum=0.01, maximum=3600,
            cli_help=f"seconds between outputs (default {default:g}, or the --duration)"),
        Arg("count", None, "int", "number of outputs, then exit (empty: until stopped)", minimum=1, sample=3,
            cli_help="number of outputs, then exit (default: until Ctrl-C or the --duration)"),
        Arg("duration", "--duration", "float", "total seconds to run (empty: until stopped)", minimum=0.1,
            sample=5, short="-d", metavar="SECONDS",
            cli_help="total seconds to run, then exit (whichever of count and duration comes first)"),
    )


_ENDS = "; the metric ends when it exits"
PID = Arg("pid", "--pid", "int", "trace this process id only", minimum=1, sample=1, short="-p", target="process",
          cli_help=f"trace this process id only{_ENDS}")
TID = Arg("tid", "--tid", "int", "trace this thread id only", minimum=1, sample=1, target="thread",
          cli_help=f"trace this thread id only{_ENDS}")
PPID = Arg("ppid", "--ppid", "int", "trace children of this parent pid only", minimum=1, sample=1, target="process",
           cli_help=f"trace children of this parent pid only{_ENDS}")
# checked by the harness itself (bcctool.cgroups.resolve_target: a group of the v2 hierarchy)
CGROUP = Arg("cgroup", "--cgroup", "str", "trace this cgroup (v2) and every group below it", metavar="PATH",
             sample="/sys/fs/cgroup",
             cli_help="trace this cgroup v2 group (absolute, or a path under the v2 mount) and every group "
                      "below it, also those made after start")


# --- the metrics -----------------------------------------------------------------------------------
METRICS: list[MetricSpec] = [
    MetricSpec(
        name="sysnest",
        file="metrics/sysnest.py",
        description="Syscall counts and latency per process and syscall, nested by process or by syscall.",
        args=(
            *interval_args(),
            PID,
            TID,
            PPID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "top level of the nesting", default="process",
                choices=("process", "syscall", "cgroup"), short="-g", cli_help="top level of the nesting (default process)"),
            Arg("top", "--top", "int", "groups shown", default=10, minimum=1, maximum=1000, short="-T",
                cli_help="groups shown (default 10)"),
            Arg("details_top", "--details-top", "int", "members under each group", default=5, minimum=1,
                label="Members per group",
                maximum=1000, cli_help="members shown under each group (default 5)"),
            Arg("sort", "--sort", "choice", "order by total time or count", default="time",
                choices=("time", "count"), short="-s",
                cli_help="order groups and members by total time or by count (default time)"),
            Arg("milliseconds", "--milliseconds", "flag", "human output in ms (JSON stays in us)",
                default=False, short="-m", cli_help="show latency in ms (default us)"),
            # at most a million: the per-thread tick is 31 bits, and a million already times almost nothing
            Arg("sample", "--sample", "int", "time one syscall in N per thread, count all (1: time all)",
                default=1, minimum=1, maximum=1_000_000, metavar="N",
                cli_help="time one syscall in N per thread, count all (default 1: time every one); totals "
                         "are then estimates, max is the sampled max"),
        ),
        probes=("raw_syscalls:sys_enter", "raw_syscalls:sys_exit"),
        fields=(
            Field("level", "Level"),
            Field("pid", "PID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("syscall", "Syscall"),
            Field("count", "Count", "count"),
            Field("errors", "Errors", "count"),
            Field("timed", "Timed", "count"),
            Field("total_us", "Total", "us"),
            Field("avg_us", "Avg", "us"),
            Field("max_us", "Max", "us"),
        ),
        chart=Chart("timeseries", y="per_sec", record_kind="summary", label="syscalls/s", unit="/s"),
        doc="docs/metrics/sysnest.md",
        key_figure=("per_sec", "syscalls/s", 1),
    ),
    MetricSpec(
        name="tcpconnlat",
        file="metrics/tcpconnlat.py",
        description="Active TCP connect latency per connection (SYN_SENT to ESTABLISHED); failed connects too.",
        args=(
            *interval_args(),
            PID,
            CGROUP,
            Arg("lport", "--lport", "int", "trace this local (source) port only", minimum=1, maximum=65535,
                sample=40000),
            Arg("family", "--family", "choice", "IPv4 (4) or IPv6 (6) only", choices=("4", "6"), sample="4",
                cli_help="trace IPv4 (4) or IPv6 (6) only",
                shortcuts=(Shortcut(("-4", "--ipv4"), "4", "IPv4 only"), Shortcut(("-6", "--ipv6"), "6", "IPv6 only"))),
            Arg("timestamp", "--timestamp", "flag", "include a TIME(s) column", default=False, short="-t"),
            Arg("min_ms", "--min-ms", "float", "only connects taking at least this many ms (failed: always)",
                minimum=0.001, sample=1, short="-m", metavar="MS",
                cli_help="only connects that took at least MS milliseconds (failed ones always shown)"),
        ),
        probes=("sock:inet_sock_set_state",),
        fields=(
            Field("time_s", "Time (s)"),
            Field("pid", "PID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("ip", "IP"),
            Field("saddr", "Source"),
            Field("lport", "Local port"),
            Field("daddr", "Destination"),
            Field("dport", "Port"),
            Field("latency_ms", "Latency", "ms"),
            Field("status", "Status"),
        ),
        chart=Chart("scatter", y="latency_ms", record_kind="event", label="connect latency", unit="ms",
                    series="status"),
        more_charts=(
            Chart("heatmap", y="latency_ms", record_kind="event", label="connect latency over time", unit="us",
                  scale=1000),
        ),
        table_kind="event",
        doc="docs/metrics/tcpconnlat.md",
        key_figure=("connects", "connects", 1),
    ),
    MetricSpec(
        name="netpack",
        file="metrics/netpack.py",
        description="Kernel transmit-path latency per packet (net_dev_queue to net_dev_xmit): per-device "
                    "p50/p99/max each interval, per-packet events on request.",
        args=(
            *interval_args(),
            Arg("dev", "--dev", "str", "trace this network device only", sample="lo", target="network device",
                cli_help="trace this network device only (e.g. eth0, lo)"),
            Arg("events", "--events", "flag", "also one record per packet (length, device, latency)",
                default=False, short="-e", aliases=("--per-packet",), cli_help="also print one record per packet"),
            Arg("min_us", "--min-us", "float", "per-packet records only at or above this latency (us)",
                minimum=0.001, sample=10, metavar="US",
                cli_help="per-packet records only for packets that waited at least US microseconds "
                         "(implies --events; summaries still count every packet)"),
            Arg("expire", "--expire", "float", "forget a queued packet not sent after this many seconds",
                default=2.0, minimum=0.01, maximum=3600, metavar="SECONDS",
                cli_help="forget a queued packet not transmitted after SECONDS (default 2)"),
            CGROUP,
            Arg("group_by", "--group-by", "choice", "a row per device or per device and cgroup", default="device",
                choices=("device", "cgroup"), short="-g",
                cli_help="a row per device, or per device and sending cgroup (packets queued in a softirq: "
                         "cgroup id 0) (default device)"),
        ),
        probes=("net:net_dev_queue", "net:net_dev_xmit", "irq:softirq_entry", "irq:softirq_exit"),
        fields=(
            Field("dev", "Device"),
            Field("cgroup", "Cgroup"),
            Field("packets", "Packets", "count"),
            Field("bytes", "Bytes", "bytes"),
            Field("avg_us", "Avg", "us"),
            Field("p50_us", "p50", "us"),
            Field("p99_us", "p99", "us"),
            Field("max_us", "Max", "us"),
        ),
        chart=Chart("scatter", y="latency_us", record_kind="event", label="packet transmit latency", unit="us"),
        doc="docs/metrics/netpack.md",
        key_figure=("per_sec", "packets/s", 1),
    ),
    MetricSpec(
        name="pagefault",
        file="metrics/pagefault.py",
        description="Minor and major page faults per process, per second (as getrusage counts them).",
        args=(
            *interval_args(),
            PID,
            Arg("top", "--top", "int", "processes shown", default=10, minimum=1, maximum=1000, short="-T",
                cli_help="processes shown (default 10)"),
            Arg("sort", "--sort", "choice", "order by total, minor or major faults", default="total",
                choices=("total", "minor", "major"), short="-s",
                cli_help="order processes by total, minor or major faults (default total)"),
            Arg("traps", "--traps", "flag", "also count user-mode fault traps (exceptions:page_fault_user)",
                default=False,
                cli_help="also count user-mode fault traps from exceptions:page_fault_user (a cross-check)"),
            CGROUP,
            Arg("group_by", "--group-by", "choice", "a row per process or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g", cli_help="a row per process or per cgroup (default process)"),
        ),
        probes=("perf:minor-faults", "perf:major-faults", "sched:sched_process_exec"),
        fields=(
            Field("pid", "PID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("minor_per_sec", "Minor/s", "/s"),
            Field("major_per_sec", "Major/s", "/s"),
            Field("total_per_sec", "Total/s", "/s"),
            Field("minor", "Minor", "count"),
            Field("major", "Major", "count"),
        ),
        chart=Chart("timeseries", y="faults_per_sec", record_kind="summary", label="page faults/s", unit="/s"),
        doc="docs/metrics/pagefault.md",
        key_figure=("faults_per_sec", "faults/s", 1),
    ),
]

METRICS.append(
    MetricSpec(
        name="cpuschedrun",
        file="metrics/cpuschedrun.py",
        description="CPU run time and run-queue latency: log2 histograms, and per thread CPU%, run and wait ms.",
        args=(
            *interval_args(),
            PID,
            TID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "the table: a row per thread or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g",
                cli_help="the -P table: a row per thread (process) or per cgroup (default process)"),
            Arg("per_process", "--per-process", "flag", "the per-thread table (CPU%, run ms, wait ms, priority)",
                default=True, short="-P",
                cli_help="also a table per thread: CPU% of the interval, run ms, wait ms, priority score "
                         "(run / (run + wait)), runs"),
            Arg("milliseconds", "--milliseconds", "flag", "histograms in ms (the hist records say their unit)",
                default=False, short="-m", cli_help="histograms in ms (default us)"),
            Arg("timestamp", "--timestamp", "flag", "a timestamp before each interval", default=False, short="-T",
                cli_help="print a timestamp before each interval"),
            Arg("sort", "--sort", "choice", "which threads the table keeps: the top N by", default="cpu",
                choices=("cpu", "run", "wait", "priority"), short="-s",
                cli_help="the table keeps the top N of all threads by CPU share (cpu, the same order as run), "
                         "wait time or priority score (default cpu)"),
            Arg("top", "--top", "int", "table rows per interval", default=20, minimum=1, maximum=100000,
                cli_help="table rows per interval (default 20)"),
        ),
        probes=("sched:sched_switch", "sched:sched_wakeup", "sched:sched_wakeup_new"),
        fields=(
            Field("pid", "PID"),
            Field("tid", "TID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("cpu_pct", "CPU%", "pct"),
            Field("run_ms", "Run", "ms"),
            Field("wait_ms", "Wait", "ms"),
            Field("priority", "Priority score"),
            Field("runs", "Runs", "count"),
            Field("waits", "Waits", "count"),
        ),
        chart=Chart("histogram", y="count", record_kind="hist", label="run time", unit="us", series="run_time"),
        more_charts=(
            Chart("heatmap", y="count", record_kind="hist", label="run-queue latency over time", unit="us",
                  series="runq_latency"),
            Chart("heatmap", y="count", record_kind="hist", label="run time over time", unit="us",
                  series="run_time"),
        ),
        doc="docs/metrics/cpuschedrun.md",
        key_figure=("run_ms", "ms on CPU", 1),
    )
)
METRICS.append(
    MetricSpec(
        name="biopwise",
        file="metrics/biopwise.py",
        description="Block I/O per process: read/write bytes and I/Os, sync/async, average size and latency.",
        args=(
            *interval_args(),
            PID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "a row per process or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g", cli_help="a row per process or per cgroup (default process)"),
            Arg("sort", "--sort", "choice", "order processes by", default="total",
                choices=("total", "read", "write", "ios", "latency"), short="-s",
                cli_help="order processes by bytes (total, read, write), I/Os or average latency (default total)"),
            Arg("device", "--device", "str", "only this device (a name in /proc/partitions, e.g. vda)",
                sample="vda", short="-D", metavar="NAME", target="block device",
                cli_help="only this device (a name in /proc/partitions)"),
            Arg("maxrows", "--maxrows", "int", "processes shown", default=20, minimum=1, maximum=100000, short="-r",
                cli_help="processes shown (default 20)"),
            Arg("top", "--top", "int", "processes in the top list", default=3, minimum=1, maximum=1000, short="-t",
                cli_help="processes in the top list (default 3)"),
        ),
        probes=("block:block_rq_issue", "block:block_rq_complete"),
        fields=(
            Field("pid", "PID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("devices", "Devices"),
            Field("read_bytes", "Read", "bytes"),
            Field("write_bytes", "Write", "bytes"),
            Field("read_ios", "R I/Os", "count"),
            Field("write_ios", "W I/Os", "count"),
            Field("avg_size", "Avg size", "bytes"),
            Field("sync_ios", "Sync", "count"),
            Field("async_ios", "Async", "count"),
            Field("avg_lat_us", "Avg latency", "us"),
        ),
        chart=Chart("timeseries", y="bytes_per_s", record_kind="summary", label="block I/O bytes/s", unit="bytes"),
        more_charts=(
            Chart("timeseries", y="read_bytes", record_kind="summary", label="read and write", unit="bytes/s",
                  lines=(("read_bytes", "read"), ("write_bytes", "write")), per="interval_s"),
            Chart("timeseries", y="read_ios", record_kind="summary", label="IOPS", unit="/s",
                  lines=(("read_ios", "read"), ("write_ios", "write")), per="interval_s"),
            Chart("timeseries", y="avg_lat_us", record_kind="summary", label="average latency", unit="us"),
            Chart("heatmap", y="count", record_kind="hist", label="latency over time", unit="us", series="latency"),
        ),
        doc="docs/metrics/biopwise.md",
        key_figure=("bytes_per_s", "KiB/s", 1 / 1024),
    )
)

METRICS.append(
    MetricSpec(
        name="offcpu",
        file="metrics/offcpu.py",
        description="Where threads block: off-CPU time per thread (count, min/avg/max, share) and top stacks.",
        args=(
            *interval_args(),
            PID,
            TID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "a row per thread or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g",
                cli_help="the table: a row per thread (process) or per cgroup (default process)"),
            Arg("min_block_us", "--min-block-us", "int", "ignore blocks shorter than this (us)", default=1,
                minimum=0, cli_help="ignore blocks shorter than this many us (default 1)"),
            # at most 127: the kernel's stack map limit
            Arg("stack_depth", "--stack-depth", "int", "frames kept per stack", default=127, minimum=1,
                maximum=127, cli_help="frames kept per stack, innermost first (1..127, default 127)"),
            Arg("folded", "--folded", "flag", "folded stacks instead of the tables", default=False, short="-f",
                form=False, cli_help="print folded stacks (comm;frame;...;frame us) instead of the tables"),
            Arg("state", "--state", "choice", "which blocks: sleeping (interruptible), in D state (uninterruptible), or all",
                default="all", choices=("all", "interruptible", "uninterruptible"),
                cli_help="only blocks in this task state: interruptible (S: sleeps, waits on locks and I/O "
                         "a signal can cut short), uninterruptible (D: mostly disk I/O) or all (default); "
                         "idle kernel threads (I) count under all only"),
            Arg("preempted", "--preempted", "flag", "also count waiting for a CPU after preemption",
                default=False, cli_help="also count time off-CPU after preemption (waiting for a CPU)"),
            Arg("top", "--top", "int", "threads shown", default=10, minimum=1, maximum=10000,
                cli_help="threads shown (default 10)"),
            Arg("stacks", "--stacks", "int", "stacks printed (the app gets every one)", default=5, minimum=1,
                maximum=10000, cli_help="stacks printed (default 5; --json and --folded give every one)"),
            Arg("user_stacks", "--user-stacks", "choice", "user stacks: long blocks unwound with CFI, or frame pointers",
                default="dwarf", choices=("dwarf", "fp"),
                cli_help="dwarf: blocks of --dwarf-min-us or more unwound with CFI, the rest by frame pointers "
                         "(default; fp where the kernel refuses); fp: frame pointers only"),
            Arg("dwarf_min_us", "--dwarf-min-us", "int", "blocks this long (us) or longer get a DWARF user stack",
                default=1000, minimum=0, cli_help="blocks of at least this many us get a DWARF user stack (default 1000)"),
            Arg("stack_size", "--stack-size", "int", "dwarf: user stack bytes copied per block", default=16384,
                minimum=4096, maximum=65536, metavar="BYTES",
                cli_help="dwarf: bytes of user stack copied for a long block (default 16384)"),
            Arg("python_frames", "--python-frames", "choice", "dwarf: CPython 3.11 function names in python stacks",
                default="on", choices=("on", "off"),
                cli_help="dwarf: the Python functions of CPython 3.11 processes in long blocks' stacks, merged "
                         "where _PyEval_EvalFrameDefault runs them (default on)"),
        ),
        probes=("sched:sched_switch",),
        # rows: level "thread" (these fields) and level "stack" (the same, plus kernel_frames and
        # user_frames innermost first, and folded "comm;root;...;leaf"), which the flame graph weighs
        fields=(
            Field("level", "Level"),
            Field("pid", "PID"),
            Field("tid", "TID"),
            Field("comm", "Command"),
            Field("total_ms", "Blocked", "ms"),
            Field("count", "Count", "count"),
            Field("min_us", "Min", "us"),
            Field("avg_us", "Avg", "us"),
            Field("max_us", "Max", "us"),
            Field("percentage", "Share", "pct"),
        ),
        chart=Chart("stacks", y="total_ms", record_kind="row", label="blocked time", unit="ms"),
        doc="docs/metrics/offcpu.md",
        key_figure=("total_time_ns", "ms blocked", 1e-6),
    )
)

METRICS.append(
    MetricSpec(
        name="cpuprofile",
        file="metrics/cpuprofile.py",
        description="Which code burns the CPU: sampled on-CPU stacks, top functions per process (self and total).",
        args=(
            *interval_args(),
            PID,
            TID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "top functions per process or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g",
                cli_help="top functions per process or per cgroup; with --folded, each stack's root is its "
                         "cgroup instead of its command (default process)"),
            Arg("frequency", "--frequency", "int", "samples per second per CPU", default=49, minimum=1,
                maximum=1000, short="-F", metavar="HZ", cli_help="samples per second per CPU (1..1000, default 49)"),
            Arg("user_only", "--user-only", "flag", "user stacks only", default=False, short="-U"),
            Arg("kernel_only", "--kernel-only", "flag", "kernel stacks only", default=False, short="-K"),
            Arg("user_stacks", "--user-stacks", "choice", "user stacks: unwound with CFI, or frame pointers",
                default="dwarf", choices=("dwarf", "fp", "kernel"),
                cli_help="dwarf: copy the top of the user stack and unwind it with CFI (default); "
                         "fp: the kernel's frame-pointer walk; kernel: unwound with CFI in BPF, counted there"),
            Arg("stack_size", "--stack-size", "int", "dwarf: user stack bytes copied per sample", default=16384,
                minimum=4096, maximum=65536, metavar="BYTES",
                cli_help="dwarf: bytes of user stack copied per sample, a multiple of 4096 (default 16384)"),
            Arg("python_frames", "--python-frames", "choice", "dwarf: CPython 3.11 function names in python stacks",
                default="on", choices=("on", "off"),
                cli_help="dwarf: the Python functions of CPython 3.11 processes, merged where "
                         "_PyEval_EvalFrameDefault runs them (default on)"),
            Arg("include_idle", "--include-idle", "flag", "count the idle task (pid 0) too", default=False),
            Arg("folded", "--folded", "flag", "folded stacks of the whole run instead of the tables", default=False,
                short="-f", form=False,
                cli_help="print the whole run as folded stacks (comm;root;...;leaf count) at the end"),
            Arg("top", "--top", "int", "functions shown per process", default=10, minimum=1, maximum=1000,
                cli_help="functions shown per process (default 10)"),
            Arg("processes", "--processes", "int", "processes shown", default=10, minimum=1, maximum=1000,
                cli_help="processes shown (default 10)"),
        ),
        probes=("perf:cpu-clock", "sched:sched_process_fork", "sched:sched_process_exec"),
        # rows: the top functions of a process (self and total samples and shares); "stack" records:
        # one per distinct (pid, stack) with its count and frames root first ({name, module, kind})
        fields=(
            Field("pid", "PID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("function", "Function"),
            Field("module", "Module"),
            Field("self_samples", "Self", "count"),
            Field("self_pct", "Self %", "pct"),
            Field("total_samples", "Total", "count"),
            Field("total_pct", "Total %", "pct"),
        ),
        chart=Chart("stacks", y="count", record_kind="stack", label="samples", unit="count"),
        doc="docs/metrics/cpuprofile.md",
        key_figure=("samples", "samples", 1),
    )
)

METRICS.append(
    MetricSpec(
        name="compmem",
        file="metrics/compmem.py",
        description="Kernel memory per process (allocated, outstanding), leak suspects by kernel stack, RSS, VmSize.",
        args=(
            *interval_args(),
            PID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "process rows per process or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g",
                cli_help="the table: a row per process (level process) or per cgroup (level cgroup)"),
            Arg("top", "--top", "int", "processes shown", default=10, minimum=1, maximum=1000, short="-T",
                cli_help="processes shown (default 10)"),
            Arg("stacks", "--stacks", "int", "outstanding-allocation stacks printed (the app gets every one; "
                "0: none, no stack walked)", default=5,
                minimum=0, maximum=1000, short="-S",
                cli_help="outstanding-allocation stacks printed (default 5; --json gives every one; "
                         "0: none, and no stack is walked)"),
            Arg("stack_sort", "--stack-sort", "choice", "stacks: oldest allocation first, most bytes, most allocations",
                default="oldest", choices=("oldest", "bytes", "count"),
                cli_help="order of the stacks: oldest allocation first (leak suspects), most bytes, most allocations"),
            Arg("stack_depth", "--stack-depth", "int", "frames shown per stack", default=12, minimum=1, maximum=127,
                cli_help="frames shown per stack (default 12)"),
            Arg("min_age", "--min-age", "float", "stacks: only allocations outstanding at least this many seconds",
                minimum=0.001, sample=5, metavar="SECONDS",
                cli_help="stacks: only allocations outstanding at least this long"),
            Arg("caches", "--caches", "flag", "also slab-cache allocations (sockets, files, inodes)", default=False,
                short="-C", cli_help="also trace kmem_cache_alloc/free (slab caches: sockets, files, inodes)"),
            Arg("min_bytes", "--min-bytes", "int", "ignore allocations smaller than this", minimum=1, sample=64,
                cli_help="ignore allocations smaller than this many bytes"),
            # at most 4 Mi: the map is preallocated
            Arg("max_allocs", "--max-allocs", "int", "outstanding allocations tracked at most (more: lost)",
                default=65536, minimum=1, maximum=4194304,
                cli_help="outstanding allocations tracked at most; more are counted as lost (default 65536)"),
            Arg("user_stacks", "--user-stacks", "choice",
                "user stacks of the allocating syscalls: unwound with CFI, or frame pointers",
                default="dwarf", choices=("dwarf", "fp"),
                cli_help="dwarf: copy the top of the user stack once per allocating syscall and unwind it "
                         "with CFI (default; fp where the kernel refuses); fp: the kernel's frame-pointer walk"),
            Arg("stack_size", "--stack-size", "int", "dwarf: user stack bytes copied per syscall", default=16384,
                minimum=4096, maximum=65536, metavar="BYTES",
                cli_help="dwarf: bytes of user stack copied per allocating syscall, whole pages (default 16384)"),
        ),
        probes=("kmem:kmalloc", "kmem:kfree", "sched:sched_process_exec"),
        fields=(
            Field("level", "Level"),
            Field("pid", "PID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("outstanding_bytes", "Outstanding", "bytes"),
            Field("active_allocs", "Active", "count"),
            Field("alloc_bytes", "Allocated", "bytes"),
            Field("allocs", "Allocations", "count"),
            Field("rss_bytes", "RSS", "bytes"),
            Field("vm_size_bytes", "VmSize", "bytes"),
            Field("oldest_age_s", "Oldest (s)"),
            Field("kernel_frames", "Stack (innermost first)"),
            Field("user_frames", "User stack (innermost first)"),
        ),
        # rows: level "process" and level "stack" (leak suspects: kernel_frames and user_frames innermost first)
        chart=Chart("stacks", y="outstanding_bytes", record_kind="row", label="outstanding kernel bytes",
                    unit="bytes", snapshot=True),
        doc="docs/metrics/compmem.md",
        key_figure=("outstanding_bytes", "KiB outstanding", 1 / 1024),
    )
)

METRICS.append(
    MetricSpec(
        name="schparm",
        file="metrics/schparm.py",
        description="Scheduling parameters (policy, nice, priority) and context switches of each thread at exit.",
        args=(
            *interval_args(),   # the summary's period; events print as threads exit
            PID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "also each interval's exits summed per cgroup",
                default="process", choices=("process", "cgroup"), short="-g",
                cli_help="process: a line per exiting thread; cgroup: each interval, exits, run time and "
                         "switches summed per cgroup (with --json, rows of level cgroup beside the events)"),
        ),
        probes=("sched:sched_process_exit", "sched:sched_switch", "task:task_newtask",
                "syscalls:sys_enter_sched_setscheduler", "syscalls:sys_exit_sched_setscheduler",
                "syscalls:sys_enter_sched_setattr", "syscalls:sys_exit_sched_setattr",
                "syscalls:sys_enter_sched_setparam", "syscalls:sys_exit_sched_setparam",
                "syscalls:sys_enter_setpriority", "syscalls:sys_exit_setpriority"),
        fields=(
            Field("comm", "Command"),
            Field("pid", "PID"),
            Field("tid", "TID"),
            Field("ppid", "PPID"),
            Field("cpu", "CPU"),
            Field("prio", "Prio"),
            Field("nice", "Nice"),
            Field("policy", "Policy"),
            Field("rt_priority", "RT prio"),
            Field("runtime_ms", "Run time", "ms"),
            Field("voluntary", "Voluntary", "count"),
            Field("involuntary", "Involuntary", "count"),
            Field("cgroup", "Cgroup"),
        ),
        chart=Chart("scatter", y="runtime_ms", record_kind="event", label="run time at exit", unit="ms",
                    series="policy"),
        table_kind="event",
        doc="docs/metrics/schparm.md",
        key_figure=("exits", "exits", 1),
    )
)
METRICS.append(
    MetricSpec(
        name="cacheraw",
        file="metrics/cacheraw.py",
        description="Page-cache read hits and misses (pages), write hits and dirtied folios per process, "
                    "with the system's Cached and Buffers.",
        args=(
            *interval_args(),
            PID,
            CGROUP,
            Arg("group_by", "--group-by", "choice", "a row per process or per cgroup", default="process",
                choices=("process", "cgroup"), short="-g", cli_help="a row per process or per cgroup (default process)"),
            Arg("sort", "--sort", "choice", "order processes by", default="reads",
                choices=("reads", "read_hits", "read_misses", "read_hit_pct", "write_hits", "write_misses",
                         "dirtied", "write_hit_pct"), short="-s",
                cli_help="order processes by this column (default reads = read hits + misses)"),
            Arg("reverse", "--reverse", "flag", "smallest first", default=False, short="-r"),
            Arg("max_rows", "--max-rows", "int", "processes shown", default=20, minimum=1, maximum=100000, short="-n",
                cli_help="processes shown (default 20)"),
        ),
        probes=("filemap:mm_filemap_get_pages", "filemap:mm_filemap_add_to_page_cache",
                "writeback:writeback_dirty_folio", "sched:sched_process_exec"),
        fields=(
            Field("pid", "PID"),
            Field("uid", "UID"),
            Field("comm", "Command"),
            Field("cgroup", "Cgroup"),
            Field("read_hit_pages", "Read hits (pages)", "count"),
            Field("read_miss_pages", "Read misses (pages)", "count"),
            Field("read_hit_pct", "Read hit", "pct"),
            Field("write_hit_folios", "Write hits (folios)", "count"),
            Field("write_miss_folios", "Write misses (folios)", "count"),
            Field("dirtied_folios", "Dirtied (folios)", "count"),
            Field("write_hit_pct", "Write hit", "pct"),
        ),
        chart=Chart("timeseries", y="read_hits_per_s", record_kind="summary", label="page-cache read hits/s",
                    unit="/s"),
        doc="docs/metrics/cacheraw.md",
        key_figure=("read_hit_pct", "% read hits", 1),
    )
)

def get(name: str) -> MetricSpec:
    for spec in METRICS:
        if spec.name == name:
            return spec
    raise KeyError(f"no metric named {name!r}; known: {', '.join(s.name for s in METRICS)}")
