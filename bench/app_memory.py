"""Benchmark 6b: the app's memory over a long run with every metric.

`main_app.py --headless` runs every metric of config.METRICS at once (default arguments) for
--rss-minutes (10 by default, 2 in quick mode), sending to server.py on SQLite, under the light
background load of bench/mixed.c. Every 5 s the app's RSS and each metric process's smaps_rollup
(PSS, private, RSS) are sampled: each metric's figures at one minute and at the end say which one grew;
the PSS at the end of the ten metrics issue 18 names (metric_footprint.TEN: all but cpuprofile, which
came after it) is its "all at once" figure under the app, judged against its target, and that of all of
them is shown beside it. After the first minute the app may only move within its bounded buffers: the target is
that its RSS at the end, and its peak, are within 5 % of its RSS at one minute; the fitted slope over
that time is shown too.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import harness
import stats
from harness import PYTHON
from metric_footprint import PSS_LIMIT_MB, TEN, smaps_rollup_mb
from server_fixtures import ServerProcess
from stats import BenchError

import config

SAMPLE_S = 5.0
WARMUP_S = 60.0
GROWTH_LIMIT_PCT = 5.0


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    if len({t for t, _ in points}) < 2:
        return 0.0
    seconds, mb = zip(*points, strict=True)
    return 60 * statistics.linear_regression(seconds, mb).slope


def metric_of(path: str) -> str:
    """The metric a pid file of the app's registry runs (its argv holds metrics/NAME.py)."""
    try:
        with open(path) as f:
            argv = json.load(f)["argv"]
    except (OSError, ValueError, KeyError, TypeError):
        return "?"
    scripts = [os.path.basename(a)[:-3] for a in argv if a.endswith(".py")]
    return scripts[-1] if scripts else "?"


def children_memory(state_dir: str) -> dict[str, dict[str, float]]:
    """{metric: {rss, pss, private}} in MB of each metric process the app has running (its pid files)."""
    out = {}
    for path in glob.glob(os.path.join(state_dir, "children", "*.json")):
        memory = smaps_rollup_mb(int(os.path.basename(path)[:-5]))
        if memory:
            out[metric_of(path)] = {"rss": round(memory["rss"], 1), "pss": round(memory["pss"], 1),
                                    "private": round(memory["private_dirty"] + memory["private_clean"], 1)}
    return out


def per_metric_growth(samples: list[dict]) -> dict[str, dict]:
    """Each metric's memory at its first sample after the first minute, at its last, and its peak PSS."""
    out: dict[str, dict] = {}
    for s in samples:
        for name, m in s.get("per_metric", {}).items():
            row = out.setdefault(name, {"at_1_min": m, "peak_pss": m["pss"]})
            row["end"] = m
            row["peak_pss"] = max(row["peak_pss"], m["pss"])
    for row in out.values():
        start = row["at_1_min"]["pss"]
        row["growth_pct"] = round(100 * (max(row["end"]["pss"], row["peak_pss"]) - start) / start, 1) if start else None
    return out


def run(quick: bool = False, rss_minutes: float | None = None) -> dict:
    minutes = rss_minutes or (2.0 if quick else 10.0)
    duration = minutes * 60
    names = [spec.name for spec in config.METRICS]
    workdir = tempfile.mkdtemp(prefix="bench-rss-")
    state, summary_file = os.path.join(workdir, "state"), os.path.join(workdir, "summary.json")
    server = ServerProcess("--db", os.path.join(workdir, "collector.db"), output=os.path.join(workdir, "server.log"))
    argv = [PYTHON, os.path.join(harness.ROOT, "main_app.py"), "--headless", "--duration", f"{duration:g}",
            "--server", server.url, "--state-dir", state, "--progress", "60", "--summary-json", summary_file]
    for name in names:
        argv += ["--metric", name]
    samples: list[dict] = []
    harness.log(f"app memory: {len(names)} metrics for {minutes:g} min, RSS every {SAMPLE_S:g} s")
    try:
        with harness.BackgroundLoad(), open(os.path.join(workdir, "app.log"), "w") as app_log:
            app = subprocess.Popen(argv, cwd=harness.ROOT, stdout=app_log, stderr=subprocess.STDOUT)
            started = time.monotonic()
            next_log = started + 60
            while app.poll() is None:
                rss = harness.proc_status_kb(app.pid, "VmRSS")
                if rss is not None:
                    per_metric = children_memory(state)
                    samples.append({"t": round(time.monotonic() - started, 1), "app_mb": round(rss / 1024, 1),
                                    "metrics_mb": round(sum(m["rss"] for m in per_metric.values()), 1),
                                    "metrics_pss_mb": round(sum(m["pss"] for m in per_metric.values()), 1),
                                    "per_metric": per_metric})
                if samples and time.monotonic() >= next_log:
                    next_log += 60
                    harness.log(f"  {samples[-1]['t']:.0f} s: app {samples[-1]['app_mb']} MB, "
                                f"metrics {samples[-1]['metrics_mb']} MB RSS, {samples[-1]['metrics_pss_mb']} MB PSS")
                time.sleep(SAMPLE_S)
            status = app.wait()
        with open(summary_file) as f:
            summary = json.load(f)
        tail = open(os.path.join(workdir, "app.log")).read()[-1500:]
    except (OSError, ValueError) as exc:
        raise BenchError(f"the headless app did not leave a summary: {exc}") from None
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    failed = {n: m["error"].splitlines()[0] for n, m in summary["metrics"].items() if m["error"]}
    return {
        "title": "App memory over a long run", "minutes": minutes, "metrics": names, "exit_status": status,
        **figures(samples, minutes, names, tail, status),
        "records": sum(m["records"] for m in summary["metrics"].values()),
        "dropped": sum(m["dropped"] for m in summary["metrics"].values()),
        "pending": sum(m["pending"] for m in summary["metrics"].values()),
        "failed_metrics": failed, "samples": samples,
    }


