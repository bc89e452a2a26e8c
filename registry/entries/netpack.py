"""The netpack entry: what metrics/netpack.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, Arg, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
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
        INCLUDE_SELF,
        APP_PID,
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
    key_figure=Figure("per_sec", "/s", "packets"),
    summary=(
        Field("per_sec", "Packets", "/s"),
        Field("packets", "Packets", "count"),
        Field("devices", "Devices", "count"),
        Field("unmatched", "Unmatched", "count"),
        Field("interval_s", "Interval length", "s"),
    ),
)
