"""Benchmarks 2, 5 and 6a: what each metric costs a mixed workload, how long it takes to start, and
its peak memory, with BCC's equivalent tools where they run on this kernel.

bench/mixed.c (syscalls, write+fsync, loopback TCP, fork, page faults, a short sleep) is timed bare,
under each metric of config.METRICS alone (default arguments, --json, its output drained as the app
would; those with user stacks also with --user-stacks fp, beside their default), under all of
them at once (defaults), and under each BCC peer that works here, in a rotated order per
repetition. The same runs give each tool's startup (exec to its first record: the meta record for a
metric, the header line for a BCC tool), its first data record, and its peak RSS and CPU time from the
kernel's rusage when it is reaped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import bpfwatch
import harness
import stats
from harness import Tracer
from stats import BenchError

import config

ALL = "all metrics"
# BCC tools that run on a kernel without kprobes (checked here: cpudist, offcputime, biotop,
# biosnoop, biolatency, tcpconnlat, cachestat need kprobes or kprobe listings and fail), the ready
# line each prints once attached, and the metric each compares with.
PEERS = {
    "syscount -L": (["/usr/sbin/syscount-bpfcc", "-L"], "Tracing", "sysnest"),
    "runqlat": (["/usr/sbin/runqlat-bpfcc"], "Tracing", "cpuschedrun"),
    "tcplife": (["/usr/sbin/tcplife-bpfcc"], "PID", "tcpconnlat"),
}
MARKERS = ["metric_overhead", "metric_startup_memory"]
NOISE_PCT = 5.0     # a peer slowing the workload less than this gives no meaningful ratio


class Run:
    """One configuration's tools started together; startup, first data, RSS and CPU per tool."""

    def __init__(self, tools: dict[str, tuple[list[str], object]]) -> None:
        self.tracers: dict[str, Tracer] = {}
        self.first_data: dict[str, float] = {}
        for name, (argv, ready) in tools.items():
            tracer = Tracer(argv, ready, name=name)
            tracer.on_line = self._watch(name)
            self.tracers[name] = tracer

    def _watch(self, name: str) -> Callable[[str], None]:
        def on_line(line: str) -> None:
            record = config.parse_ndjson(line)
            if name not in self.first_data and record and record["kind"] != "meta":
                self.first_data[name] = time.monotonic()
        return on_line

    def __enter__(self) -> Run:
        try:
            self.ready_s = {name: t.wait_ready() for name, t in self.tracers.items()}
        except BenchError:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        for name, tracer in self.tracers.items():
            if tracer.exited():
                raise BenchError(f"{name} exited during the workload: {' | '.join(list(tracer.tail)[-2:])[-300:]}")

    def stop(self) -> None:
        for tracer in self.tracers.values():
            tracer.stop()

    def samples(self) -> dict[str, dict]:
        return {name: {"ready_s": self.ready_s[name],
                       "first_data_s": self.first_data[name] - t.started if name in self.first_data else None,
                       "peak_rss_mb": t.peak_rss_kb / 1024, "cpu_s": t.cpu_s}
                for name, t in self.tracers.items()}


