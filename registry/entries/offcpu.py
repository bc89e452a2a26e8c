"""The offcpu entry: what metrics/offcpu.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, SOURCE_LINES, TID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="offcpu",
    file="metrics/offcpu.py",
    description="Where threads block: off-CPU time per thread (count, min/avg/max, share) and top stacks.",
    args=(
        *interval_args(),
        PID,
        TID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
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
        Arg("user_stacks", "--user-stacks", "choice",
            "user stacks: every block's walked with CFI in the kernel, long blocks unwound with CFI, or frame pointers",
            default="kernel", choices=("dwarf", "fp", "kernel"),
            cli_help="kernel: every block's unwound with CFI in BPF at its switch out, each stack stored once "
                     "(default; fp where the kernel refuses); dwarf: blocks of --dwarf-min-us or more unwound "
                     "with CFI in user space from a stack copy, the rest by frame pointers; fp: frame pointers only"),
        Arg("stack_every", "--stack-every", "int",
            "stacks for a thread's first block in 10 ms and one in N of the rest, at random (1: every block)",
            default=16, minimum=1, maximum=4096, metavar="N",
            cli_help="take the stacks of a thread's first block after 10 ms without any, and of one block in N "
                     "of the rest, chosen at random (default 16; 1: every block's); every block is still timed "
                     "and counted, and each thread's exact time and count are shared among its sampled stacks"),
        Arg("stack_rate", "--stack-rate", "int",
            "with --stack-every N: at most about this many stack walks a second per CPU (N raised under load; 0: no cap)",
            default=500, minimum=0, maximum=1000000, metavar="R",
            cli_help="with --stack-every N > 1: where one block in N would take more than R stack walks a "
                     "second on a CPU, that CPU draws one in 2N, 4N... instead, each standing for as many "
                     "(default 500; 0: N whatever the load)"),
        Arg("dwarf_min_us", "--dwarf-min-us", "int", "blocks this long (us) or longer get a DWARF user stack",
            default=1000, minimum=0, cli_help="blocks of at least this many us get a DWARF user stack (default 1000)"),
        Arg("stack_size", "--stack-size", "int", "dwarf: user stack bytes copied per block", default=16384,
            minimum=4096, maximum=65536, metavar="BYTES",
            cli_help="dwarf: bytes of user stack copied for a long block (default 16384)"),
        Arg("python_frames", "--python-frames", "choice", "kernel, dwarf: CPython 3.11 function names in python stacks",
            default="on", choices=("on", "off"),
            cli_help="kernel and dwarf: the Python functions of CPython 3.11 processes in blocks' stacks (dwarf: "
                     "long blocks'), merged where _PyEval_EvalFrameDefault runs them (default on)"),
        SOURCE_LINES,
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
    chart=Chart("stacks", y="total_ms", record_kind="row", label="blocked time", unit="ms", blocked=True),
    # each process's blocked time of an interval (all its stacks) per second of the interval
    timeline=Chart("timeseries", y="total_ms", record_kind="row", label="blocked time per process", unit="ms/s",
                   series="pid", where=(("level", "stack"),), summed=True, per_interval=("interval_s",)),
    # the stacks of one block in 64: the stack walks are most of a block's cost (the user-stack modes cost
    # about the same under a database's switches: BENCHMARKS.md section 11); its default already takes one in 16
    sampling=(("stack_every", ">=", 64),),
    doc="docs/metrics/offcpu.md",
    key_figure=Figure("total_time_ns", "s/s", "blocked", per=("interval_s",), scale=1e-9),
    summary=(
        Field("total_time_ns", "Blocked", "ns"),
        Field("total_events", "Blocks", "count"),
        Field("avg_time_ns", "Avg block", "ns"),
        Field("min_time_ns", "Shortest", "ns"),
        Field("max_time_ns", "Longest", "ns"),
        Field("threads", "Threads", "count"),
        Field("interval_s", "Interval length", "s"),
        Field("user_stacks_cut", "User stacks cut", "count"),
    ),
)
