"""The cpuprofile entry: what metrics/cpuprofile.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, SOURCE_LINES, TID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="cpuprofile",
    file="metrics/cpuprofile.py",
    description="Which code burns the CPU: sampled on-CPU stacks, top functions per process (self and total).",
    args=(
        *interval_args(),
        PID,
        TID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
        Arg("group_by", "--group-by", "choice", "top functions per process or per cgroup", default="process",
            choices=("process", "cgroup"), short="-g",
            cli_help="top functions per process or per cgroup; with --folded, each stack's root is its "
                     "cgroup instead of its command (default process)"),
        Arg("frequency", "--frequency", "int", "samples per second per CPU", default=49, minimum=1,
            maximum=1000, short="-F", metavar="HZ", cli_help="samples per second per CPU (1..1000, default 49)"),
        Arg("user_only", "--user-only", "flag", "user stacks only", default=False, short="-U"),
        Arg("kernel_only", "--kernel-only", "flag", "kernel stacks only", default=False, short="-K"),
        Arg("user_stacks", "--user-stacks", "choice",
            "user stacks: unwound with CFI in the kernel or from copies in user space, or frame pointers",
            default="kernel", choices=("dwarf", "fp", "kernel"),
            cli_help="kernel: unwound with CFI in BPF, counted there (default; fp where the kernel refuses); "
                     "dwarf: copy the top of the user stack and unwind it with CFI in user space; "
                     "fp: the kernel's frame-pointer walk"),
        Arg("stack_size", "--stack-size", "int", "dwarf: user stack bytes copied per sample", default=16384,
            minimum=4096, maximum=65536, metavar="BYTES",
            cli_help="dwarf: bytes of user stack copied per sample, a multiple of 4096 (default 16384)"),
        Arg("python_frames", "--python-frames", "choice", "dwarf: CPython 3.11 function names in python stacks",
            default="on", choices=("on", "off"),
            cli_help="dwarf: the Python functions of CPython 3.11 processes, merged where "
                     "_PyEval_EvalFrameDefault runs them (default on)"),
        SOURCE_LINES,
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
    # each process's samples of an interval, over the frequency and the interval's length: % of one CPU
    timeline=Chart("timeseries", y="count", record_kind="stack", label="CPU per process", unit="pct", series="pid",
                   summed=True, per_interval=("frequency_hz", "interval_s"), scale=100),
    # fewer samples, walked by frame pointers: at 99 Hz fp took 6.89 ms/s of CPU where DWARF took 10.34
    # (BENCHMARKS.md section 9); 19 Hz is 2.6x fewer samples than the default 49
    sampling=(("frequency", "<=", 19), ("user_stacks", "=", "fp")),
    doc="docs/metrics/cpuprofile.md",
    key_figure=Figure("samples", "pct", "CPU", per=("frequency_hz", "interval_s"), scale=100),
    summary=(
        Field("samples", "Samples", "count"),
        Field("processes", "Processes", "count"),
        Field("cgroups", "Cgroups", "count"),
        Field("lost", "Lost", "count"),
        Field("frequency_hz", "Frequency", "hz"),
        Field("interval_s", "Interval length", "s"),
        Field("unnamed", "Unnamed frames", "count"),
        Field("perf_map_lines_skipped", "Perf map lines skipped", "count"),
    ),
)
