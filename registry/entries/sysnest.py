"""The sysnest entry: what metrics/sysnest.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, PPID, TID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="sysnest",
    file="metrics/sysnest.py",
    description="Syscall counts and latency per process and syscall, nested by process or by syscall.",
    args=(
        *interval_args(),
        PID,
        TID,
        PPID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
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
            default=False, short="-m",
            cli_help="show every time column in ms (default: each in the unit its values read best in)"),
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
    # one syscall in 8 timed, all counted: 0.99x the floor + clock where the exact default is 1.32x
    # (BENCHMARKS.md, targets)
    sampling=(("sample", ">=", 8),),
    doc="docs/metrics/sysnest.md",
    key_figure=Figure("per_sec", "/s", "syscalls"),
    summary=(
        Field("per_sec", "Syscalls", "/s"),
        Field("syscalls", "Syscalls", "count"),
        Field("errors", "Errors", "count"),
        Field("processes", "Processes", "count"),
        Field("interval_s", "Interval length", "s"),
    ),
)
