"""`python main_app.py --headless ...`: the window's controller without a window.

Starts the metrics, forwards their records to the collector, prints a progress line every few seconds
and, at the end (--duration, every metric ended, Ctrl-C or SIGTERM), a summary per metric. Exit status:
0, 1 when a metric failed to start or ended with an error, 2 for bad arguments.

With --budget, the profiler's own CPU (every metric's BPF programs and process, and this process) is
sampled once a second; when it stays over the budget for --over-budget-for seconds, the metric that
costs most is warned about, switched to its sampling mode or stopped (--over-budget), one line on stderr
and a `note` record in its stream each time (monitor/budget_keeper.py).

With --command, the command runs in a cgroup of its own that every metric filters on, from its first
instruction (monitor/command.py); the run ends when it exits, and its exit status is the run's (127:
it could not be started; 128+N: signal N killed it).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sqlite3
import sys
import time
from typing import Any

import config
from host.elevation import DEFAULT_ELEVATE
from monitor import budget
from monitor.events import EventQueue

PROG = "main_app.py --headless"
EXAMPLES = """examples:
    main_app.py --headless --metric sysnest --duration 60 --server http://127.0.0.1:5000
    main_app.py --headless --metric sysnest --arg sysnest.interval=2 --arg sysnest.group_by=syscall
    main_app.py --headless --metric sysnest --metric offcpu --server http://lab:5000 --token T
    main_app.py --headless --metric sysnest --metric pagefault --command 'make -j2'
    main_app.py --headless --metric sysnest --metric offcpu --duration 30 --record run.ndjson
    main_app.py --headless --metric sysnest --metric cpuprofile --budget 2 --over-budget sample"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{PROG}: error: {message}\n")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, dict[str, Any]]]:
    """Arguments, and the raw values per metric from --arg (exits 2 with one line when bad)."""
    parser = _parser()
    args = parser.parse_args(argv)
    known = {s.name: s for s in config.METRICS}
    for name in args.metric:
        if name not in known:
            parser.error(f"unknown metric {name!r} (known: {', '.join(known)})")
    if len(set(args.metric)) != len(args.metric):
        parser.error("a metric is given twice")
    values: dict[str, dict[str, Any]] = {name: {} for name in args.metric}
    for item in args.arg:
        name, key, value = _metric_value(parser, item, values, known)
        values[name][key] = value
    if args.command is not None:
        for name in args.metric:
            if not any(a.name == "cgroup" for a in known[name].args):
                parser.error(f"--command: {name} cannot be limited to a cgroup")
            if values[name].get("cgroup"):
                parser.error(f"--command: {name}.cgroup is set by --command")
    for name, raw in values.items():
        try:
            known[name].command(raw)
        except ValueError as exc:
            parser.error(f"{name}: {exc}")
    if args.budget is None and (args.over_budget is not None or args.over_budget_for is not None):
        args.budget = budget.DEFAULT_BUDGET_PCT          # an action asked for: the default budget
    args.over_budget = args.over_budget or "warn"
    args.over_budget_for = args.over_budget_for or budget.DEFAULT_HOLD_S
    return args, values


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description="Run metrics without a window and send their records to a collector.",
                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metric", action="append", required=True, metavar="NAME",
                        help=f"a metric to run (repeatable); one of {', '.join(s.name for s in config.METRICS)}")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME.key=value",
                        help="an argument of a metric, by its registry name (e.g. sysnest.interval=2)")
    parser.add_argument("--duration", type=_positive, metavar="S", help="seconds to run (default: until Ctrl-C)")
    parser.add_argument("--server", metavar="URL", help="collector URL (default: none, records stay local)")
    parser.add_argument("--token", default=os.environ.get("PROFILER_TOKEN"),
                        help="collector token (default: $PROFILER_TOKEN)")
    parser.add_argument("--state-dir", metavar="DIR", help="outbox and pid files (default: XDG state dir)")
    parser.add_argument("--elevate", metavar="CMD", default=" ".join(DEFAULT_ELEVATE),
                        help="command that runs a metric as root when this is not root (default: 'sudo -n')")
    parser.add_argument("--progress", type=_positive, default=5.0, metavar="S", help="seconds between progress lines")
    parser.add_argument("--summary-json", metavar="FILE", help="also write the summary as JSON to FILE")
    parser.add_argument("--record", metavar="FILE",
                        help="save every record of every metric to FILE (NDJSON), for the window to open later "
                             "(main_app.py --open FILE)")
    parser.add_argument("--command", metavar="'CMD ARGS'",
                        help="run this command in a cgroup of its own, every metric limited to it from its first "
                             "instruction; the run ends when it exits, with its exit status")
    parser.add_argument("--budget", type=_checked(budget.parse_budget), metavar="PCT",
                        help="overhead budget: the share of the machine's CPU (all CPUs, %%) the profiler may take, "
                             "above 0 and at most 100 (default: not watched; "
                             f"{budget.DEFAULT_BUDGET_PCT:g} with --over-budget)")
    parser.add_argument("--over-budget", choices=tuple(budget.ACTIONS),
                        help="over the budget for --over-budget-for seconds: warn (default), switch the metric that "
                             "costs most to its sampling mode, or stop it")
    parser.add_argument("--over-budget-for", type=_checked(budget.parse_hold), metavar="S",
                        help=f"seconds over the budget before acting (default {budget.DEFAULT_HOLD_S:g})")
    return parser


