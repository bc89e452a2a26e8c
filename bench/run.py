#!/usr/bin/env python3
"""make bench: run the benchmarks, store each result in bench/results.json as soon as it is measured,
and regenerate the tables in BENCHMARKS.md.

    .venv/bin/python bench/run.py                    # everything (about 20 minutes)
    .venv/bin/python bench/run.py --quick            # fewer repetitions, shorter runs (a check, not a result)
    .venv/bin/python bench/run.py --only syscall_overhead,startup
    .venv/bin/python bench/run.py --rss-minutes 2    # a shorter long-run memory check
    .venv/bin/python bench/run.py --only app_cost --app-rows "floor,sysnest,BCC syscount -L"

Needs root (BPF). A benchmark that fails is recorded as failed and the rest still run; the exit
status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import inspect
import os
import signal
import sys
import time
import traceback

import app_cost
import harness
import report
from suite import BENCHES


def main(argv: list[str] | None = None) -> int:
    names = [name for name, _ in BENCHES]
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and shorter runs")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(names)}")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, quick 3)")
    parser.add_argument("--rss-minutes", type=float, help="length of the app's long memory run (default 10, quick 2)")
    parser.add_argument("--app-rows", help="app_cost: comma-separated rows to run beside bare (default all): "
                        + ", ".join(app_cost.row_names()))
    parser.add_argument("--app-loads", help="app_cost: comma-separated loads to measure (default all): "
                        + ", ".join(app_cost.LOADS))
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else names
    unknown = set(chosen) - set(names)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    unknown_rows = set(args.app_rows.split(",")) - set(app_cost.row_names()) if args.app_rows else set()
    if unknown_rows:
        parser.error(f"unknown app_cost row(s): {', '.join(sorted(unknown_rows))}")
    unknown_loads = set(args.app_loads.split(",")) - set(app_cost.LOADS) if args.app_loads else set()
    if unknown_loads:
        parser.error(f"unknown app_cost load(s): {', '.join(sorted(unknown_loads))}")
    if os.geteuid() != 0:
        parser.error("benchmarks load BPF programs: run as root")

    # a stop (SIGTERM, as `timeout` and `kill` send) unwinds like Ctrl-C: the servers and metrics a bench
    # started end with it, where the signal's default would leave PostgreSQL and nginx running
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    options = {"reps": args.reps, "rss_minutes": args.rss_minutes, "app_rows": args.app_rows,
               "app_loads": args.app_loads}
    failed = []
    for name, module in BENCHES:
        if name not in chosen:
            continue
        harness.log(f"== {name}")
        started = time.monotonic()
        accepted = inspect.signature(module.run).parameters
        kwargs = {k: v for k, v in options.items() if v is not None and k in accepted}
        try:
            section = module.run(quick=args.quick, **kwargs)
        except Exception as exc:  # noqa: BLE001 - one benchmark's failure must not lose the others
            traceback.print_exc()
            section = {"error": f"{type(exc).__name__}: {exc}"}
            failed.append(name)
        section.update(date=harness.machine()["date"], quick=args.quick,
                       elapsed_s=round(time.monotonic() - started, 1))
        report.save_section(name, section)
        report.render()
        harness.log(f"== {name}: {section['elapsed_s']} s")
    harness.log(f"results: {report.RESULTS}; tables: {report.DOC}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
