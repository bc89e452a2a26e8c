"""The window's "Run a command" box (gui/command_panel.py; its thread, monitor/command_run.py): the checked metrics
start limited to a new cgroup, the command waits until each has sent its meta record, runs in that
group, and its exit status is shown; the metrics are stopped and the group removed when it ends.
A fake controller stands in for the metrics (no BPF); the command, its fork, gate and cgroup are real."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from gui_fakes import FakeController, make_window

from bcctool import cgroups

MOUNT = cgroups.v2_mount()
pytestmark = pytest.mark.skipif(MOUNT is None or not os.access(MOUNT, os.W_OK),
                                reason="needs a writable cgroup v2 hierarchy (root)")


def meta(name: str) -> list[dict]:
    return [{"metric": name, "ts": time.time(), "kind": "meta", "interval": 0, "pid": 1}]


@pytest.fixture
def window(qtbot, tmp_path):
    controller = FakeController()
    window = make_window(qtbot, tmp_path, controller)
    yield window
    window.command.shutdown()


def run(qtbot, window, command: str, names=("sysnest", "pagefault")) -> None:
    window.set_checked(list(names))
    window.ui.command_line.setText(command)
    window.ui.run_command_button.click()


def started_cgroups(window) -> dict[str, str]:
    return {name: values.get("cgroup") for name, values in window.controller.started}


def test_the_command_runs_gated_in_its_own_group_and_its_exit_status_is_shown(qtbot, window, tmp_path):
    out = tmp_path / "cgroup-of-the-command"
    run(qtbot, window, f"sh -c 'cat /proc/self/cgroup > {out}; sh -c \"exit 0\" & wait; exit 3'")
    qtbot.waitUntil(lambda: len(window.controller.started) == 2, timeout=10000)
    groups = started_cgroups(window)
    group = groups["sysnest"]
    assert groups == {"sysnest": group, "pagefault": group} and group.startswith(MOUNT) and os.path.isdir(group)
    assert window.ui.run_command_button.text() == "Stop command"
    # the gate: not a single instruction of the command until every metric has said it is attached
    window.controller.records.emit("sysnest", meta("sysnest"))
    qtbot.wait(400)
    assert not out.exists() and window.command.running_pid is None
    window.controller.records.emit("pagefault", meta("pagefault"))
    qtbot.waitUntil(lambda: window.command.run is None, timeout=10000)
    status = window.ui.command_status.text()
    assert status.startswith("exit status 3 · "), status
    assert out.read_text().strip().endswith(group[len(MOUNT):])   # 0::/<its group>: it ran in it
    assert sorted(window.controller.stopped) == ["pagefault", "sysnest"]
    assert not os.path.exists(group)                              # removed once the metrics stopped
    assert window.ui.run_command_button.text() == "Run" and window.ui.command_line.isEnabled()
    assert window.command.last_outcome["exit"] == 3 and window.command.last_outcome["signal"] is None
    again = make_window(qtbot, tmp_path, FakeController())               # the same settings file
    assert again.ui.command_line.text().endswith("exit 3'")          # the last command is offered again


def test_stop_kills_the_running_command_and_says_so(qtbot, window):
    run(qtbot, window, "sleep 60", names=("sysnest",))
    qtbot.waitUntil(lambda: bool(window.controller.started), timeout=10000)
    window.controller.records.emit("sysnest", meta("sysnest"))
    qtbot.waitUntil(lambda: window.command.running_pid is not None, timeout=10000)
    pid, group = window.command.running_pid, started_cgroups(window)["sysnest"]
    window.ui.run_command_button.click()
    qtbot.waitUntil(lambda: window.command.run is None, timeout=15000)
    assert window.ui.command_status.text().startswith("killed by SIGKILL"), window.ui.command_status.text()
    assert not os.path.exists(f"/proc/{pid}") and not os.path.exists(group)
    assert window.controller.stopped == ["sysnest"]


def test_a_metric_that_ends_before_attaching_means_the_command_never_runs(qtbot, window, tmp_path):
    out = tmp_path / "ran"
    run(qtbot, window, f"touch {out}")
    qtbot.waitUntil(lambda: len(window.controller.started) == 2, timeout=10000)
    group = started_cgroups(window)["sysnest"]
    window.controller.records.emit("sysnest", meta("sysnest"))
    window.controller.crash("pagefault", 1, "pagefault: cannot attach")
    qtbot.waitUntil(lambda: window.command.run is None, timeout=10000)
    assert window.ui.command_status.text() == "not run: pagefault ended before the command could start"
    assert not out.exists() and not os.path.exists(group)
    assert "sysnest" in window.controller.stopped          # the other metric is not left running


def test_a_command_that_cannot_start_starts_no_metric(qtbot, window):
    run(qtbot, window, "no-such-command-here --x")
    qtbot.waitUntil(lambda: window.command.run is None, timeout=10000)
    assert window.ui.command_status.text() == "not started: no-such-command-here: command not found or not executable"
    assert window.controller.started == []
    run(qtbot, window, "sh -c 'unbalanced")
    qtbot.waitUntil(lambda: window.command.run is None, timeout=10000)
    assert window.ui.command_status.text() == "not started: \"sh -c 'unbalanced\": No closing quotation"


@pytest.mark.parametrize("command, names, running, reason", [
    ("", ["sysnest"], [], "type a command"),
    ("true", [], [], "check the metrics"),
    # every registered metric takes --cgroup now: netpack's entry is given one without it here
    ("true", ["sysnest", "netpack"], [], "netpack cannot be limited to a cgroup"),
    ("true", ["sysnest"], ["sysnest"], "stop sysnest first"),
])
def test_refusals_say_why_in_the_box(qtbot, window, command, names, running, reason):
    if "cannot be limited" in reason:
        spec = window.specs["netpack"]
        window.specs["netpack"] = dataclasses.replace(spec, args=tuple(a for a in spec.args if a.name != "cgroup"))
    for name in running:
        window.controller.start_metric(name, {})
    window.set_checked(names)
    window.ui.command_line.setText(command)
    started = len(window.controller.started)
    assert window.command.start() is False
    assert window.ui.command_status.text().startswith("not started: ") and reason in window.ui.command_status.text()
    assert window.command.run is None and len(window.controller.started) == started


def test_closing_the_window_kills_the_command_and_removes_its_group(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path, FakeController())
    run(qtbot, window, "sleep 60", names=("sysnest",))
    qtbot.waitUntil(lambda: bool(window.controller.started), timeout=10000)
    window.controller.records.emit("sysnest", meta("sysnest"))
    qtbot.waitUntil(lambda: window.command.running_pid is not None, timeout=10000)
    pid, group = window.command.running_pid, started_cgroups(window)["sysnest"]
    window.close()
    assert not os.path.exists(f"/proc/{pid}") and not os.path.exists(group)


def test_the_fork_and_the_group_are_never_on_the_gui_thread(qtbot, window, monkeypatch):
    """GatedCommand's work (mkdir of the group, fork, waitpid, cgroup.kill, rmdir) runs on CommandRun's thread."""
    import threading

    from monitor import command

    seen = []
    for method in ("__init__", "spawn", "release", "poll", "finish"):
        original = getattr(command.GatedCommand, method)

        def spy(self, *args, _original=original, _method=method, **kwargs):
            seen.append((_method, threading.current_thread() is threading.main_thread()))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(command.GatedCommand, method, spy)
    panel_slots = []        # and the panel's slots, which start metrics and touch widgets, run on the GUI thread
    for slot in ("_on_spawned", "_on_released", "_on_exited", "_on_finished"):
        original = getattr(window.command, slot)

        def slot_spy(*args, _original=original, _slot=slot):
            panel_slots.append((_slot, threading.current_thread() is threading.main_thread()))
            return _original(*args)

        monkeypatch.setattr(window.command, slot, slot_spy)
    run(qtbot, window, "true", names=("sysnest",))
    qtbot.waitUntil(lambda: bool(window.controller.started), timeout=10000)
    window.controller.records.emit("sysnest", meta("sysnest"))
    qtbot.waitUntil(lambda: window.command.run is None, timeout=10000)
    assert window.ui.command_status.text().startswith("exit status 0")
    assert [s for s, _ in panel_slots] == ["_on_spawned", "_on_released", "_on_exited", "_on_finished"]
    assert all(on_main for _, on_main in panel_slots), panel_slots
    assert {m for m, _ in seen} == {"__init__", "spawn", "release", "poll", "finish"}
    assert not any(on_main for _, on_main in seen), seen


def test_stop_at_the_gate_never_runs_the_command(qtbot, window, tmp_path):
    out = tmp_path / "ran"
    run(qtbot, window, f"touch {out}", names=("sysnest",))
    qtbot.waitUntil(lambda: bool(window.controller.started), timeout=10000)
    group = started_cgroups(window)["sysnest"]
    window.ui.run_command_button.click()       # Stop command, before the metric has attached
    qtbot.waitUntil(lambda: window.command.run is None, timeout=10000)
    assert window.ui.command_status.text() == "not run: stopped before every metric had attached"
    assert not out.exists() and not os.path.exists(group) and window.controller.stopped == ["sysnest"]