def _checked(parse: Any) -> Any:
    """An argparse type from a budget parser: its one-line reason as argparse's error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except budget.BudgetError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def _metric_value(parser: _Parser, item: str, values: dict[str, dict[str, Any]],
                  known: dict[str, config.MetricSpec]) -> tuple[str, str, Any]:
    """(metric, argument name, raw value) of one --arg NAME.key=value; a flag's value as a bool."""
    name, dot, rest = item.partition(".")
    key, eq, value = rest.partition("=")
    if not (dot and eq and key):
        parser.error(f"--arg {item!r}: expected NAME.key=value")
    if name not in values:
        parser.error(f"--arg {item!r}: {name!r} is not one of the --metric names")
    arg = next((a for a in known[name].args if a.name == key.replace("-", "_")), None)
    if arg is None:
        parser.error(f"--arg {item!r}: {name} has no argument {key!r} "
                     f"(it has: {', '.join(a.name for a in known[name].args)})")
    if arg.type != "flag":
        return name, arg.name, value
    flag = value.strip().lower()
    if flag not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
        parser.error(f"--arg {item!r}: {key} is a flag: true or false")
    return name, arg.name, flag in ("1", "true", "yes", "on")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text}")
    return value


class Run:
    """One headless run: the controller, the periodic work and what is printed. No Qt: the workers' news
    reaches this thread through an EventQueue, which the loop waits on between its periodic tasks."""

    def __init__(self, args: argparse.Namespace, values: dict[str, dict[str, Any]], command: Any = None,
                 recorder: Any = None) -> None:
        from monitor.controller import MonitorController  # noqa: PLC0415 - not needed for --help

        self.args, self.values = args, values
        self.command = command
        self.attached: set[str] = set()
        if command is not None:
            for name in args.metric:
                values[name]["cgroup"] = command.cgroup
        self.recorder = recorder
        self.events = EventQueue()
        self.controller = MonitorController(args.server, args.token, state_dir=args.state_dir,
                                            elevate=shlex.split(args.elevate), relay=self.events)
        self.controller.log.connect(self._on_log)
        self.controller.metric_finished.connect(self._on_finished)
        self.latest: dict[str, dict] = {}       # each metric's newest summary record: its key figure
        self.controller.records.connect(self._on_records)
        self.meta_pids: dict[str, int] = {}     # each metric script's pid, from its meta record
        self.keeper: Any = None                 # --budget: monitor/budget_keeper.py's, else None
        self._budget_parts: tuple = ()          # its bpf_stats switch, reader and reading thread
        self.started = time.monotonic()
        self.stop_reason = ""
        self.signals = 0
        # (seconds between runs, task, when next due)
        self._periodic = [[args.progress, self._progress, self.started + args.progress]]
        if command is not None:
            self._periodic.append([0.02, self._poll_command, self.started])
        if args.budget is not None:
            from monitor.budget_keeper import BudgetKeeper  # noqa: PLC0415 - only with --budget

            watch = budget.BudgetWatch(args.budget, args.over_budget, args.over_budget_for)
            self.keeper = BudgetKeeper(self.controller, watch, self._on_budget)
            self._periodic.append([1.0, self._cost_targets, self.started])
        self._deadline = self.started + args.duration if args.duration else None

    def exec(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.command is not None:
                self.command.spawn()
            for name in self.args.metric:
                self.controller.start_metric(name, self.values[name])
            if self.keeper is not None:
                self._start_budget()
            print(f"headless: running {', '.join(self.args.metric)}; collector {self.args.server or 'none'}; "
                  f"run {self.controller.transport.run_id}", flush=True)
            self._loop()
            print(f"headless: stopping ({self.stop_reason})", flush=True)
            self._stop_budget()
            self.controller.shutdown()
            self.events.process()             # the last records, queued by the workers as they ended
        finally:
            self._stop_budget()
            if self.recorder is not None:
                self.recorder.close()
            if self.command is not None:
                self.command.finish()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        summary = self.summary()
        self._print_summary(summary)
        if self.args.summary_json:
            with open(self.args.summary_json, "w") as f:
                json.dump(summary, f, indent=1)
        if self.command is not None:
            return self.command.exit_status()
        return 1 if any(m["error"] for m in summary["metrics"].values()) else 0

    def _loop(self) -> None:
        """The workers' news and the periodic tasks, until _quit (the duration, the end of every metric or
        of the command, a signal)."""
        while not self.stop_reason:
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline:
                self._quit("duration reached")
                break
            for task in self._periodic:
                interval, run, due = task
                if now >= due:
                    task[2] = due + interval if due + interval > now else now + interval   # missed runs skipped
                    run()
            due = min([task[2] for task in self._periodic] + [self._deadline or float("inf")])
            self.events.wait(min(due - time.monotonic(), 1.0))

    def _on_records(self, name: str, records: list) -> None:
        """A metric's meta record says its probes are attached; the command runs once all have said so."""
        if self.recorder is not None:
            self.recorder.write(records)
        if records and records[0].get("kind") == "meta" and isinstance(records[0].get("pid"), int):
            self.meta_pids[name] = records[0]["pid"]      # a run's first line: its first batch's first record
        for record in reversed(records):
            if record.get("kind") == "summary":
                self.latest[name] = record
                break
        if self.command is None or self.command.started or not any(r.get("kind") == "meta" for r in records):
            return
        self.attached.add(name)
        if self.attached >= set(self.args.metric):
            self.command.release()
            print(f"headless: every metric attached; running {shlex.join(self.command.argv)}", flush=True)

    def _start_budget(self) -> None:
        """--budget: bpf_stats on (as the window turns it on; a user's privilege helper holds it), and the
        overhead reader on a thread of its own, whose samples reach this thread through the event queue."""
        from host.bpf_stats import BpfStatsSwitch  # noqa: PLC0415 - only with --budget
        from host.elevation import command_for_this_user  # noqa: PLC0415
        from host.overhead_reader import OverheadReader, SamplingThread  # noqa: PLC0415

        switch = BpfStatsSwitch()
        switch.enable()
        reader = OverheadReader(command_for_this_user(shlex.split(self.args.elevate)))
        thread = SamplingThread(reader, lambda rows, _summary: self.events.post(lambda: self._on_cost(rows)))
        self._budget_parts = (switch, reader, thread)
        thread.start()

    def _stop_budget(self) -> None:
        if self._budget_parts:
            switch, reader, thread = self._budget_parts
            self._budget_parts = ()
            thread.stop()
            reader.close()
            switch.restore()

    def _cost_targets(self) -> None:
        """The running metrics' pids and BPF programs, for the reader (as the window's timer does)."""
        if self._budget_parts:
            ids = self.controller.bpf_program_ids()
            self._budget_parts[1].set_targets({name: (self.meta_pids.get(name), ids.get(name, set()))
                                               for name in self.controller.running()})

    def _on_cost(self, rows: list[dict]) -> None:
        if not self.stop_reason:
            self.keeper.sample(time.monotonic(), rows)

    def _on_budget(self, name: str, line: str) -> None:
        print(f"[budget] {name}: {line}", file=sys.stderr, flush=True)

    def _poll_command(self) -> None:
        if self.command.poll():
            self._quit("the command exited")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals += 1
        if self.signals > 1:
            os._exit(130)           # a second Ctrl-C: leave now (the metrics die with us, PDEATHSIG)
        self._quit(signal.Signals(signum).name)

    def _quit(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
            self.events.post(lambda: None)    # wakes the loop's wait (a signal handler may call this)

    def _on_log(self, name: str, line: str) -> None:
        print(f"[{name or 'app'}] {line}", file=sys.stderr, flush=True)

    def _on_finished(self, name: str, status: int, error: str) -> None:
        if self.command is not None and not self.command.started:
            self._quit(f"{name} ended before the command could start")
        if not self.controller.running():
            self._quit("every metric ended")

    def _progress(self) -> None:
        t = self.controller.transport.status()
        per_metric = " | ".join(f"{name} {self._figure(name) or str(totals['records']) + ' rec'}"
                                for name, totals in self.controller.totals.items())
        reach = {True: "collector up", False: "collector DOWN", None: "collector ?"}[t["reachable"]]
        sending = (f"sent {t['sent_batches']} batches ({t['sent_records']} rec), buffered {t['buffered']}, "
                   f"pending {t['pending_outbox']}, dropped {t['dropped']}, {reach}") if t["url"] else "no collector"
        watch = self.keeper.watch if self.keeper is not None else None
        cost = "" if watch is None or watch.total_pct is None else \
            f" | profiler {watch.total_pct:.2f} % of the machine's CPU, budget {watch.budget_pct:g} %"
        print(f"[{time.monotonic() - self.started:6.1f}s] {per_metric} | {sending}{cost}", flush=True)

    def _figure(self, name: str) -> str:
        spec = self.controller.registry.get(name)
        return spec.key_figure_text(self.latest[name]) if spec and name in self.latest else ""

    def summary(self) -> dict[str, Any]:
        t = self.controller.transport.status()
        metrics = {}
        for name in self.args.metric:
            totals = self.controller.totals.get(name, {})
            source = t["sources"].get(name, {})
            metrics[name] = {"records": totals.get("records", 0), "batches_sent": source.get("sent_batches", 0),
                             "records_sent": source.get("sent_records", 0),
                             "batches_created": source.get("created_batches", 0),
                             "pending": source.get("pending_batches", 0), "dropped": source.get("dropped", 0),
                             "status": totals.get("status"), "error": totals.get("error", "")}
        extra = {"command": self.command.outcome()} if self.command is not None else {}
        if self.keeper is not None:
            watch = self.keeper.watch
            extra["budget"] = {"budget_pct": watch.budget_pct, "action": watch.action, "hold_s": watch.hold_s,
                               "actions": self.keeper.actions}
        if self.recorder is not None:
            extra["recorded"] = {"file": self.recorder.path, "records": self.recorder.written,
                                 "error": self.recorder.error}
        return {**extra, "seconds": round(time.monotonic() - self.started, 1), "stopped": self.stop_reason,
                "run_id": t["run_id"], "server": t["url"], "reachable": t["reachable"],
                "last_error": t["last_error"], "drop_reasons": t["drop_reasons"], "metrics": metrics}

    @staticmethod
    def _print_summary(summary: dict[str, Any]) -> None:
        print(f"summary: {summary['seconds']}s, run {summary['run_id']}, collector {summary['server'] or 'none'}")
        print(f"  {'METRIC':<14} {'RECORDS':>9} {'BATCHES SENT':>12} {'PENDING':>8} {'DROPPED':>8}  STATUS")
        for name, m in summary["metrics"].items():
            state = "ok" if not m["error"] else m["error"].splitlines()[0]
            print(f"  {name:<14} {m['records']:>9} {m['batches_sent']:>12} {m['pending']:>8} {m['dropped']:>8}  {state}")
        if summary["drop_reasons"]:
            print(f"  dropped by reason: {summary['drop_reasons']}")
        if summary["last_error"]:
            print(f"  last transport error: {summary['last_error']}")
        recorded = summary.get("recorded")
        if recorded:
            print(f"  recorded {recorded['records']:,} records to {recorded['file']}"
                  + (f" — {recorded['error']}" if recorded["error"] else ""))
        for action in summary.get("budget", {}).get("actions", []):
            print(f"  budget: {action['metric']}: {action['text']}")
        c = summary.get("command")
        if c:
            how = (f"killed by {c['signal']}" if c["signal"] else f"exit status {c['exit_status']}") \
                if c["started"] else "not started"
            print(f"  command: {shlex.join(c['argv'])}: {how}, {c['wall_s']}s wall")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args, values = parse_args(sys.argv[1:] if argv is None else argv)
    command = None
    if args.command is not None:
        from monitor.command import NOT_STARTED, CommandError, GatedCommand, parse  # noqa: PLC0415

        try:
            command = GatedCommand(parse(args.command))
        except CommandError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return NOT_STARTED
    recorder = None
    if args.record:
        from monitor.session import SessionWriter  # noqa: PLC0415

        try:
            recorder = SessionWriter(args.record)
        except OSError as exc:
            if command is not None:
                command.finish()
            print(f"{PROG}: error: cannot write --record {args.record}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    try:
        run = Run(args, values, command, recorder)
    except (OSError, sqlite3.Error) as exc:
        if command is not None:
            command.finish()
        where = f"state directory {args.state_dir or '(the default state directory)'}"
        if recorder is not None:
            recorder.close()
        print(f"{PROG}: error: cannot use {where}: {exc}", file=sys.stderr)
        return 1
    return run.exec()
