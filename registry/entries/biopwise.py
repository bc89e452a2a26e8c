"""The biopwise entry: what metrics/biopwise.py takes, records and draws (see registry/__init__.py)."""

from registry.args import CGROUP, PID, Arg, interval_args
from registry.spec import Chart, Field, MetricSpec

SPEC = MetricSpec(
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
