"""Test-only registry entries for the synthetic metrics in tests/support/fake_metrics/, passed to the
controller through its `registry` argument (they are never in config.METRICS)."""

from config import Arg, Chart, Field, MetricSpec

FLOOD = MetricSpec(
    name="flood", file="tests/support/fake_metrics/flood.py", description="prints NDJSON as fast as it can",
    args=(Arg("lines", "--lines", "int", "records to print", default=100_000, minimum=0),
          Arg("noise", "--noise", "flag", "non-record lines too", default=False),
          Arg("linger", "--linger", "float", "seconds to stay alive after", default=0.0, minimum=0)),
    probes=(), fields=(Field("i", "I"),), chart=Chart("scatter", y="i", record_kind="event"), table_kind="event",
)
CRASHER = MetricSpec(
    name="crasher", file="tests/support/fake_metrics/crasher.py", description="loads BPF, then crashes",
    args=(Arg("after", "--after", "float", "seconds before the crash", default=1.0, minimum=0),),
    probes=("raw_syscalls:sys_enter",), fields=(Field("n", "N"),), chart=Chart("timeseries", y="n", record_kind="row"),
)
STUBBORN = MetricSpec(
    name="stubborn", file="tests/support/fake_metrics/stubborn.py", description="ignores SIGINT and SIGTERM",
    args=(), probes=(), fields=(Field("n", "N"),), chart=Chart("timeseries", y="n", record_kind="row"),
)
# its sampling mode spins less: what the overhead budget switches it to
BURNER = MetricSpec(
    name="burner", file="tests/support/fake_metrics/burner.py", description="spins a share of the CPU",
    args=(Arg("duty", "--duty", "float", "share of the CPU spun", default=0.3, minimum=0, maximum=1),
          Arg("interval", "--interval", "float", "seconds between summaries", default=0.5, minimum=0.05)),
    probes=(), fields=(Field("duty", "Duty"),), chart=Chart("timeseries", y="duty", record_kind="summary"),
    sampling=(("duty", "<=", 0.05),),
)