def figures(samples: list[dict], minutes: float, names: list[str], tail: str = "", status: int | None = None) -> dict:
    """The run's figures from its samples: after the first minute, and for the metric processes only
    while all of them ran and the app was not yet stopping them (a metric's last moments put back the
    compiler data it stashed, bcctool/footprint.py: +2-4 MB each that are not growth)."""
    duration = minutes * 60
    after = [s for s in samples if s["t"] >= WARMUP_S]
    if not after:
        raise BenchError(f"no sample after the first minute (exit {status}): {tail}")
    at_warm = after[0]["app_mb"]
    end, peak = after[-1]["app_mb"], max(s["app_mb"] for s in after)
    growth_pct = 100 * (max(end, peak) - at_warm) / at_warm
    # the metrics' memory while all of them ran (a last sample may fall in the app's shutdown)
    running = [s for s in after if s.get("metrics_pss_mb") and s["t"] <= duration - 2 * SAMPLE_S] or after
    pss_warm = running[0].get("metrics_pss_mb") or 0
    pss_peak = max(s.get("metrics_pss_mb", 0) for s in running)
    pss_end = running[-1].get("metrics_pss_mb", 0)
    pss_growth_pct = 100 * (max(pss_end, pss_peak) - pss_warm) / pss_warm if pss_warm else None
    per_metric = per_metric_growth([s for s in running if len(s.get("per_metric", {})) == len(names)])
    # issue 18's ten, in this run of all of them (their PSS a little lower than with the ten alone:
    # shared pages split one way more; about 1 MB in all in bench/metric_footprint.py)
    ten_end = (round(sum(per_metric[n]["end"]["pss"] for n in TEN), 1)
               if per_metric and all(n in per_metric for n in TEN) else None)
    return {
        "app_mb": {"at_1_min": at_warm, "end": end, "peak_after_1_min": peak,
                   "peak_overall": max(s["app_mb"] for s in samples)},
        "growth_pct": round(growth_pct, 1), "slope_mb_per_min": round(slope_mb_per_min(
            [(s["t"], s["app_mb"]) for s in after]), 3),
        "slope_last_half_mb_per_min": round(slope_mb_per_min(
            [(s["t"], s["app_mb"]) for s in samples if s["t"] >= duration / 2]), 3),
        "metrics_mb_end": running[-1]["metrics_mb"], "metrics_mb_peak": max(s["metrics_mb"] for s in samples),
        "metrics_pss_mb": {"at_1_min": pss_warm, "end": pss_end, "peak_after_1_min": pss_peak},
        "metrics_pss_growth_pct": round(pss_growth_pct, 1) if pss_growth_pct is not None else None,
        # every metric process: while all ran (the samples with all of them), after the first minute
        "per_metric": per_metric,
        "targets": [stats.target(f"app RSS growth after the first minute ({minutes:g} min run)",
                                 f"<= {GROWTH_LIMIT_PCT:g} %", round(growth_pct, 1), GROWTH_LIMIT_PCT,
                                 higher_is_better=False, unit=" %"),
                    stats.target(f"metric processes' PSS growth after the first minute ({minutes:g} min run)",
                                 f"<= {GROWTH_LIMIT_PCT:g} %",
                                 round(pss_growth_pct, 1) if pss_growth_pct is not None else None,
                                 GROWTH_LIMIT_PCT, higher_is_better=False, unit=" %"),
                    stats.target(f"the ten metrics under the app, PSS in all at the end (in a run of all {len(names)})",
                                 f"<= {PSS_LIMIT_MB:g} MB", ten_end, PSS_LIMIT_MB, higher_is_better=False,
                                 unit=" MB")],
    }


