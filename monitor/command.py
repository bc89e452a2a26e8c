"""Command mode: a command started inside a new cgroup v2 group of its own, held at a gate until every
metric filtering on that group has attached, so the metrics see it from its first instruction.

The child is forked, moves itself into the group, then blocks reading a pipe; the profiler writes one
byte once every metric's `meta` record has arrived (a metric prints it after its probes are attached),
and the child execs the command. Everything the command starts is born in the group, so children,
grandchildren and threads are all in. At the end, whatever the command left running in the group is
killed (cgroup.kill) and the group removed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import time

from bcctool import cgroups

NOT_STARTED = 127   # the shell's status for a command that could not be run


class CommandError(Exception):
    """A command that cannot be started; str() is the one line to print."""


def parse(text: str) -> list[str]:
    """The command's argv; CommandError when it is empty, unbalanced or names no executable."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise CommandError(f"--command {text!r}: {exc}") from None
    if not argv:
        raise CommandError("--command is empty")
    if shutil.which(argv[0]) is None:
        raise CommandError(f"--command: {argv[0]}: command not found or not executable")
    return argv


class GatedCommand:
    """One command: its cgroup, the gated child, its exit."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        mount = cgroups.v2_mount()
        if mount is None:
            raise CommandError(f"--command: {cgroups.NO_CGROUP2}")
        own = cgroups.own_cgroup() or "/"
        self.cgroup = os.path.join(mount + own.rstrip("/"), f"profiler-command-{os.getpid()}")
        try:
            os.mkdir(self.cgroup)
        except OSError as exc:
            raise CommandError(f"--command: cannot make the cgroup {self.cgroup}: {exc.strerror}") from None
        self.pid = 0
        self._gate = -1
        self.started = self.ended = 0.0
        self.status: int | None = None      # the exit status, or None when killed by a signal
        self.signal: int | None = None

    def spawn(self) -> None:
        """Fork the child into the group, stopped at the gate."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: only os calls from here to exec
            try:
                os.close(w)
                with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
                if os.read(r, 1) != b"g":      # the profiler gave up (a metric failed): never run
                    os._exit(NOT_STARTED)
                os.close(r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.execvp(self.argv[0], self.argv)
            except BaseException:  # noqa: BLE001 - nothing may run the parent's code in the child
                pass
            os._exit(NOT_STARTED)
        os.close(r)
        self.pid, self._gate = pid, w

    def release(self) -> None:
        """Every metric is attached: let the command run."""
        self.started = time.monotonic()
        os.write(self._gate, b"g")
        os.close(self._gate)
        self._gate = -1

    def poll(self) -> bool:
        """True once the command has exited (reaped)."""
        if not self.pid or self.ended:
            return bool(self.ended)
        pid, wstatus = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.ended = time.monotonic()
        if os.WIFSIGNALED(wstatus):
            self.signal = os.WTERMSIG(wstatus)
        else:
            self.status = os.WEXITSTATUS(wstatus)
        return True

    def finish(self) -> None:
        """Stop a command still gated or running, kill what it left in its group, remove the group."""
        if self._gate >= 0:
            os.close(self._gate)          # the child reads EOF and exits without running the command
            self._gate = -1
        _kill_group(self.cgroup)
        deadline = time.monotonic() + 10
        while self.pid and not self.poll() and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(50):
            try:
                os.rmdir(self.cgroup)
                return
            except FileNotFoundError:
                return
            except OSError:
                _kill_group(self.cgroup)
                time.sleep(0.05)

    def outcome(self) -> dict:
        """What the summary says of the command."""
        wall = round(self.ended - self.started, 3) if self.started and self.ended else 0.0
        killed = signal.Signals(self.signal).name if self.signal else None
        return {"argv": self.argv, "cgroup": self.cgroup, "started": bool(self.started), "exit_status": self.status,
                "signal": killed, "wall_s": wall}

    def exit_status(self) -> int:
        """The profiler's own exit status: the command's, 128 + N when signal N killed it (as a shell)."""
        if self.signal:
            return 128 + self.signal
        return NOT_STARTED if self.status is None else self.status


def _kill_group(path: str) -> None:
    """Kill every process in the group and below (cgroup.kill, Linux 5.14+; else each pid)."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
        return
    except OSError:
        pass
    for tid in cgroups.threads_in(path):
        try:
            os.kill(tid, signal.SIGKILL)
        except OSError:
            pass
