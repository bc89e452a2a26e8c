#!/usr/bin/env python3
"""The profiler's entry point: `python main_app.py` opens the window, `--headless` runs metrics without
one (monitor/headless.py), `--doctor` checks the machine.

The window's behaviour is gui/main_window.py (MainWindow, re-exported here), its layout
ui_main_window.py. Qt is imported only for the window: the headless mode and the doctor never load it
(tests/monitor/test_headless_without_qt.py).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from host import heap_trim, preflight
from host.elevation import elevation_works, with_elevation


def __getattr__(name: str) -> Any:
    """`from main_app import MainWindow`, loaded (with Qt) on first use only."""
    if name == "MainWindow":
        from gui.main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="main_app.py", description="eBPF performance profiler")
    parser.add_argument("--doctor", action="store_true", help="check this machine and every metric, then exit")
    parser.add_argument("--server", metavar="URL", help="collector base URL, e.g. http://127.0.0.1:5000 "
                        "(default: the last one used, else none: records stay local)")
    parser.add_argument("--token", metavar="TOKEN", help="bearer token for the collector")
    parser.add_argument("--open", metavar="FILE", help="open a recorded session (--headless --record FILE, or the "
                        "window's Record button): no root, BPF or collector needed")
    parser.add_argument("--headless", action="store_true",
                        help="run metrics without a window (monitor/headless.py; see --headless --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    heap_trim.start()  # window or headless: RSS stays flat over a long run (host/heap_trim.py says why)
    if "--headless" in argv:        # its own options (--metric, --arg, --duration ...) live in monitor/headless.py
        from monitor import headless

        return headless.main([a for a in argv if a != "--headless"])
    args = build_parser().parse_args(argv)
    if args.doctor:
        return preflight.main()
    return run_window(args)


def run_window(args: argparse.Namespace) -> int:
    """The desktop app; returns when the window closes (every metric stopped, transport flushed)."""
    # Qt, the window and the pipeline load only here
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from gui.app_settings import app_settings
    from gui.main_window import MainWindow
    from gui.thread_relay import GuiThreadRelay
    from monitor.controller import MonitorController

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("eBPF profiler")
    verdicts = with_elevation(preflight.metric_verdicts(), elevation_works())   # before the window shows
    settings = app_settings()
    url = args.server if args.server is not None else settings.value("transport/url", "") or None
    token = args.token if args.token is not None else settings.value("transport/token", "") or None
    controller = MonitorController(server_url=url, token=token, relay=GuiThreadRelay())
    window = MainWindow(controller, verdicts=verdicts, settings=settings, server_url=url, token=token)
    # Ctrl-C or SIGTERM closes the window the normal way (metrics stopped, transport flushed); the
    # window's 5 Hz timer gives Python the chance to run the handler while Qt's loop waits. The close is
    # queued, not called: a signal before app.exec() would close a window not yet shown (show() opens it
    # again) and quit a loop not yet running, and the window stayed open
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: QTimer.singleShot(0, window.close))
    window.show()
    if args.open:
        window.session.open(args.open)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
