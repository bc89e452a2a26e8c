"""What each metric's own process costs while bench/mixed.c runs flat out (each round a fork, a loopback
connect and 2,000 syscalls; here 700-900 rounds a second on 2 CPUs: a process-churning server), and optionally the
same against another tree of this project (an older commit checked out with `git worktree`), in one
run, alternating, as medians and the ratio of medians.

Each sample: the metric started with its registry defaults and --json (its output drained, as the app
does), three summaries let by (its start-up and first naming are left out), then the run time of its
threads (/proc/PID/task/*/schedstat, in ns) over --window seconds. Not part of `make bench` (the
app-cost and overhead benches are); run it by hand:

    .venv/bin/python bench/process_cpu.py --metrics sysnest,pagefault --reps 3 --base-tree /work/wt-base
    .venv/bin/python bench/process_cpu.py --metrics cpuprofile --set frequency=999 --window 15 --reps 4 \
        --base-tree /work/wt-base            # issue 28's high-rate row, steady (after three summaries)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import harness
from harness import Tracer

import config
from bcctool import taskinfo

SUMMARIES_FIRST = 3


def one(name: str, tree: str, window: float, values: dict[str, Any]) -> float:
    """ms of CPU a second that metric `name` of `tree` takes while the workload runs (`values`: registry
    arguments other than the defaults)."""
    argv = harness.metric_argv(config.get(name), **values)
    argv[1] = argv[1].replace(harness.ROOT, tree, 1)
    count = [0]
    tracer = Tracer(argv, harness.is_meta, name=name)
    tracer.on_line = lambda line: count.__setitem__(0, count[0] + ('"kind":"summary"' in line))
    try:
        tracer.wait_ready()
        deadline = time.monotonic() + 60
        while count[0] < SUMMARIES_FIRST:
            if tracer.exited() or time.monotonic() > deadline:
                raise harness.BenchError(f"{name}: no {SUMMARIES_FIRST} summaries: {list(tracer.tail)[-2:]}")
            time.sleep(0.05)

        def ran() -> int:
            return sum((taskinfo.schedstat(t) or (0,))[0] for t in taskinfo.thread_ids(tracer.proc.pid))
        before, t0 = ran(), time.monotonic()
        time.sleep(window)
        return (ran() - before) / 1e6 / (time.monotonic() - t0)
    finally:
        tracer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", default="sysnest,tcpconnlat,pagefault,cpuschedrun,schparm,cpuprofile",
                        help="comma-separated metric names")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured per sample")
    parser.add_argument("--base-tree", help="another checkout of this project to compare with")
    parser.add_argument("--set", action="append", default=[], metavar="ARG=VALUE",
                        help="a registry argument's value for the metrics named, e.g. frequency=999 (repeatable)")
    args = parser.parse_args()
    names = [n.strip() for n in args.metrics.split(",") if n.strip()]
    values: dict[str, dict[str, Any]] = {}
    for name in names:   # an unknown name or argument, or a bad value, fails here, before the workload starts
        try:
            spec = config.get(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
        declared = {a.name: a for a in spec.args}
        values[name] = {}
        for item in args.set:
            arg, _, text = item.partition("=")
            if arg not in declared:
                parser.error(f"--set {item}: {name} has no argument {arg!r}")
            try:
                values[name][arg] = declared[arg].convert(text)
            except ValueError as exc:
                parser.error(f"--set {item}: {exc}")
    if args.base_tree and not os.path.isfile(os.path.join(args.base_tree, "metrics", "sysnest.py")):
        parser.error(f"--base-tree {args.base_tree}: not a checkout of this project")
    trees = {"this": harness.ROOT, **({"base": os.path.abspath(args.base_tree)} if args.base_tree else {})}
    workload = subprocess.Popen([harness.compile_c("mixed"), "100000000", harness.BUILD], stdout=subprocess.DEVNULL)
    got: dict[tuple[str, str], list[float]] = {}
    try:
        for rep in range(args.reps):
            order = list(trees) if rep % 2 == 0 else list(reversed(trees))   # alternating who goes first
            for name in names:
                for label in order:
                    got.setdefault((name, label), []).append(one(name, trees[label], args.window, values[name]))
                    harness.log(f"{name} {label} rep {rep + 1}: {got[(name, label)][-1]:.2f} ms/s")
    finally:
        workload.kill()
        workload.wait()
    print(f"{'metric':14s} " + " ".join(f"{label + ' ms/s (min-max)':>26s}" for label in trees)
          + ("   this/base" if "base" in trees else ""))
    for name in names:
        cells, medians = [], {}
        for label in trees:
            values = got[(name, label)]
            medians[label] = statistics.median(values)
            cells.append(f"{medians[label]:8.2f} ({min(values):.1f}-{max(values):.1f})".rjust(26))
        ratio = f"   {medians['this'] / medians['base']:.2f}" if "base" in trees and medians["base"] else ""
        print(f"{name:14s} " + " ".join(cells) + ratio)


if __name__ == "__main__":
    sys.exit(main())
