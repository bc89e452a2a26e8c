#!/usr/bin/env python3
"""`make screenshot`: the real window at 1400x900 with a few metrics running against a local collector,
captured to docs/screenshot.png for the README. Run it under Xvfb (the make target does); without a
display it falls back to Qt's offscreen platform, which renders the same widgets.

Needs root (the metrics load BPF). Uses a throwaway state directory and settings file, so the user's
own outbox and remembered values are untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import config  # noqa: E402
from host import preflight  # noqa: E402
from launcher import LocalCollector, pick_port  # noqa: E402
from main_app import MainWindow  # noqa: E402

# Something for the metrics to see: syscalls, page faults and short sleeps in a varying rhythm.
WORKLOAD = """
import math, mmap, os, time
t0 = time.time()
while time.time() - t0 < 60:
    phase = 0.5 + 0.5 * math.sin((time.time() - t0) / 3)
    for _ in range(int(2000 * phase) + 200):
        os.getppid()
    m = mmap.mmap(-1, 4096 * int(64 + 256 * phase))
    for i in range(0, len(m), 4096):
        m[i] = 1
    m.close()
    time.sleep(0.02)
"""

# For a flame graph (`--workload blocking`): threads that block in different ways, and one that spins.
BLOCKING = """
import os, tempfile, threading, time
t0, lock = time.time(), threading.Lock()
def done(): return time.time() - t0 > 60
def sleeper():
    while not done(): time.sleep(0.05)
def reader(fd):
    while not done() and os.read(fd, 1): pass
def writer(fd):
    while not done(): os.write(fd, b"x"); time.sleep(0.01)
def holder():
    while not done():
        with lock: time.sleep(0.03)
        time.sleep(0.001)
def waiter():
    while not done():
        with lock: pass
def syncer():
    with tempfile.TemporaryFile(dir="/var/tmp") as f:
        while not done(): f.write(b"y" * 4096); f.flush(); os.fsync(f.fileno())
def spinner():
    while not done(): sum(range(1000)); os.getppid()
r, w = os.pipe()
for target, argv in ((sleeper, ()), (reader, (r,)), (writer, (w,)), (holder, ()), (waiter, ()), (syncer, ()),
                     (spinner, ())):
    threading.Thread(target=target, args=argv, daemon=True).start()
while not done(): time.sleep(1)
"""
WORKLOADS = {"mixed": WORKLOAD, "blocking": BLOCKING}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshot.png"))
    parser.add_argument("--metrics", default="sysnest,cpuschedrun,pagefault")
    parser.add_argument("--show", default="sysnest", help="the metric tab in front")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the metrics run before the capture")
    parser.add_argument("--size", default="1400x900")
    parser.add_argument("--every-tab", metavar="DIR", help="also capture each metric's tab to DIR/NAME.png")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="mixed", help="what the metrics watch")
    parser.add_argument("--only-workload", action="store_true", help="metrics with a pid argument watch the workload only")
    parser.add_argument("--search", default="", help="text typed into the shown tab's flame-graph search")
    args = parser.parse_args()

    known = {s.name for s in config.METRICS}
    metrics = [m for m in args.metrics.split(",") if m in known]
    width, height = (int(v) for v in args.size.split("x"))
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController

    with tempfile.TemporaryDirectory(prefix="profiler-shot-") as state:
        collector = LocalCollector(state, pick_port(5000)).start()
        # the workload stands for a user's program, not a child of this window (which the metrics leave
        # out as the profiler's own): sh starts it in the background and exits, so it is reparented
        started_by_sh = subprocess.run(["sh", "-c", '"$0" -c "$1" </dev/null >/dev/null 2>&1 & echo $!', sys.executable,
                                        WORKLOADS[args.workload]], capture_output=True, text=True, check=True)
        workload_pid = int(started_by_sh.stdout)
        app = QApplication.instance() or QApplication([])
        controller = MonitorController(server_url=collector.url, state_dir=state, relay=GuiThreadRelay())
        window = MainWindow(controller, verdicts=preflight.metric_verdicts(),
                            settings=QSettings(os.path.join(state, "settings.ini"), QSettings.Format.IniFormat),
                            server_url=collector.url)
        try:
            window.resize(width, height)
            window.show()
            window.set_checked(metrics)
            for name in metrics if args.only_workload else ():
                if any(arg.name == "pid" for arg in config.get(name).args):
                    window.forms[name].set_values({"pid": workload_pid})
            started = window.start_checked()
            print(f"screenshot: running {', '.join(started)} for {args.seconds:g}s", flush=True)
            if args.show in window.tabs:
                window.ui.metric_tabs.setCurrentWidget(window.tabs[args.show])
                window.select_metric(args.show)
            window.ui.bottom_tabs.setCurrentIndex(1)          # the BPF overhead panel
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                app.processEvents()
                time.sleep(0.02)
            window.refresh()
            search = getattr(window.tabs.get(args.show) and window.tabs[args.show].chart, "search_box", None)
            if args.search and search is not None:
                search.setText(args.search)
            app.processEvents()
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            if not window.grab().save(args.out):
                print(f"screenshot: could not write {args.out}", file=sys.stderr)
                return 1
            print(f"screenshot: wrote {args.out} ({width}x{height})")
            for name, tab in window.tabs.items() if args.every_tab else ():
                window.ui.metric_tabs.setCurrentWidget(tab)
                app.processEvents()
                window.refresh()
                app.processEvents()
                window.grab().save(os.path.join(args.every_tab, f"{name}.png"))
        finally:
            window.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(workload_pid, signal.SIGKILL)
            collector.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
