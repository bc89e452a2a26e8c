"""Benchmark 6a: every metric's memory with all of them running at once, and each one's startup.

Issue 18's targets name ten metrics; cpuprofile came after it. The targets are judged over those ten
(TEN) and every figure of all eleven (config.METRICS) is reported beside them.

Memory: the ten are started at once (default arguments, --json, output drained as the app would)
under the light background load of bench/mixed.c; 12 s after the start each process's
/proc/PID/smaps_rollup is read; then all eleven the same way. PSS shares each shared page among the
processes mapping it (the bcc/LLVM library, Python), so the PSS of all of them adds up to what they
cost the machine together; private memory (dirty + clean) is what each costs alone; RSS is shown
beside them.

Startup: each metric alone, in a rotated order per repetition, from exec to its first record (the
meta record, printed once its BPF C is compiled and attached). Then, alternating: the window's "Start
checked" with the ten checked and with all eleven (main_app.MainWindow, offscreen, no collector), from
the click until every metric's first record has reached the window; and its floor, the ten's commands
started at once by this script (no app) until every first record. Each metric's CPU time (utime +
stime of /proc/PID/stat) is read when its first record arrives: on 2 CPUs the last first record cannot
come before their sum over two.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable

import harness
import stats
from harness import Tracer
from stats import BenchError

import config

SETTLE_S = 12.0
PSS_LIMIT_MB = 250.0
STARTUP_LIMIT_S = 0.3
START_ALL_LIMIT_S = 2.0
ROLLUP_FIELDS = {"Rss": "rss", "Pss": "pss", "Private_Dirty": "private_dirty", "Private_Clean": "private_clean"}
# the ten metrics issue 18 names (it was written before cpuprofile): its targets are judged over these
TEN = [spec.name for spec in config.METRICS if spec.name != "cpuprofile"]
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def smaps_rollup_mb(pid: int) -> dict[str, float] | None:
    """{rss, pss, private_dirty, private_clean} in MB from /proc/PID/smaps_rollup; None if gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ROLLUP_FIELDS:
                    out[ROLLUP_FIELDS[key]] = int(rest.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return out


def cpu_s(pid: int) -> float | None:
    """CPU time (user + system, every thread) a process has used so far; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICK
    except (OSError, ValueError, IndexError):
        return None


def all_at_once(names: list[str], keep: bool = False) -> dict[str, dict[str, float]]:
    """The metrics started together; each one's smaps_rollup SETTLE_S after the start. keep: as
    before bcctool.footprint, the compiler's memory kept (BCCTOOL_KEEP_COMPILER_MEMORY)."""
    env = {**os.environ, "BCCTOOL_KEEP_COMPILER_MEMORY": "1"} if keep else None
    tracers = {name: Tracer(harness.metric_argv(config.get(name)), harness.is_meta, name=name, env=env)
               for name in names}
    try:
        for tracer in tracers.values():
            tracer.wait_ready()
        started = min(t.started for t in tracers.values())
        time.sleep(max(0.0, started + SETTLE_S - time.monotonic()))
        memory = {}
        for name, tracer in tracers.items():
            if tracer.exited():
                raise BenchError(f"{name} exited: {' | '.join(list(tracer.tail)[-2:])[-300:]}")
            memory[name] = smaps_rollup_mb(tracer.proc.pid)
        return memory
    finally:
        for tracer in tracers.values():
            tracer.stop()


# the least any BCC tool takes to start: bench/floor.py, two empty programs compiled and attached; and
# the same with BCC's read of the kernel's symbol table skipped as the metrics skip it (bcctool.ksymstub)
FLOOR = "BCC floor (empty program)"
FLOOR_STUB = "BCC floor, kallsyms stubbed"


def startup_s(name: str, _rep: int) -> float:
    if name in (FLOOR, FLOOR_STUB):
        argv = [harness.PYTHON, os.path.join(harness.BENCH, "floor.py"), *["--stub-kallsyms"] * (name == FLOOR_STUB)]
        ready = "ready"
    else:
        argv, ready = harness.metric_argv(config.get(name)), harness.is_meta
    with Tracer(argv, ready, name=name) as tracer:
        return tracer.wait_ready()


def started_together(names: list[str]) -> dict:
    """The floor of Start checked: the metrics' commands started at once by this script. {"s": seconds
    from the first exec until every first record, "cpu": {metric: CPU seconds at its first record}}."""
    tracers: dict[str, Tracer] = {}
    cpu: dict[str, float | None] = {}

    def on_line(name: str) -> Callable[[str], None]:
        def seen(line: str) -> None:
            if name not in cpu and harness.is_meta(line):
                cpu[name] = cpu_s(tracers[name].proc.pid)
        return seen

    try:
        for name in names:
            tracers[name] = Tracer(harness.metric_argv(config.get(name)), harness.is_meta, name=name)
            tracers[name].on_line = on_line(name)     # set long before a compile can end
        for tracer in tracers.values():
            tracer.wait_ready()
        started = min(t.started for t in tracers.values())
        return {"s": max(t.first_line_at["ready"] for t in tracers.values()) - started, "cpu": cpu}
    finally:
        for tracer in tracers.values():
            tracer.stop()


def start_checked(names: list[str]) -> dict:
    """The window's Start checked with `names` checked: {"s": seconds from the click until each one's
    first record is in the window, "cpu": {metric: CPU seconds at its first record in the window},
    "app_cpu": the app process's CPU seconds over that time, "click_s": the click's own time}."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings, QTimer  # noqa: PLC0415 - only this measurement needs Qt
    from PySide6.QtWidgets import QApplication  # noqa: PLC0415

    from gui.thread_relay import GuiThreadRelay  # noqa: PLC0415
    from main_app import MainWindow  # noqa: PLC0415
    from monitor.controller import MonitorController  # noqa: PLC0415

    app = QApplication.instance() or QApplication(["bench"])
    workdir = tempfile.mkdtemp(prefix="bench-start-")
    controller = MonitorController(None, state_dir=os.path.join(workdir, "state"), relay=GuiThreadRelay())
    window = MainWindow(controller, settings=QSettings(os.path.join(workdir, "s.ini"), QSettings.Format.IniFormat))
    first: dict[str, float] = {}
    cpu: dict[str, float | None] = {}

    def on_records(name: str, _records: list) -> None:
        if name not in first:
            first[name] = time.monotonic()
            cpu[name] = cpu_s(controller.totals[name]["pid"])

    controller.records.connect(on_records)
    deadline = QTimer()
    deadline.timeout.connect(app.quit)
    done = QTimer()
    done.timeout.connect(lambda: app.quit() if len(first) == len(names) else None)
    try:
        for _ in range(20):
            app.processEvents()
        window.set_checked(names)
        app_cpu = time.process_time()
        started = time.monotonic()
        if window.start_checked() != names:
            raise BenchError("the window did not start every metric")
        click_s = time.monotonic() - started
        done.start(10)
        deadline.start(120_000)
        app.exec()
        if len(first) < len(names):
            raise BenchError(f"no record within 120 s from {sorted(set(names) - set(first))}")
        return {"s": max(first.values()) - started, "cpu": cpu, "app_cpu": time.process_time() - app_cpu,
                "click_s": click_s}
    finally:
        done.stop()
        deadline.stop()
        window.shutdown()
        window.close()
        window.deleteLater()
        app.processEvents()


START_RUNS = {"started together, the ten (no app)": ("bare", TEN),
              "Start checked, the ten": ("app", TEN),
              "Start checked, all eleven": ("app", [spec.name for spec in config.METRICS])}


def start_run(name: str, _rep: int) -> dict:
    how, names = START_RUNS[name]
    result = started_together(names) if how == "bare" else start_checked(names)
    harness.log(f"  {name}: {result['s']:.2f} s, CPU at first records {sum(filter(None, result['cpu'].values())):.2f} s"
                + (f", app {result['app_cpu']:.2f} s" if "app_cpu" in result else ""))
    return result


def memory_rows(runs: list[dict], names: list[str]) -> dict[str, dict]:
    rows = {}
    for name in names:
        row = {field: stats.summary([r[name][field] for r in runs], 1) for field in ROLLUP_FIELDS.values()}
        row["private"] = stats.summary([r[name]["private_dirty"] + r[name]["private_clean"] for r in runs], 1)
        rows[name] = row
    return rows


def memory_totals(runs: list[dict], names: list[str]) -> dict:
    totals = {field: stats.summary([sum(r[n][field] for n in names) for r in runs], 0) for field in ("pss", "rss")}
    totals["private"] = stats.summary([sum(r[n]["private_dirty"] + r[n]["private_clean"] for n in names)
                                       for r in runs], 0)
    return totals


def start_summary(values: list[dict | None]) -> dict:
    """Seconds to every first record, each metric's CPU at its first record, their sum over 2 CPUs."""
    done = [v for v in values if v]
    names = sorted({n for v in done for n in v["cpu"]})
    sums = [sum(filter(None, v["cpu"].values())) for v in done]
    out = {"s": stats.summary([v["s"] for v in done], 2),
           "cpu_s": {n: stats.summary([v["cpu"].get(n) for v in done], 2) for n in names},
           "cpu_sum_s": stats.summary(sums, 2),
           "cpu_over_cpus_s": stats.summary([c / (os.cpu_count() or 1) for c in sums], 2)}
    if done and "app_cpu" in done[0]:
        out["app_cpu_s"] = stats.summary([v["app_cpu"] for v in done], 2)
        out["click_s"] = stats.summary([v["click_s"] for v in done], 2)
    return out


def run(quick: bool = False, reps: int | None = None) -> dict:
    reps = reps or (3 if quick else 5)
    every = [spec.name for spec in config.METRICS]
    mem_reps = 1 if quick else 3
    start_reps = 3 if quick else 5
    harness.log(f"footprint: {mem_reps} run(s) of the ten metrics at once and of all {len(every)}, "
                f"then startup x{reps}, Start checked x{start_reps}")
    runs_ten, runs_all = [], []
    with harness.BackgroundLoad():
        for rep in range(mem_reps):
            runs_ten.append(all_at_once(TEN))
            runs_all.append(all_at_once(every))
            harness.log(f"  rep {rep + 1}: PSS {sum(m['pss'] for m in runs_ten[-1].values()):.0f} MB the ten, "
                        f"{sum(m['pss'] for m in runs_all[-1].values()):.0f} MB all {len(every)}")
        kept = all_at_once(every, keep=True)
        harness.log(f"  compiler's memory kept: PSS {sum(m['pss'] for m in kept.values()):.0f} MB in all")
        startup = stats.alternate([*every, FLOOR, FLOOR_STUB], startup_s, reps, harness.log)
        starts = stats.alternate(list(START_RUNS), start_run, start_reps, harness.log)
    over_floor = stats.paired(startup, FLOOR_STUB)   # per repetition: the metric minus the floor
    ten_rows, all_rows = memory_rows(runs_ten, TEN), memory_rows(runs_all, every)
    per_metric = []
    for name in every:
        # the ten's memory from the run of the ten; cpuprofile's from the run of all eleven
        row = {"metric": name, "startup_s": stats.summary(startup[name], 2),
               "over_floor_s": stats.summary(over_floor[name], 2), "in_run": "ten" if name in TEN else "all",
               **(ten_rows[name] if name in TEN else all_rows[name])}
        row["kept"] = {"pss": round(kept[name]["pss"], 1), "rss": round(kept[name]["rss"], 1),
                       "private": round(kept[name]["private_dirty"] + kept[name]["private_clean"], 1)}
        per_metric.append(row)

    def kept_sum(names: list[str]) -> dict:
        return {k: round(sum(m["kept"][k] for m in per_metric if m["metric"] in names)) for k in ("pss", "rss", "private")}

    totals = {**memory_totals(runs_ten, TEN), "kept": kept_sum(TEN),
              # the ten's share of the run of all eleven: what running cpuprofile beside them changes
              "pss_in_all": stats.summary([sum(r[n]["pss"] for n in TEN) for r in runs_all], 0)}
    totals_all = {**memory_totals(runs_all, every), "kept": kept_sum(every)}
    slowest = max((m["startup_s"]["median"] or 0 for m in per_metric if m["metric"] in TEN), default=None)
    start = {name: start_summary(values) for name, values in starts.items()}
    app_ten = start["Start checked, the ten"]["s"]
    return {
        "title": "Metric memory and startup", "reps": reps, "memory_reps": mem_reps, "settle_s": SETTLE_S,
        "ten": TEN, "metrics": per_metric, "totals": totals, "totals_all": totals_all,
        "start_checked_s": app_ten, "start_checked_all_s": start["Start checked, all eleven"]["s"],
        "start_runs": start, "start_reps": start_reps, "cpus": os.cpu_count(),
        "floor_startup_s": stats.summary(startup[FLOOR], 2), "floor_stub_startup_s": stats.summary(startup[FLOOR_STUB], 2),
        "targets": [
            stats.target("the ten metrics at once, PSS in all", f"<= {PSS_LIMIT_MB:g} MB",
                         totals["pss"]["median"], PSS_LIMIT_MB, higher_is_better=False, unit=" MB"),
            stats.target("slowest of the ten metrics, exec to first record", f"<= {STARTUP_LIMIT_S:g} s",
                         slowest, STARTUP_LIMIT_S, higher_is_better=False, unit=" s"),
            stats.target("Start checked, the ten, to every first record", f"<= {START_ALL_LIMIT_S:g} s",
                         app_ten["median"], START_ALL_LIMIT_S, higher_is_better=False, unit=" s"),
        ],
    }


def table(result: dict) -> str:
    def kept(m: dict) -> str:
        return f"{m['pss']:.0f} / {m['private']:.0f} / {m['rss']:.0f} MB" if m else "n/a"

    ten = result.get("ten", [])
    rows = [[m["metric"] if m.get("in_run", "ten") == "ten" else f"{m['metric']} (run of all eleven)",
             stats.fmt(m["pss"], " MB", 1), stats.fmt(m["private"], " MB", 1),
             stats.fmt(m["rss"], " MB", 0), kept(m.get("kept")),
             stats.fmt(m["startup_s"], " s", 2), stats.fmt(m.get("over_floor_s"), " s", 2)]
            for m in result["metrics"]]
    t = result["totals"]
    rows.append([f"**the ten at once** ({len(ten)}, issue 18's target)", f"**{stats.fmt(t['pss'], ' MB', 0)}**",
                 stats.fmt(t["private"], " MB", 0), stats.fmt(t["rss"], " MB", 0), kept(t.get("kept")), "", ""])
    a = result.get("totals_all")
    if a:
        rows.append([f"all {len(result['metrics'])} at once", stats.fmt(a["pss"], " MB", 0),
                     stats.fmt(a["private"], " MB", 0), stats.fmt(a["rss"], " MB", 0), kept(a.get("kept")), "", ""])
    out = stats.md_table(["metric", "PSS", "private (dirty + clean)", "RSS",
                          "compiler's memory kept (all at once): PSS / private / RSS",
                          "exec to first record (alone)", "above the floor (stubbed)"], rows)
    if t.get("pss_in_all"):
        out += (f"\n\nThe ten's PSS within the run of all {len(result['metrics'])}: "
                f"{stats.fmt(t['pss_in_all'], ' MB', 0)} (shared pages split one way more).")
    if result.get("floor_startup_s"):
        out += (f"\n\nThe least a BCC tool takes from exec to attached (bench/floor.py: import bcc, compile and attach "
                f"two empty programs): {stats.fmt(result['floor_startup_s'], ' s', 2)}")
        stub = result.get("floor_stub_startup_s")
        out += (f"; with BCC's read of the kernel's symbol table skipped as the metrics skip it "
                f"(`bcctool/ksymstub.py`): {stats.fmt(stub, ' s', 2)}." if stub else ".")
    starts = result.get("start_runs")
    if starts:
        rows = [[name, f"**{stats.fmt(r['s'], ' s', 2)}**", stats.fmt(r["cpu_sum_s"], " s", 2),
                 stats.fmt(r["cpu_over_cpus_s"], " s", 2), stats.fmt(r.get("app_cpu_s"), " s", 2),
                 stats.fmt(r.get("click_s"), " s", 2)] for name, r in starts.items()]
        out += (f"\n\nStarting them together ({result.get('start_reps')} alternating repetitions): from the click "
                f"(or the first exec) until every metric's first record; the metrics' CPU time at their first records, "
                f"summed, and that sum over {result.get('cpus')} CPUs; the app's own CPU over the same time; "
                f"the click handler's own time (the window builds each metric's tab after starting them all):\n\n")
        out += stats.md_table(["run", "to every first record", "metrics' CPU (sum)", "sum / CPUs",
                               "app's CPU", "click handler"], rows)
        names = [m["metric"] for m in result["metrics"]]
        runs = list(starts.values())
        rows = [[n, *(stats.fmt(r["cpu_s"].get(n), " s", 2) for r in runs)] for n in names]
        out += ("\n\nEach metric's CPU time at its first record, started together:\n\n"
                + stats.md_table(["metric", *starts], rows))
    elif result.get("start_checked_s"):
        out += (f"\n\nThe window's Start checked with all of them checked, to every metric's first record: "
                f"{stats.fmt(result['start_checked_s'], ' s', 2)}.")
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