def run(quick: bool = False, reps: int | None = None) -> dict:
    binary = harness.compile_c("mixed")
    reps = reps or (3 if quick else 5)
    # a run spans at least one 1 s interval of the tools, so their periodic user-space work is in it
    rounds, runs = (400, 2) if quick else (1000, 2)
    metrics = {spec.name: (harness.metric_argv(spec), harness.is_meta) for spec in config.METRICS}
    # user stacks unwound with CFI (the default) against the frame-pointer walk, in the same run (issue 14)
    variants = {f"{spec.name} --user-stacks fp": (harness.metric_argv(spec, user_stacks="fp"), harness.is_meta)
                for spec in config.METRICS if any(a.name == "user_stacks" for a in spec.args)}
    peers = {name: (argv, ready) for name, (argv, ready, _) in PEERS.items()}
    configs = ["bare", *metrics, *variants, ALL, *peers]
    per_tool: dict[str, list[dict]] = {name: [] for name in [*metrics, *variants, *peers]}
    quiet = bpfwatch.Quiet(syscalls_only=False, retries=0)

    def workload() -> float:
        """The fastest of `runs` runs: other people's load only ever adds time, so the minimum is the
        estimate least disturbed by it."""
        return min(float(harness.run_workload([binary, str(rounds), harness.BUILD]).split()[-1])
                   for _ in range(runs))

    def one(name: str, rep: int) -> float:
        if name == "bare":
            return quiet.run(workload)
        tools = metrics if name == ALL else {name: metrics.get(name) or variants.get(name) or peers[name]}
        with Run(tools) as run_:
            seconds = quiet.run(workload, [t.proc.pid for t in run_.tracers.values()])
            run_.check_alive()
        if name != ALL:
            per_tool[name].append(run_.samples()[name])
        return seconds

    harness.log(f"per-metric overhead: {reps} repetitions of {len(configs)} configurations, {rounds} rounds")
    times = stats.alternate(configs, one, reps, harness.log)
    slowdown = {name: [r * 100 - 100 for r in ratios] for name, ratios in stats.paired(times, "bare", "ratio").items()}
    rows = []
    for name in configs:
        peer_of = next((p for p, (_, _, m) in PEERS.items() if m == name), None)
        vs_peer = None
        if peer_of and (stats.summary(slowdown[peer_of])["median"] or 0) >= NOISE_PCT:
            vs_peer = stats.summary([m / p for m, p in zip(slowdown[name], slowdown[peer_of], strict=False) if p > 0], 2)
        kind = "peer" if name in peers else "metric" if name in metrics or name in variants else name
        rows.append({"config": name, "kind": kind,
                     "seconds": stats.summary(times[name], 3), "slowdown_pct": stats.summary(slowdown[name]),
                     "peer": peer_of, "vs_peer": vs_peer})
    syscount_rss = _median(per_tool.get("syscount -L", []), "peak_rss_mb")
    tools = []
    for name, got in per_tool.items():
        row = {"tool": name, **{k: stats.summary([s[k] for s in got], 2)
                                for k in ("ready_s", "first_data_s", "peak_rss_mb", "cpu_s")}}
        rss = row["peak_rss_mb"]["median"]
        row["rss_vs_syscount"] = round(rss / syscount_rss, 2) if rss and syscount_rss else None
        tools.append(row)
    return {"title": "Per-metric overhead, startup and memory", "reps": reps, "rounds": rounds, "runs": runs, "rows": rows,
            "tools": tools, "interference": quiet.note(), "targets": []}


def _median(samples: list[dict], key: str) -> float | None:
    return stats.summary([s[key] for s in samples])["median"]


def tables(result: dict) -> dict[str, str]:
    rows = []
    for r in result["rows"]:
        vs = f"{stats.fmt(r['vs_peer'], 'x', 2)} of {r['peer']}" if r["vs_peer"] else \
            f"{r['peer']} within noise (< {NOISE_PCT:g} %)" if r["peer"] else ""
        slow = "—" if r["config"] == "bare" else stats.fmt(r["slowdown_pct"], " %")
        rows.append([r["config"], stats.fmt(r["seconds"], " s", 3), slow, vs])
    overhead = stats.md_table([f"under ({result['rounds']} rounds, fastest of {result.get('runs', 1)})", "workload time", "slowdown",
                                 "slowdown vs its BCC peer"], rows) + bpfwatch.quiet_note(result)
    tool_rows = [[t["tool"], stats.fmt(t["ready_s"], " s", 2), stats.fmt(t["first_data_s"], " s", 2),
                  stats.fmt(t["peak_rss_mb"], " MB", 0),
                  f"{t['rss_vs_syscount']:.2f}x" if t["rss_vs_syscount"] else "n/a", stats.fmt(t["cpu_s"], " s", 2)]
                 for t in result["tools"]]
    startup = stats.md_table(["tool", "exec to first record", "exec to first data record", "peak RSS",
                                "RSS vs syscount", "CPU (start to stop)"], tool_rows)
    return {"metric_overhead": overhead, "metric_startup_memory": startup}


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
