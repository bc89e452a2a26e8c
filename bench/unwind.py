"""Benchmark 7: user-stack unwinding throughput — bcctool.unwind against perf's own DWARF unwinding.

Debian's /usr/bin/python3 (no frame pointers) runs a busy loop of Python calls. Our sample set: ptrace
samples of it (tests/support/stack_samples.py: ip, sp, bp and 16 KiB of stack, what cpuprofile's BPF side
hands over), unwound with warm CFI tables, then also symbolized; samples per CPU second of this
process. perf's: `perf record --call-graph dwarf -F 999` of the same loop run a fixed number of
rounds (the rate does not change the work per sample; 99 Hz gives too few samples), a short and a
long recording; `perf script` and `perf report` over each, their CPU time (rusage of the child), and the
marginal rate (extra samples / extra CPU seconds) so perf's start-up (reading symbols, debug info)
is not charged to its unwinding. Also measured: the cold parse of python3's and libc's .eh_frame with
pyelftools, the load of the same tables from the disk cache, the share of samples unwound to the
outermost frame, and the memory the warm tables hold. One core of a shared 2-core VM: ratios, not
absolutes, are the result.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import time

import harness
import stack_samples as ss
import stats
from metric_footprint import smaps_rollup_mb
from stats import BenchError

import config
from bcctool.cfi import CfiTable, read_table
from bcctool.procmaps import ProcessMaps
from bcctool.symbols import Symbolizer
from bcctool.unwind import COMPLETE, Unwinder

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
PYTHON3 = "/usr/bin/python3.11"
PERF_HZ = 999  # enough samples in a few CPU seconds for perf's marginal rate to rise above the noise


def _child_cpu(argv: list[str]) -> float:
    """CPU seconds (user + system) of one run of argv, output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[:3])}... exit {done.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _perf_samples(data: str) -> int:
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid"], capture_output=True, text=True, timeout=600)
    return sum(1 for line in out.stdout.splitlines() if line.strip())


def _perf_rates(workdir: str, outer: int) -> dict:
    """perf's samples per CPU second for `perf script` and `perf report`, marginal over two recordings
    of the loop run `outer // 10` and `outer` times (samples follow the workload's CPU time, so a loaded
    machine changes how long a recording takes, not how many samples it holds)."""
    runs = {}
    for name, n in (("short", max(outer // 10, 1)), ("long", outer)):
        data = os.path.join(workdir, f"{name}.data")
        subprocess.run(
            [
                "perf",
                "record",
                "-q",
                "-F",
                str(PERF_HZ),
                "--call-graph",
                "dwarf",
                "-o",
                data,
                "--",
                PYTHON3,
                "-c",
                ss.python_rounds(n),
            ],
            capture_output=True,
            timeout=600,
            check=True,
        )
        runs[name] = {
            "samples": _perf_samples(data),
            "script_s": _child_cpu(["perf", "script", "-i", data]),
            "report_s": _child_cpu(["perf", "report", "-i", data, "--stdio", "--no-children"]),
        }
    extra = runs["long"]["samples"] - runs["short"]["samples"]
    out = {"samples": runs["long"]["samples"]}
    for tool in ("script", "report"):
        cpu = runs["long"][f"{tool}_s"]
        marginal = cpu - runs["short"][f"{tool}_s"]
        out[f"{tool}_per_s"] = runs["long"]["samples"] / cpu if cpu > 0 else None
        out[f"{tool}_marginal_per_s"] = extra / marginal if marginal > 0 and extra > 0 else None
    return out


def _ours(samples: list, pid: int, cache_dir: str) -> dict:
    maps = ProcessMaps.snapshot(pid)  # a fresh one: its memo of rows starts empty in every repetition
    if maps is None:
        raise BenchError("the workload has gone")
    unwinder = Unwinder(cache_dir=cache_dir)
    for s in samples[:5]:  # load the tables (from the disk cache) outside the timing
        unwinder.unwind(maps, s.ip, s.sp, s.bp, s.stack)
    started = time.process_time()
    results = [unwinder.unwind(maps, s.ip, s.sp, s.bp, s.stack) for s in samples]
    unwind_s = time.process_time() - started
    sym = Symbolizer()
    for r in results[:5]:
        [sym.user(pid, pc) for pc in r.pcs]
    started = time.process_time()
    for s in samples:
        r = unwinder.unwind(maps, s.ip, s.sp, s.bp, s.stack)
        [sym.user(pid, pc if i == 0 else pc - 1) for i, pc in enumerate(r.pcs)]
    both_s = time.process_time() - started
    complete = sum(r.outcome == COMPLETE for r in results)
    return {
        "unwind_per_s": len(samples) / unwind_s if unwind_s > 0 else None,
        "unwind_symbolize_per_s": len(samples) / both_s if both_s > 0 else None,
        "complete_pct": 100.0 * complete / len(samples),
        "frames_mean": sum(len(r.pcs) for r in results) / len(results),
        "table_bytes": unwinder.objects.bytes,
        "symbol_bytes": sym.objects.bytes,
    }


def _profiling_python(seconds: float) -> dict:
    """Issue 14's memory figure: cpuprofile (DWARF, python frames, -F 99) on Debian's python3 busy loop
    for `seconds`: the process's PSS and private memory at its second interval (tables of the loop's
    objects loaded) and at the end, and the samples it unwound meanwhile."""
    child = subprocess.Popen([PYTHON3, "-c", ss.PYTHON_LOOP])
    argv = harness.metric_argv(config.get("cpuprofile"), pid=child.pid, frequency=99)
    summaries = []
    try:
        with harness.Tracer(argv, harness.is_meta, name="cpuprofile") as tracer:
            tracer.on_line = lambda line: summaries.append(r) if (r := config.parse_ndjson(line)) and r[
                "kind"] == "summary" else None
            tracer.wait_ready()
            deadline = time.monotonic() + 30
            while len(summaries) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            first = smaps_rollup_mb(tracer.proc.pid)
            time.sleep(seconds)
            last = smaps_rollup_mb(tracer.proc.pid)
    finally:
        child.kill()
        child.wait()
    if not first or not last:
        raise BenchError("cpuprofile ended before its memory was read")

    def private(m: dict) -> float:
        return round(m["private_dirty"] + m["private_clean"], 1)

    unwound = {}
    for s in summaries:
        for k, v in (s.get("unwound") or {}).items():
            unwound[k] = unwound.get(k, 0) + v
    return {"seconds": seconds, "pss_start_mb": round(first["pss"], 1), "pss_end_mb": round(last["pss"], 1),
            "private_start_mb": private(first), "private_end_mb": private(last),
            "samples": sum(s.get("samples") or 0 for s in summaries), "unwound": unwound}


def run(quick: bool = False, reps: int | None = None) -> dict:
    if not shutil.which("perf") or not os.path.exists(PYTHON3):
        return {"skipped": "needs perf and Debian's python3 (make setup)", "targets": []}
    reps = reps or (2 if quick else 3)
    count = 300 if quick else 1000
    perf_rounds = 15_000 if quick else 30_000  # 1.5 / 3 CPU seconds: about 1,500 / 3,000 samples
    workdir = tempfile.mkdtemp(prefix="bench-unwind-")
    cache_dir = os.path.join(workdir, "cfi")
    tools = ss.build_tools(workdir)
    parse = {}
    for path in (PYTHON3, LIBC):
        started = time.process_time()
        table = read_table(path)
        parse[os.path.basename(path)] = {"parse_s": round(time.process_time() - started, 2), "rows": len(table)}
        saved = os.path.join(workdir, os.path.basename(path) + ".cfi")
        table.save(saved)
        started = time.process_time()
        CfiTable.load(saved)
        parse[os.path.basename(path)]["load_s"] = round(time.process_time() - started, 4)
        harness.log(f"  {path}: {parse[os.path.basename(path)]}")
    child = subprocess.Popen([PYTHON3, "-c", ss.PYTHON_LOOP])
    try:
        time.sleep(0.5)
        samples = ss.capture(tools["snap"], child.pid, count, os.path.join(workdir, "samples.bin"), interval_us=2000)
        if len(samples) < count // 2:
            raise BenchError(f"only {len(samples)} samples taken")
        ours, perf = [], []
        for rep in range(reps):
            ours.append(_ours(samples, child.pid, cache_dir))
            perf.append(_perf_rates(workdir, perf_rounds))
            harness.log(f"  rep {rep + 1}/{reps}: ours {ours[-1]}, perf {perf[-1]}")
    finally:
        child.kill()
        child.wait()
        shutil.rmtree(workdir, ignore_errors=True)

    minute = _profiling_python(20 if quick else 60)
    harness.log(f"  cpuprofile on python3 for {minute['seconds']} s: {minute}")

    def col(rows: list[dict], key: str) -> dict:
        return stats.summary([r[key] for r in rows], 0)

    rows = {
        "ours: unwind": col(ours, "unwind_per_s"),
        "ours: unwind + symbolize": col(ours, "unwind_symbolize_per_s"),
        "perf script (whole run)": col(perf, "script_per_s"),
        "perf script (marginal)": col(perf, "script_marginal_per_s"),
        "perf report (whole run)": col(perf, "report_per_s"),
        "perf report (marginal)": col(perf, "report_marginal_per_s"),
    }
    ours_rate = rows["ours: unwind + symbolize"]["median"]
    perf_rate = rows["perf script (marginal)"]["median"]
    return {
        "title": "User-stack unwinding",
        "reps": reps,
        "samples": len(samples),
        "perf_samples": perf[-1]["samples"],
        "rows": rows,
        "parse": parse,
        "complete_pct": round(ours[-1]["complete_pct"], 1),
        "frames_mean": round(ours[-1]["frames_mean"], 1),
        "table_mb": round(ours[-1]["table_bytes"] / 1e6, 1),
        "symbol_mb": round(ours[-1]["symbol_bytes"] / 1e6, 1),
        "profiling_python": minute,
        "targets": [
            stats.target(
                "samples unwound + symbolized per CPU second vs perf script --call-graph dwarf",
                ">= 1x perf",
                round(ours_rate / perf_rate, 2) if ours_rate and perf_rate else None,
                1.0,
                higher_is_better=True,
                unit="x",
            ),
            stats.target(
                "unwinds per CPU second vs 99 Hz on 2 CPUs",
                ">= 198/s",
                rows["ours: unwind + symbolize"]["median"],
                198,
                higher_is_better=True,
                unit="/s",
            ),
        ],
    }


def table(result: dict) -> str:
    rows = [[name, stats.fmt(s, "/s", 0)] for name, s in result["rows"].items()]
    out = stats.md_table(["python3 busy loop, per CPU second", "samples"], rows)
    parse = [
        [name, f"{p['rows']:,}", f"{p['parse_s']:.2f} s", f"{p['load_s'] * 1000:.1f} ms"]
        for name, p in result["parse"].items()
    ]
    out += "\n\n" + stats.md_table(["object", "CFI rows", "pyelftools parse (cold)", "load from the disk cache"], parse)
    out += (
        f"\n\n{result['samples']} ptrace samples ({result['perf_samples']} for perf's long run): "
        f"{result['complete_pct']} % unwound to the outermost frame, {result['frames_mean']} frames on average; "
        f"warm tables {result['table_mb']} MB, symbol tables {result['symbol_mb']} MB."
    )
    m = result.get("profiling_python")
    if m:
        out += (
            f"\n\ncpuprofile -p on the python3 loop (DWARF, python frames, 99 Hz) for {m['seconds']:g} s after its "
            f"second interval: PSS {m['pss_start_mb']} -> {m['pss_end_mb']} MB, private {m['private_start_mb']} -> "
            f"{m['private_end_mb']} MB; {m['samples']:,} samples, unwound {m['unwound']}."
        )
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