def table(result: dict) -> str:
    a = result["app_mb"]
    rows = [[f"{result['minutes']:g} min, {len(result['metrics'])} metrics", f"{a['at_1_min']:.0f} MB",
             f"{a['end']:.0f} MB",
             f"{a['peak_after_1_min']:.0f} MB", f"{result['growth_pct']:+.1f} %",
             f"{result['slope_mb_per_min']:+.2f} / {result.get('slope_last_half_mb_per_min', 0):+.2f}",
             f"{result['metrics_mb_end']:.0f} MB", f"{result['records']:,}", f"{result['dropped']} / {result['pending']}"]]
    out = stats.md_table(["run", "app RSS at 1 min", "at the end", "peak after 1 min", "growth",
                            "slope MB/min (after 1 min / last half)",
                            "metric processes RSS (sum, end)", "records sent", "dropped / pending"], rows)
    pss = result.get("metrics_pss_mb")
    if pss:
        out += (f"\n\nThe metric processes' PSS (sum): {pss['at_1_min']:.0f} MB at 1 min, {pss['end']:.0f} MB at the end, "
                f"peak {pss['peak_after_1_min']:.0f} MB after 1 min ({result['metrics_pss_growth_pct']:+.1f} %).")
    per_metric = result.get("per_metric")
    if per_metric:
        rows = [[name, f"{m['at_1_min']['pss']:.1f} MB", f"{m['end']['pss']:.1f} MB", f"{m['peak_pss']:.1f} MB",
                 f"{m['growth_pct']:+.1f} %" if m["growth_pct"] is not None else "n/a",
                 f"{m['at_1_min']['private']:.1f} / {m['end']['private']:.1f} MB",
                 f"{m['at_1_min']['rss']:.0f} / {m['end']['rss']:.0f} MB"]
                for name, m in sorted(per_metric.items())]
        starts = sum(m["at_1_min"]["pss"] for m in per_metric.values())
        ends = sum(m["end"]["pss"] for m in per_metric.values())
        ten = [per_metric[n] for n in TEN if n in per_metric]
        if len(ten) == len(TEN) < len(per_metric):
            t_start, t_end = sum(m["at_1_min"]["pss"] for m in ten), sum(m["end"]["pss"] for m in ten)
            rows.append([f"**the ten** (issue 18's target; all but {', '.join(sorted(set(per_metric) - set(TEN)))})",
                         f"**{t_start:.0f} MB**", f"**{t_end:.0f} MB**", "",
                         f"{100 * (t_end - t_start) / t_start:+.1f} %" if t_start else "n/a",
                         f"{sum(m['at_1_min']['private'] for m in ten):.0f} / {sum(m['end']['private'] for m in ten):.0f} MB",
                         f"{sum(m['at_1_min']['rss'] for m in ten):.0f} / {sum(m['end']['rss'] for m in ten):.0f} MB"])
        rows.append([f"all {len(per_metric)}", f"{starts:.0f} MB", f"{ends:.0f} MB", "",
                     f"{100 * (ends - starts) / starts:+.1f} %" if starts else "n/a",
                     f"{sum(m['at_1_min']['private'] for m in per_metric.values()):.0f} / "
                     f"{sum(m['end']['private'] for m in per_metric.values()):.0f} MB",
                     f"{sum(m['at_1_min']['rss'] for m in per_metric.values()):.0f} / "
                     f"{sum(m['end']['rss'] for m in per_metric.values()):.0f} MB"])
        out += "\n\nEach metric process (smaps_rollup), at 1 min and at the end of the run:\n\n" + stats.md_table(
            ["metric", "PSS at 1 min", "PSS at the end", "peak PSS", "growth", "private (1 min / end)",
             "RSS (1 min / end)"], rows)
    if result["failed_metrics"]:
        out += "\n\nMetrics that ended with an error: " + "; ".join(f"{n}: {e}" for n, e in result["failed_metrics"].items())
    return out


if __name__ == "__main__":
    print(json.dumps(run(quick=True), indent=1))
