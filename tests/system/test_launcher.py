"""`make run` (launcher.py): a local collector, then the window or, with no display, the headless mode;
the collector is stopped after the app has flushed, and whatever the app sent is in its database."""

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest
from collector_stub import free_port
from helpers import ROOT

import config
import launcher

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

LAUNCHER = os.path.join(ROOT, "launcher.py")


def clean_env(tmp_path, display: str | None) -> dict[str, str]:
    """No display (or a pretend one), and the user's config and state directories under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "xdgstate"))
    if display:
        env["DISPLAY"] = display
    return env


def test_the_command_depends_on_the_display():
    assert launcher.has_display({"DISPLAY": ":0"}) and launcher.has_display({"WAYLAND_DISPLAY": "wayland-0"})
    assert not launcher.has_display({})
    window = launcher.app_command("http://127.0.0.1:5000", True, [], python="py")
    assert window[2:] == ["--server", "http://127.0.0.1:5000"]
    headless = launcher.app_command("http://127.0.0.1:5000", False, ["--duration", "3"], python="py")
    assert headless[2:5] == ["--headless", "--server", "http://127.0.0.1:5000"]
    assert [headless[i + 1] for i, a in enumerate(headless) if a == "--metric"] == list(launcher.HEADLESS_METRICS)
    chosen = launcher.app_command("u", False, ["--metric", "offcpu"], python="py")
    assert chosen.count("--metric") == 1


def test_a_busy_port_moves_the_collector_elsewhere():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert launcher.pick_port(port) != port
    assert launcher.pick_port(port) == port


def stored_batches(db: str) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT source, COUNT(*) FROM batches GROUP BY source").fetchall())


@pytest.mark.bpf
def test_without_a_display_it_runs_headless_against_its_own_collector(tmp_path):
    port = free_port()
    summary = tmp_path / "summary.json"
    result = subprocess.run([sys.executable, LAUNCHER, "--port", str(port), "--state-dir", str(tmp_path),
                             "--", "--duration", "4", "--summary-json", str(summary)],
                            cwd=ROOT, env=clean_env(tmp_path, None), capture_output=True, text=True, timeout=180)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "launcher: no display (DISPLAY and WAYLAND_DISPLAY are unset): running headless with" in out
    assert f"collector on http://127.0.0.1:{port}" in out and "launcher: collector stopped" in out
    assert launcher.port_free(port), "the collector still listens after the launcher exited"
    report = json.loads(summary.read_text())
    known = {spec.name for spec in config.METRICS}
    assert set(report["metrics"]) == {m for m in launcher.HEADLESS_METRICS if m in known}
    sent = {name: m["batches_sent"] for name, m in report["metrics"].items()}
    assert all(n > 0 for n in sent.values()), sent
    # everything the app says it sent is in the collector's database, which lives in the state dir
    assert stored_batches(str(tmp_path / "collector.db")) == sent


def test_with_a_display_it_opens_the_window_and_stops_the_collector_after_it(tmp_path):
    port = free_port()
    env = clean_env(tmp_path, ":pretend")
    env["QT_QPA_PLATFORM"] = "offscreen"          # a window, drawn without an X server
    proc = subprocess.Popen([sys.executable, LAUNCHER, "--port", str(port), "--state-dir", str(tmp_path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        app = None
        while time.monotonic() < deadline and app is None:
            time.sleep(0.2)
            children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            for pid in children:
                with open(f"/proc/{pid}/cmdline") as f:
                    if "main_app.py" in f.read():
                        app = int(pid)
        assert app is not None, "the window never started"
        assert not launcher.port_free(port), "the collector is not listening while the window runs"
        time.sleep(3)                                     # the window is up and idle
        proc.send_signal(signal.SIGTERM)                  # passed on: the window closes the normal way
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "launcher: collector stopped" in out
    assert not os.path.exists(f"/proc/{app}"), "the window process outlived the launcher"
    assert launcher.port_free(port)
    settings = tmp_path / "config" / "ebpf-profiler" / "profiler.ini"
    assert f"http://127.0.0.1:{port}" in settings.read_text(), "the window did not save the collector it used"


# the window's show() sends SIGTERM to itself: the signal lands after the handler is installed and
# before app.exec() runs the loop (a window test saw it, at load 4-6, keep a window open 60 s)
SIGNAL_BEFORE_THE_LOOP = """
import os, signal, sys
import main_app
from gui.main_window import MainWindow
shown = MainWindow.show
def show_then_signal(self):
    shown(self)
    os.kill(os.getpid(), signal.SIGTERM)
MainWindow.show = show_then_signal
sys.exit(main_app.main([]))
"""


def test_a_sigterm_before_the_event_loop_runs_still_closes_the_window(tmp_path):
    env = clean_env(tmp_path, None)
    env["QT_QPA_PLATFORM"] = "offscreen"
    proc = subprocess.run([sys.executable, "-c", SIGNAL_BEFORE_THE_LOOP], cwd=ROOT, env=env, timeout=60,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
