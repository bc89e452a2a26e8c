"""One running metric, the card's entry point for it: the worker is plain Python on a thread of its own
(monitor/metric_worker.py: the subprocess, its NDJSON lines parsed into records, callbacks), so the
headless runner needs no Qt; the window carries its callbacks to the GUI thread through the Qt adapter
in gui/thread_relay.py. Both are re-exported here under the names the tests and callers use.
"""

from gui.thread_relay import GuiThreadRelay
from monitor.metric_worker import MetricWorker, WorkerCallbacks, build_argv, parse_records

Worker = MetricWorker

__all__ = ["GuiThreadRelay", "MetricWorker", "Worker", "WorkerCallbacks", "build_argv", "parse_records"]
