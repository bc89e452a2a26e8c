"""What one sample costs the sampled program, on its own CPU (issues 13 and 14): bench/spin.c, a CPU-bound
loop through main -> a -> b -> c -> hot built -O2 (no frame pointers), pinned to CPU 1, timed by its own
calls per second; every sampler pinned to CPU 0 and sampling the whole machine at 999 Hz, so the spin's
CPU runs 999 sampling interrupts a second (the kernel's stack walk, the user stack copy, the BPF program
or perf's own copy into its buffer) and nothing of the sampler's process, which works on the other CPU.
The loss of calls per second against the same repetition's bare run, divided by the samples a second,
is the cost of one sample where it is taken; at 99 Hz a sample costs the same and the slowdown is a
tenth. 999 Hz because at 99 Hz the loss (well under 0.1 %) is below this machine's noise.
Peers: BCC's profile (frame pointers, counted in the kernel), perf record -g and --call-graph dwarf."""

from __future__ import annotations

import os
import time

import harness
import stats
from cpuprofile_overhead import PROFILE, Sampled, loaded_by
from stats import BenchError

import config

HZ = 999
SPIN_S = 3.0
OURS = {"cpuprofile (DWARF)": {"user_stacks": "dwarf"}, "cpuprofile (frame pointers)": {"user_stacks": "fp"}}
PERF_DWARF = "perf record --call-graph dwarf"


def samplers() -> dict[str, tuple[list[str], object]]:
    """argv (pinned to CPU 0) and ready test of every sampler that is installed."""
    spec = config.get("cpuprofile")
    out = {name: (["taskset", "-c", "0", *harness.metric_argv(spec, frequency=HZ, **values)], harness.is_meta)
           for name, values in OURS.items()}
    if os.path.exists(PROFILE):
        out["profile"] = (["taskset", "-c", "0", PROFILE, "-F", str(HZ)], "Sampling")
    if os.path.exists("/usr/bin/perf"):
        data = os.path.join(harness.BUILD, "sample-cost-perf.data")
        for name, stacks in (("perf record -g", "-g"), (PERF_DWARF, "--call-graph dwarf")):
            out[name] = (["/bin/sh", "-c", f"echo ready; exec taskset -c 0 /usr/bin/perf record -F {HZ} {stacks} -a "
                          f"-o {data} >/dev/null 2>&1"], "ready")
    return out


def run(quick: bool = False, reps: int | None = None) -> dict:
    if (os.cpu_count() or 1) < 2:
        return {"skipped": "needs 2 CPUs (the spin on one, the samplers on the other)", "targets": []}
    binary = harness.compile_c("spin")
    reps = reps or (3 if quick else 5)
    tools = samplers()
    configs = ["bare", *tools]
    lost: dict[str, list] = {name: [] for name in OURS}

    def spin() -> float:
        return float(harness.run_workload(["taskset", "-c", "1", binary, str(SPIN_S)]).split()[-1])

    def one(name: str, _rep: int) -> float:
        if name == "bare":
            return spin()
        argv, ready = tools[name]
        run_ = Sampled(argv, ready)
        try:
            run_.tracer.wait_ready()
            if name in OURS:
                run_.wait_summaries(2)   # past its first interval, which names every process's objects
            elif name == "profile":
                loaded_by(run_.tracer.proc.pid)
            else:
                time.sleep(0.5)   # perf opens its events after the shell's line
            calls = spin()
            if run_.tracer.exited():
                raise BenchError(f"{name} exited: {list(run_.tracer.tail)[-2:]}")
            if name in OURS:
                lost[name].append(run_.lost)
        finally:
            run_.tracer.stop()
        return calls

    harness.log(f"sample cost: {reps} repetitions of {len(configs)} configurations, spin {SPIN_S:g} s at {HZ} Hz")
    calls = stats.alternate(configs, one, reps, harness.log)
    ratio = stats.paired(calls, "bare", "ratio")
    rows = []
    for name in configs:
        slowdown = [100 * (1 - r) for r in ratio[name]]
        rows.append({"config": name, "calls_per_s": stats.summary(calls[name], 0),
                     "slowdown_pct": stats.summary(slowdown, 2),
                     # the loss of one second's calls over its samples: the CPU time one sample took from it
                     "us_per_sample": stats.summary([s / 100 / HZ * 1e6 for s in slowdown], 2),
                     "lost": stats.summary(lost[name], 0) if name in OURS else None})
    by = {r["config"]: r for r in rows}

    def versus(ours: str, peer: str) -> float | None:
        a, b = by.get(ours, {}).get("us_per_sample", {}), by.get(peer, {}).get("us_per_sample", {})
        if not a or not b or a["median"] is None or not b["median"] or b["median"] <= 0:
            return None
        return round(max(a["median"], 0) / b["median"], 2)

    return {
        "title": "What one sample costs the sampled CPU", "reps": reps, "hz": HZ, "spin_s": SPIN_S, "rows": rows,
        "targets": [
            stats.target(f"cpuprofile (DWARF) cost per sample on the sampled CPU vs {PERF_DWARF}", "<= 1.0x",
                         versus("cpuprofile (DWARF)", PERF_DWARF), 1.0, higher_is_better=False, unit="x"),
            stats.target("cpuprofile (DWARF) cost per sample on the sampled CPU vs BCC profile", "<= 1.0x",
                         versus("cpuprofile (DWARF)", "profile"), 1.0, higher_is_better=False, unit="x"),
        ],
    }


def table(result: dict) -> str:
    rows = [[r["config"], stats.fmt(r["calls_per_s"], "/s", 0), stats.fmt(r["slowdown_pct"], " %", 2),
             stats.fmt(r["us_per_sample"], " µs", 2), stats.fmt(r["lost"], "", 0) if r.get("lost") else ""]
            for r in result["rows"]]
    return (f"*spin on CPU 1 for {result['spin_s']:g} s, samplers on CPU 0 at {result['hz']} Hz, "
            f"{result['reps']} alternating repetitions*\n\n"
            + stats.md_table(["sampler", "spin: calls of hot per second", "slowdown", "CPU per sample, on the sampled CPU",
                              "samples lost (cpuprofile)"], rows))


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
