"""Benchmark 6a: every metric's memory with all ten running at once, and each one's startup.

Memory: every metric of config.METRICS is started at once (default arguments, --json, output drained
as the app would) under the light background load of bench/mixed.c; 12 s after the start each
process's /proc/PID/smaps_rollup is read. PSS shares each shared page among the processes mapping it
(the bcc/LLVM library, Python), so the PSS of all ten adds up to what they cost the machine together;
private memory (dirty + clean) is what each costs alone; RSS is shown beside them.

Startup: each metric alone, in a rotated order per repetition, from exec to its first record (the
meta record, printed once its BPF C is compiled and attached). And the window's "Start checked" with
all ten checked (main_app.MainWindow, offscreen, no collector): from the click until every metric's
first record has reached the window.
"""

from __future__ import annotations

import os
import tempfile
import time

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


def all_at_once(keep: bool = False) -> dict[str, dict[str, float]]:
    """Every metric started together; each one's smaps_rollup SETTLE_S after the start. keep: as
    before bcctool.footprint, the compiler's memory kept (BCCTOOL_KEEP_COMPILER_MEMORY)."""
    env = {**os.environ, "BCCTOOL_KEEP_COMPILER_MEMORY": "1"} if keep else None
    tracers = {spec.name: Tracer(harness.metric_argv(spec), harness.is_meta, name=spec.name, env=env)
               for spec in config.METRICS}
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


