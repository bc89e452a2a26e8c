"""The tcpconnlat entry: what metrics/tcpconnlat.py takes, records and draws (see registry/__init__.py)."""

from registry.args import APP_PID, CGROUP, INCLUDE_SELF, PID, Arg, Shortcut, interval_args
from registry.spec import Chart, Field, Figure, MetricSpec

SPEC = MetricSpec(
    name="tcpconnlat",
    file="metrics/tcpconnlat.py",
    description="Active TCP connect latency per connection (SYN_SENT to ESTABLISHED); failed connects too.",
    args=(
        *interval_args(),
        PID,
        CGROUP,
        INCLUDE_SELF,
        APP_PID,
        Arg("lport", "--lport", "int", "trace this local (source) port only", minimum=1, maximum=65535,
            sample=40000),
        Arg("family", "--family", "choice", "IPv4 (4) or IPv6 (6) only", choices=("4", "6"), sample="4",
            cli_help="trace IPv4 (4) or IPv6 (6) only",
            shortcuts=(Shortcut(("-4", "--ipv4"), "4", "IPv4 only"), Shortcut(("-6", "--ipv6"), "6", "IPv6 only"))),
        Arg("timestamp", "--timestamp", "flag", "include a Time (s) column", default=False, short="-t"),
        Arg("min_ms", "--min-ms", "float", "only connects taking at least this many ms (failed: always)",
            minimum=0.001, sample=1, short="-m", metavar="MS",
            cli_help="only connects that took at least MS milliseconds (failed ones always shown)"),
    ),
    probes=("sock:inet_sock_set_state",),
    fields=(
        Field("time_s", "Time (s)"),
        Field("pid", "PID"),
        Field("comm", "Command"),
        Field("cgroup", "Cgroup"),
        Field("ip", "IP"),
        Field("saddr", "Source"),
        Field("lport", "Local port"),
        Field("daddr", "Destination"),
        Field("dport", "Port"),
        Field("latency_ms", "Latency", "ms"),
        Field("status", "Status"),
    ),
    chart=Chart("scatter", y="latency_ms", record_kind="event", label="connect latency", unit="ms",
                series="status"),
    more_charts=(
        Chart("heatmap", y="latency_ms", record_kind="event", label="connect latency over time", unit="us",
              scale=1000),
    ),
    table_kind="event",
    doc="docs/metrics/tcpconnlat.md",
    key_figure=Figure("connects", "/s", "connects", per=("interval_s",)),
    summary=(
        Field("connects", "Connects", "count"),
        Field("failed", "Failed", "count"),
        Field("avg_ms", "Avg latency", "ms"),
        Field("max_ms", "Max latency", "ms"),
        Field("interval_s", "Interval length", "s"),
    ),
)
