"""A metric started by host.procs dies with the thread that started it (so with the app), and starting it
does not fork the whole app: setpriv sets the death signal and execs the metric in the same pid."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from host import procs


def started_from_a_thread(argv: list[str]) -> subprocess.Popen:
    """argv started as a metric worker starts one, from a thread that then ends."""
    out: list[subprocess.Popen] = []

    def start() -> None:
        cmd, hook = procs.dying_with_parent(argv)
        out.append(subprocess.Popen(cmd, preexec_fn=hook, start_new_session=True))
        time.sleep(0.3)   # setpriv has exec'd the program by then

    t = threading.Thread(target=start)
    t.start()
    t.join()
    return out[0]


def test_the_child_is_killed_when_its_starting_thread_ends():
    child = started_from_a_thread(["sleep", "60"])
    try:
        status = child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    assert status == -9   # SIGKILL, the death signal, not the sleep's end


def test_the_metric_runs_in_the_started_pid_with_its_own_argv():
    argv, hook = procs.dying_with_parent(["sleep", "30"])
    assert hook is None and os.path.basename(argv[0]) == "setpriv"   # no pre-exec hook: Popen vforks
    child = subprocess.Popen(argv)
    try:
        time.sleep(0.3)
        with open(f"/proc/{child.pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[:2] == [b"sleep", b"30"]
    finally:
        child.kill()
        child.wait()


def test_a_missing_program_is_popens_own_error():
    argv, hook = procs.dying_with_parent(["/nonexistent/python3", "x.py"])
    assert argv == ["/nonexistent/python3", "x.py"] and hook is not None
