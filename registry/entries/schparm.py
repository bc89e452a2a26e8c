"""The schparm entry: what metrics/schparm.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="schparm",
    file="metrics/schparm.py",
    description="Scheduling parameters (policy, nice, priority) and context switches of each thread at exit.",
    args=(
        *interval_args(),   # the summary's period; events print as threads exit
        PID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
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
    key_figure=Figure("exits", "/s", "exits", per=("interval_s",)),
    summary=(
        Field("exits", "Exits", "count"),
        Field("interval_s", "Interval length", "s"),
    ),
)
