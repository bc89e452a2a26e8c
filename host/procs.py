"""Process bookkeeping for metric subprocesses, without Qt: the BPF programs a process holds, dying with
the app (PR_SET_PDEATHSIG), and ending what a killed app left behind (a process's descendants:
bcctool.taskinfo.descendants).

A metric runs in its own process group (pgid = its pid). The pids of running groups are written to
<state dir>/children/<pid>.json so that, if the app is killed before it can stop them, the next start
finds and ends them (PR_SET_PDEATHSIG covers most of it, but not a child started through sudo: the
kernel clears the death signal on a set-uid exec).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

from host.fdinfo import fd_infos
from host.privhelper import HELPER

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl   # resolved now: the pre-exec hook must not load anything after fork


def die_with_parent() -> Callable[[], None]:
    """A preexec_fn: SIGKILL the child when the thread that started it exits (so also when the app
    dies). If the app is already gone by then, the child exits at once rather than run unsupervised.
    Only where setpriv is missing (dying_with_parent)."""
    parent = os.getpid()

    def hook() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return hook


def dying_with_parent(argv: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """(argv, preexec_fn) for Popen: the child SIGKILLed when the thread that started it exits. Through
    util-linux's setpriv, which sets the death signal and execs argv (the pid stays; the signal is kept
    across the exec of a program that is not set-uid), not a preexec_fn: a Python pre-exec hook makes
    Popen fork the whole process instead of vfork, 0.45 s a start with 0.5 GB of heap (measured in the
    test process after the collector's 10,000-request test; 2 ms without), the interpreter's lock held
    meanwhile. What setpriv does not do is the hook's check that the app is still there: a child whose
    app died in that instant runs until its first record meets the closed pipe."""
    setpriv = shutil.which("setpriv")
    if setpriv and shutil.which(argv[0]):   # a program not found: Popen's own error, as without setpriv
        return [setpriv, "--pdeathsig", "KILL", "--", *argv], None
    return argv, die_with_parent()


def prog_ids_of(pid: int) -> set[int]:
    """IDs of the BPF programs a process holds open (its program fds and links)."""
    ids = set()
    for info in fd_infos(pid) or ():
        try:
            ids.add(int(info["prog_id"]))
        except (KeyError, ValueError):
            continue
    return ids


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start time in clock ticks) of a process, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()    # the command name may contain spaces and ')'
    return fields[0], int(fields[2]), int(fields[19])


def start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[2] if stat else None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group pgid."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat and stat[1] == pgid and stat[0] != "Z":
                members.append(int(entry))
    return members


def boot_id() -> str | None:
    """This boot's random id: pids and start times (ticks since boot) mean nothing across a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


class ChildRegistry:
    """The process groups this app has running, on disk, so a later start can end them."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.join(directory, "children")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)

    def _path(self, pid: int) -> str:
        return os.path.join(self.directory, f"{pid}.json")

    def record(self, pid: int, argv: list[str]) -> None:
        entry = {"pid": pid, "start": start_time(pid), "app_pid": os.getpid(),
                 "app_start": start_time(os.getpid()), "argv": argv, "boot_id": boot_id()}
        tmp = self._path(pid) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, self._path(pid))

    def forget(self, pid: int) -> None:
        try:
            os.unlink(self._path(pid))
        except FileNotFoundError:
            pass

    def end_leftovers(self, elevate: list[str] | None = None, wait: float = 2.0) -> list[str]:
        """End the groups of apps that are no longer running; one message per group ended or not."""
        messages = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            try:
                with open(path) as f:
                    entry = json.load(f)
                pgid = int(entry["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                os.unlink(path)
                continue
            if entry.get("boot_id") != boot_id():
                # recorded before a reboot (or by a version that did not say): its pids and start times
                # now name unrelated processes, which the checks below could mistake for it
                os.unlink(path)
                continue
            if entry.get("app_start") and start_time(entry.get("app_pid", 0)) == entry["app_start"]:
                continue        # its app is still running (another window or headless run): not ours
            leader_start = start_time(pgid)
            if leader_start is not None and leader_start != entry.get("start"):
                os.unlink(path)     # that pid is another process now; the old group is gone
                continue
            members = group_members(pgid)
            if members:
                messages.append(self._end_group(pgid, members, entry.get("argv", []), elevate, wait))
            os.unlink(path)
        return messages

    @staticmethod
    def _end_group(pgid: int, members: list[int], argv: list[str], elevate: list[str] | None,
                   wait: float) -> str:
        what = f"leftover metric process group {pgid} ({' '.join(argv[-3:])})"
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return f"{what} was already gone"
        except PermissionError:
            # a group started through sudo runs as root: the privilege helper that started it ends it (it
            # ends only a group whose leader is sudo running the helper's `run` for this user)
            if not elevate:
                return f"cannot end {what}: not permitted"
            subprocess.run([*elevate, HELPER, "stop", str(pgid)], capture_output=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = group_members(pgid)
        return f"cannot end {what}: pids {left} still alive" if left else f"ended {what}"