def start_checked_s(_name: str = "", _rep: int = 0) -> float:
    """Seconds from Start checked (every metric checked) until each one's first record is in the window."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings, QTimer  # noqa: PLC0415 - only this measurement needs Qt
    from PySide6.QtWidgets import QApplication  # noqa: PLC0415

    from main_app import MainWindow  # noqa: PLC0415
    from monitor.controller import MonitorController  # noqa: PLC0415

    app = QApplication.instance() or QApplication(["bench"])
    names = [spec.name for spec in config.METRICS]
    workdir = tempfile.mkdtemp(prefix="bench-start-")
    controller = MonitorController(None, state_dir=os.path.join(workdir, "state"))
    window = MainWindow(controller, settings=QSettings(os.path.join(workdir, "s.ini"), QSettings.Format.IniFormat))
    first: dict[str, float] = {}
    controller.records.connect(lambda name, _records: first.setdefault(name, time.monotonic()))
    deadline = QTimer()
    deadline.timeout.connect(app.quit)
    done = QTimer()
    done.timeout.connect(lambda: app.quit() if len(first) == len(names) else None)
    try:
        for _ in range(20):
            app.processEvents()
        window.set_checked(names)
        started = time.monotonic()
        if window.start_checked() != names:
            raise BenchError("the window did not start every metric")
        done.start(10)
        deadline.start(120_000)
        app.exec()
        if len(first) < len(names):
            raise BenchError(f"no record within 120 s from {sorted(set(names) - set(first))}")
        return max(first.values()) - started
    finally:
        done.stop()
        deadline.stop()
        window.shutdown()
        window.close()
        window.deleteLater()
        app.processEvents()


def run(quick: bool = False, reps: int | None = None) -> dict:
    reps = reps or (3 if quick else 5)
    names = [spec.name for spec in config.METRICS]
    mem_reps = 1 if quick else 3
    harness.log(f"footprint: {mem_reps} run(s) of all {len(names)} metrics at once, then startup x{reps}")
    runs = []
    with harness.BackgroundLoad():
        for rep in range(mem_reps):
            runs.append(all_at_once())
            harness.log(f"  rep {rep + 1}: PSS {sum(m['pss'] for m in runs[-1].values()):.0f} MB in all")
        kept = all_at_once(keep=True)
        harness.log(f"  compiler's memory kept: PSS {sum(m['pss'] for m in kept.values()):.0f} MB in all")
        startup = stats.alternate([*names, FLOOR, FLOOR_STUB], startup_s, reps, harness.log)
        start_all = [start_checked_s() for _ in range(1 if quick else 3)]
        harness.log(f"  Start checked, all ten: {', '.join(f'{s:.2f} s' for s in start_all)}")
    over_floor = stats.paired(startup, FLOOR_STUB)   # per repetition: the metric minus the floor
    per_metric = []
    for name in names:
        row = {"metric": name, "startup_s": stats.summary(startup[name], 2),
               "over_floor_s": stats.summary(over_floor[name], 2)}
        for field in ROLLUP_FIELDS.values():
            row[field] = stats.summary([r[name][field] for r in runs], 1)
        row["private"] = stats.summary([r[name]["private_dirty"] + r[name]["private_clean"] for r in runs], 1)
        row["kept"] = {"pss": round(kept[name]["pss"], 1), "rss": round(kept[name]["rss"], 1),
                       "private": round(kept[name]["private_dirty"] + kept[name]["private_clean"], 1)}
        per_metric.append(row)
    totals = {field: stats.summary([sum(r[n][field] for n in names) for r in runs], 0)
              for field in ("pss", "rss")}
    totals["private"] = stats.summary([sum(r[n]["private_dirty"] + r[n]["private_clean"] for n in names)
                                       for r in runs], 0)
    totals["kept"] = {k: round(sum(m["kept"][k] for m in per_metric)) for k in ("pss", "rss", "private")}
    slowest = max((m["startup_s"]["median"] or 0 for m in per_metric), default=None)
    floor_s = stats.summary(startup[FLOOR], 2)
    floor_stub_s = stats.summary(startup[FLOOR_STUB], 2)
    return {
        "title": "Metric memory and startup", "reps": reps, "memory_reps": mem_reps, "settle_s": SETTLE_S,
        "metrics": per_metric, "totals": totals, "start_checked_s": stats.summary(start_all, 2),
        "floor_startup_s": floor_s, "floor_stub_startup_s": floor_stub_s,
        "targets": [
            stats.target("all ten metrics at once, PSS in all", f"<= {PSS_LIMIT_MB:g} MB",
                         totals["pss"]["median"], PSS_LIMIT_MB, higher_is_better=False, unit=" MB"),
            stats.target("slowest metric, exec to first record", f"<= {STARTUP_LIMIT_S:g} s",
                         slowest, STARTUP_LIMIT_S, higher_is_better=False, unit=" s"),
            stats.target("Start checked, all ten, to every first record", f"<= {START_ALL_LIMIT_S:g} s",
                         stats.summary(start_all, 2)["median"], START_ALL_LIMIT_S, higher_is_better=False,
                         unit=" s"),
        ],
    }


def table(result: dict) -> str:
    def kept(m: dict) -> str:
        return f"{m['pss']:.0f} / {m['private']:.0f} / {m['rss']:.0f} MB" if m else "n/a"

    rows = [[m["metric"], stats.fmt(m["pss"], " MB", 1), stats.fmt(m["private"], " MB", 1),
             stats.fmt(m["rss"], " MB", 0), kept(m.get("kept")),
             stats.fmt(m["startup_s"], " s", 2), stats.fmt(m.get("over_floor_s"), " s", 2)]
            for m in result["metrics"]]
    t = result["totals"]
    rows.append(["**all ten**", f"**{stats.fmt(t['pss'], ' MB', 0)}**", stats.fmt(t["private"], " MB", 0),
                 stats.fmt(t["rss"], " MB", 0), kept(t.get("kept")), "", ""])
    out = stats.md_table(["metric", "PSS", "private (dirty + clean)", "RSS",
                          "compiler's memory kept: PSS / private / RSS", "exec to first record (alone)",
                          "above the floor (stubbed)"], rows)
    if result.get("floor_startup_s"):
        out += (f"\n\nThe least a BCC tool takes from exec to attached (bench/floor.py: import bcc, compile and attach "
                f"two empty programs): {stats.fmt(result['floor_startup_s'], ' s', 2)}")
        stub = result.get("floor_stub_startup_s")
        out += (f"; with BCC's read of the kernel's symbol table skipped as the metrics skip it "
                f"(`bcctool/ksymstub.py`): {stats.fmt(stub, ' s', 2)}." if stub else ".")
    if result.get("start_checked_s"):
        out += (f"\n\nThe window's Start checked with all ten checked, to every metric's first record: "
                f"{stats.fmt(result['start_checked_s'], ' s', 2)}.")
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))
