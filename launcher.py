#!/usr/bin/env python3
"""`make run`: a local collector (server.py, SQLite under the state directory) in the background, then the
window pointed at it; the collector stops after the window has closed and flushed its last batches.
With no display (neither DISPLAY nor WAYLAND_DISPLAY) it runs the headless mode with a default metric set
instead, and says so.

    python launcher.py                  # collector on 127.0.0.1:5000 (or a free port), then the window
    python launcher.py --port 5050      # a chosen port
    python launcher.py -- --metric offcpu --duration 60   # extra arguments for the headless mode
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import config
from client import statedir
from registry.args import APP_PID_ENV

ROOT = os.path.dirname(os.path.abspath(__file__))
HEADLESS_METRICS = ("sysnest", "pagefault", "cpuschedrun")   # cheap ones that show the pipeline working


def has_display(env: dict[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(preferred: int) -> int:
    if port_free(preferred):
        return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCollector:
    """server.py in its own session (so a Ctrl-C in the terminal reaches the app first, and the collector
    is still there for the app's final flush); its output goes to collector.log in the state directory."""

    def __init__(self, state_dir: str, port: int, python: str = sys.executable) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.db = os.path.join(state_dir, "collector.db")
        self.log_path = os.path.join(state_dir, "collector.log")
        self.python = python
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> LocalCollector:
        argv = [self.python, os.path.join(ROOT, "server.py"), "--port", str(self.port), "--db", f"sqlite:///{self.db}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the collector exited with status {self.proc.returncode}: {self._log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the collector did not answer on {self.url} within {timeout:g}s: {self._log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-3:])
        except OSError:
            return ""


def app_command(url: str, display: bool, extra: list[str], python: str = sys.executable) -> list[str]:
    main_app = os.path.join(ROOT, "main_app.py")
    if display:
        return [python, main_app, "--server", url, *extra]
    if not any(a == "--metric" for a in extra):
        known = {s.name for s in config.METRICS}
        extra = [x for name in HEADLESS_METRICS if name in known for x in ("--metric", name)] + extra
    return [python, main_app, "--headless", "--server", url, *extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launcher.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=5000, help="collector port (default 5000, else a free one)")
    parser.add_argument("--state-dir", help="where the collector's database and log go (default: XDG state dir)")
    parser.add_argument("extra", nargs="*", help="passed on to main_app.py (after --)")
    args = parser.parse_args(argv)
    state = statedir.state_dir(args.state_dir)
    display = has_display()
    collector = LocalCollector(state, pick_port(args.port))
    try:
        collector.start()
    except RuntimeError as exc:
        print(f"launcher: {exc}", file=sys.stderr)
        return 1
    print(f"launcher: collector on {collector.url} (dashboard {collector.url}/, database {collector.db})", flush=True)
    command = app_command(collector.url, display, args.extra)
    if not display:
        metrics = [command[i + 1] for i, a in enumerate(command) if a == "--metric"]
        print(f"launcher: no display (DISPLAY and WAYLAND_DISPLAY are unset): running headless with "
              f"{', '.join(metrics)} until Ctrl-C", flush=True)
    try:
        # the app's metrics leave out the launcher's tree (the app, them, this collector): registry/args.py
        app = subprocess.Popen(command, cwd=ROOT, env={**os.environ, APP_PID_ENV: str(os.getpid())})
        # Ctrl-C reaches the app too (same process group); SIGTERM or SIGHUP to us is passed on. Either
        # way the app closes cleanly and flushes, and only then does the collector stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, _frame: app.send_signal(signum))
        status = app.wait()
    finally:
        collector.stop()
        print("launcher: collector stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
