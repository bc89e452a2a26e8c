"""Benchmark 1: what tracing every syscall adds to one syscall.

bench/getppid.c makes N raw getppid calls and prints ns/call. Each repetition runs it bare, under
sysnest, BCC's `syscount -L`, `strace -c -f`, `perf trace -s`, the floor (bench/floor.py: two empty
raw-tracepoint programs), the floor with one clock read in each program, that and the entry time kept
per thread in task storage ("entry store") and sysnest --sample 8 (every call counted, one in 8 per
thread timed), in a rotated order; a
tracer is started fresh for each run. Added ns/call is the run minus the same repetition's bare run;
ratios are to the added cost of "floor + clock" (the least any tracer that times every syscall can
add: the target) and of syscount in that repetition. A separate pass with kernel.bpf_stats_enabled
shows what each BPF program costs per run.
"""

from __future__ import annotations

import os

import bpfwatch
import harness
import stats
from bpfwatch import BpfStats
from harness import PYTHON, Tracer
from stats import BenchError

SYSCOUNT = "/usr/sbin/syscount-bpfcc"
IN_KERNEL = {   # tracers that attach system-wide, then the workload runs: argv, ready line
    "floor": ([PYTHON, os.path.join(harness.BENCH, "floor.py")], "ready"),
    "floor + clock": ([PYTHON, os.path.join(harness.BENCH, "floor.py"), "--clock"], "ready"),
    # and the entry time kept per thread (task storage) and read back: the least exact timing needs here
    "floor + clock + entry store": ([PYTHON, os.path.join(harness.BENCH, "floor.py"), "--store"], "ready"),
    "sysnest": ([PYTHON, os.path.join(harness.ROOT, "metrics", "sysnest.py"), "--json"], '"kind":"meta"'),
    # every call counted, one in 8 per thread timed: the clock reads are most of exact timing's cost
    "sysnest --sample 8": ([PYTHON, os.path.join(harness.ROOT, "metrics", "sysnest.py"), "--json", "--sample", "8"],
                           '"kind":"meta"'),
    "syscount -L": ([SYSCOUNT, "-L"], "Tracing"),
}
WRAPPERS = {    # tracers that run the workload as their child
    "strace -c -f": ["strace", "-c", "-f", "-o", "/dev/null"],
    "perf trace -s": ["perf", "trace", "-s", "-o", "/dev/null", "--"],
}
CONFIGS = ["bare", *IN_KERNEL, *WRAPPERS]
LIMIT = "floor + clock"
TARGET_RATIO = 1.1   # sysnest's added cost over LIMIT's


def measure(binary: str, n: int, runs: int, wrap: list[str] | None = None) -> float:
    """The lowest ns/call of `runs` runs (each its own process): other people's load only ever adds
    time, so the minimum is the estimate least disturbed by it."""
    return min(float(harness.run_workload([*(wrap or []), binary, str(n)]).split()[-1])
                             for _ in range(runs))


def run(quick: bool = False, reps: int | None = None) -> dict:
    binary = harness.compile_c("getppid")
    reps = reps or (3 if quick else 5)
    n_fast, n_slow, runs = (500_000, 5_000, 3) if quick else (2_000_000, 20_000, 3)
    quiet = bpfwatch.Quiet(syscalls_only=True)

    def one(config: str, rep: int) -> float:
        if config == "bare":
            return quiet.run(lambda: measure(binary, n_fast, runs))
        if config in WRAPPERS:
            return quiet.run(lambda: measure(binary, n_slow, runs, WRAPPERS[config]))
        argv, ready = IN_KERNEL[config]
        with Tracer(argv, ready, name=config) as tracer:
            tracer.wait_ready()
            value = quiet.run(lambda: measure(binary, n_fast, runs), [tracer.proc.pid])
            if tracer.exited():
                raise BenchError(f"{config} exited during the run")
        return value

    harness.log(f"syscall overhead: {reps} repetitions of {', '.join(CONFIGS)}")
    values = stats.alternate(CONFIGS, one, reps, harness.log)
    added = stats.paired(values, "bare")
    rows = []
    for config in CONFIGS:
        row = {"config": config, "ns_per_call": stats.summary(values[config]),
               "added_ns": stats.summary(added[config]) if config != "bare" else None}
        for key, base in (("ratio_to_limit", LIMIT), ("ratio_to_syscount", "syscount -L")):
            ratios = [a / b for a, b in zip(added[config], added[base], strict=True) if b > 0]
            row[key] = stats.summary(ratios, 2) if config != "bare" else None
        rows.append(row)
    ratio = {r["config"]: r["ratio_to_limit"]["median"] for r in rows if r["config"] != "bare"}
    return {
        "title": "Syscall tracing overhead (getppid)",
        "reps": reps,
        "n_calls": {"in_kernel": n_fast, "strace_perf": n_slow, "runs_per_rep": runs},
        "rows": rows,
        "interference": quiet.note(),
        "bpf_stats": profile(binary, n_fast),
        "targets": [stats.target(f"{name} added cost vs {LIMIT}", f"<= {TARGET_RATIO}x",
                                   ratio[name], TARGET_RATIO, higher_is_better=False, unit="x")
                    for name in ("sysnest", "sysnest --sample 8")],
    }


def profile(binary: str, n: int) -> list[dict]:
    """Per-program ns/run under kernel.bpf_stats_enabled, for each in-kernel tracer."""
    out = []
    for config, (argv, ready) in IN_KERNEL.items():
        try:
            with Tracer(argv, ready, name=config) as tracer:
                tracer.wait_ready()
                ids = harness.prog_ids_of(tracer.proc.pid)
                with BpfStats(ids) as stats:
                    measure(binary, n, 1)
        except BenchError as exc:
            harness.log(f"  bpf_stats {config}: {exc}")
            continue
        for prog in sorted(stats.result.values(), key=lambda p: p["name"]):
            if prog["runs"] >= n:   # the syscall programs, not a tool's other probes
                out.append({"config": config, "program": prog["name"], "runs": prog["runs"],
                            "ns_per_run": prog["ns_per_run"]})
    return out


def table(result: dict) -> str:
    rows = [[r["config"], stats.fmt(r["ns_per_call"]), stats.fmt(r["added_ns"]) if r["added_ns"] else "—",
             stats.fmt(r.get("ratio_to_limit"), "x", 2) if r.get("ratio_to_limit") else "",
             stats.fmt(r["ratio_to_syscount"], "x", 2) if r["ratio_to_syscount"] else ""]
            for r in result["rows"]]
    out = stats.md_table(["tracer", "ns per getppid", "added ns", f"added vs {LIMIT}", "added vs syscount -L"], rows)
    floor = {p["program"]: p["ns_per_run"] for p in result["bpf_stats"] if p["config"] == "floor"}
    if result["bpf_stats"]:
        stats_rows = [[p["config"], p["program"], f"{p['ns_per_run']:.1f}",
                       f"{p['ns_per_run'] - min(floor.values(), default=0):.1f}" if floor else ""]
                      for p in result["bpf_stats"]]
        out += "\n\nWhat each BPF program costs per run (kernel.bpf_stats_enabled, one pass; the floor's empty " \
               "programs show what the stats themselves add):\n\n"
        out += stats.md_table(["tracer", "program", "ns per run", "above an empty program"], stats_rows)
    return out + bpfwatch.quiet_note(result)


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
