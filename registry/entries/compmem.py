"""The compmem entry: what metrics/compmem.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="compmem",
    file="metrics/compmem.py",
    description="Kernel memory per process (allocated, outstanding), leak suspects by kernel stack, RSS, VmSize.",
    args=(
        *interval_args(),
        PID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
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
            "user stacks of the allocating syscalls: unwound with CFI in the kernel or from copies, or frame pointers",
            default="kernel", choices=("dwarf", "fp", "kernel"),
            cli_help="kernel: unwound with CFI in BPF once per allocating syscall, each stack stored once "
                     "(default; fp where the kernel refuses); dwarf: copy the top of the user stack once per "
                     "allocating syscall and unwind it with CFI in user space; fp: the kernel's frame-pointer walk"),
        Arg("sample_bytes", "--sample-bytes", "int", "keep one allocation in about this many bytes, scaled "
            "(0: every allocation)", default=65536, minimum=0, maximum=1 << 30, metavar="BYTES",
            cli_help="keep one allocation in about every BYTES bytes, with its stacks, each standing for "
                     "BYTES (or its size, if larger): outstanding figures are estimates, allocated ones "
                     "exact (default 65536; 0: every allocation kept, every figure exact)"),
        Arg("stack_rate", "--stack-rate", "int",
            "with --sample-bytes N: at most about this many kept allocations (stack walks) a second per CPU "
            "(N raised under load; 0: no cap)", default=500, minimum=0, maximum=1000000, metavar="R",
            cli_help="with --sample-bytes N > 0: where one allocation in about N bytes would keep more than R "
                     "a second on a CPU (each a stack walk), that CPU keeps one in about 2N, 4N... bytes "
                     "instead, each standing for as many (default 500; 0: N whatever the load)"),
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
    timeline=Chart("timeseries", y="outstanding_bytes", record_kind="row", label="outstanding kernel memory per "
                   "process", unit="bytes", series="pid", where=(("level", "process"),), summed=True),
    # frame-pointer user stacks: no 16 KiB stack copy and CFI unwinding per allocating syscall
    sampling=(("user_stacks", "=", "fp"), ("sample_bytes", ">=", 65536)),
    doc="docs/metrics/compmem.md",
    key_figure=Figure("outstanding_bytes", "bytes", "outstanding"),
    summary=(
        Field("outstanding_bytes", "Outstanding", "bytes"),
        Field("active_allocs", "Outstanding allocations", "count"),
        Field("alloc_bytes", "Allocated", "bytes"),
        Field("allocs", "Allocations", "count"),
        Field("freed_bytes", "Freed", "bytes"),
        Field("frees", "Frees", "count"),
        Field("missed_frees", "Frees of untracked allocations", "count"),
        Field("processes", "Processes", "count"),
        Field("interval_s", "Interval length", "s"),
        Field("mem_total_bytes", "Memory", "bytes"),
        Field("mem_free_bytes", "Free", "bytes"),
        Field("mem_available_bytes", "Available", "bytes"),
        Field("buffers_bytes", "Buffers", "bytes"),
        Field("cached_bytes", "Cached", "bytes"),
        Field("slab_bytes", "Slab", "bytes"),
        Field("slab_reclaimable_bytes", "Slab reclaimable", "bytes"),
        Field("slab_unreclaimable_bytes", "Slab unreclaimable", "bytes"),
        Field("kernel_stack_bytes", "Kernel stacks", "bytes"),
        Field("page_tables_bytes", "Page tables", "bytes"),
        Field("vmalloc_used_bytes", "Vmalloc used", "bytes"),
    ),
)
