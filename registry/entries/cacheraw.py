"""The cacheraw entry: what metrics/cacheraw.py takes, records and draws (see registry/__init__.py)."""

from registry.args import CGROUP, PID, Arg, interval_args
from registry.spec import Chart, Field, MetricSpec

SPEC = MetricSpec(
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
