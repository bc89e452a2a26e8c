"""The cpuschedrun entry: what metrics/cpuschedrun.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, TID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="cpuschedrun",
    file="metrics/cpuschedrun.py",
    description="CPU run time and run-queue latency: log2 histograms, and per thread CPU%, run and wait ms.",
    args=(
        *interval_args(),
        PID,
        TID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
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
        Field("unseen_switch_ins", "Runs with an unseen switch in", "count"),
    ),
    chart=Chart("histogram", y="count", record_kind="hist", label="run time", unit="us", series="run_time"),
    more_charts=(
        Chart("heatmap", y="count", record_kind="hist", label="run-queue latency over time", unit="us",
              series="runq_latency"),
        Chart("heatmap", y="count", record_kind="hist", label="run time over time", unit="us",
              series="run_time"),
    ),
    doc="docs/metrics/cpuschedrun.md",
    key_figure=Figure("run_ms", "pct", "CPU", per=("interval_s",), scale=0.1),
    summary=(
        Field("run_ms", "Run time", "ms"),
        Field("wait_ms", "Run-queue wait", "ms"),
        Field("runs", "Runs", "count"),
        Field("waits", "Waits", "count"),
        Field("threads", "Threads", "count"),
        Field("interval_s", "Interval length", "s"),
    ),
)
