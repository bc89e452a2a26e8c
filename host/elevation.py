"""Running a metric as root when the app is not: the one place that knows the elevation command
(`sudo -n` unless told otherwise), when it is needed, whether it works here, and how its refusals read.

Loading BPF needs root, and capabilities of a non-root app are not inherited across exec, so a metric
of a non-root app starts as `sudo -n host/privhelper.py run NAME ARGS...`: the privilege helper, which
runs only the registry's scripts with arguments checked against their declarations, is the one command
a sudoers rule needs to allow (docs/privileges.md); `-n` makes sudo refuse at once rather than wait for
a password nobody can type.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import subprocess
from collections.abc import Sequence

from host.privhelper import HELPER, PROG
from host.verdict import Verdict

DEFAULT_ELEVATE = ("sudo", "-n")


def needs_elevation() -> bool:
    """Loading BPF needs root; capabilities of a non-root app are not inherited across exec."""
    return os.geteuid() != 0


def command_for_this_user(elevate: Sequence[str] = DEFAULT_ELEVATE) -> list[str]:
    """The prefix that starts a root process as this user: the elevation command, or nothing for root."""
    return list(elevate) if needs_elevation() else []


def elevated_argv(name: str, argv: list[str], elevate: Sequence[str] | None,
                  elevated: bool | None = None) -> list[str]:
    """Metric `name`'s argv ([python, script, args...]) as it starts: as is for root, else the same
    arguments through the elevation command and the privilege helper, which runs that script itself."""
    if elevated is None:
        elevated = needs_elevation()
    return [*elevate, HELPER, "run", name, *argv[2:]] if elevated and elevate else argv


def elevation_works(command: Sequence[str] = DEFAULT_ELEVATE) -> bool:
    """Whether this user can start a metric as root without a password (always, when already root):
    asks the privilege helper itself, as the metrics will start, so a rule that allows only the helper
    counts as working and one that allows anything but it does not."""
    if not needs_elevation():
        return True
    try:
        return subprocess.run([*command, HELPER, "check"], capture_output=True, timeout=10,
                              stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def with_elevation(verdicts: list[Verdict], elevation_ok: bool) -> list[Verdict]:
    """The preflight judges this user; the controller starts each metric through `sudo -n`. A metric
    held back only by privileges can run when that works, and otherwise says what to do."""
    adjusted = []
    for verdict in verdicts:
        if not verdict.runnable and verdict.reason.startswith("needs root"):
            reason = "" if elevation_ok else ("needs root, and `sudo -n` refuses the privilege helper: run the app as "
                                              f"root, or allow the helper alone: {install_advice()}")
            verdict = dataclasses.replace(verdict, runnable=not reason, reason=reason)
        adjusted.append(verdict)
    return adjusted


def said_by_elevation(elevate: Sequence[str], line: str) -> bool:
    """A stderr line written by the elevation command itself (`sudo: ...`) or by the privilege helper
    refusing (`privhelper: ...`)."""
    return bool(elevate) and line.startswith((f"{os.path.basename(elevate[0])}:", f"{PROG}:"))


def user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or "USER"


def install_command() -> str:
    """What a user types to allow this user the privilege helper and nothing else."""
    return f"sudo {HELPER} sudoers {user_name()} --install"


def install_advice() -> str:
    return f"`{install_command()}` (or `sudo make sudoers FOR={user_name()}`; docs/privileges.md)"


def doctor_as_root(command: Sequence[str] = DEFAULT_ELEVATE, timeout: float = 60) -> tuple[str, int] | None:
    """(report, exit status) of the preflight run as root by the privilege helper; None when the
    elevation command refuses the helper (or the helper refuses to run)."""
    try:
        done = subprocess.run([*command, HELPER, "doctor"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout, done.returncode) if done.stdout.startswith("kernel") else None


def refused_message(name: str, elevate: Sequence[str], said: str) -> str:
    """One clear message when the elevation command refused (e.g. sudo wants a password), or the helper
    did (its own line says why). The advice allows the privilege helper only, never the interpreter:
    sudo for python would be root for anything."""
    if said.startswith(f"{PROG}:"):
        return f"cannot start {name} as root: the privilege helper refused: {said.removeprefix(PROG + ':').strip()}"
    return (f"cannot start {name} as root: `{' '.join(elevate)}` refused the privilege helper ({said}). "
            f"Run the app as root, or allow this user the helper alone: {install_advice()}.")


def missing_message(name: str, program: str) -> str:
    """The elevation command itself is not installed."""
    return (f"cannot start {name} as root: elevation command `{program}` not found. "
            "Run the app as root, or configure another elevation command.")
