"""The pagefault entry: what metrics/pagefault.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
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
        INCLUDE_SELF,
        APP_PID,
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
    key_figure=Figure("faults_per_sec", "/s", "faults"),
    summary=(
        Field("faults_per_sec", "Faults", "/s"),
        Field("minor_per_sec", "Minor", "/s"),
        Field("major_per_sec", "Major", "/s"),
        Field("minor", "Minor faults", "count"),
        Field("major", "Major faults", "count"),
        Field("total", "Faults", "count"),
        Field("processes", "Processes", "count"),
        Field("interval_s", "Interval length", "s"),
    ),
)
