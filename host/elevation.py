"""Running a metric as root when the app is not: the one place that knows the elevation command
(`sudo -n` unless told otherwise), when it is needed, whether it works here, and how its refusals read.

Loading BPF needs root, and capabilities of a non-root app are not inherited across exec, so a metric
of a non-root app starts as `sudo -n python metrics/NAME.py ...`; `-n` makes sudo refuse at once rather
than wait for a password nobody can type.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Sequence

from host.preflight import Verdict

DEFAULT_ELEVATE = ("sudo", "-n")


def needs_elevation() -> bool:
    """Loading BPF needs root; capabilities of a non-root app are not inherited across exec."""
    return os.geteuid() != 0


def command_for_this_user(elevate: Sequence[str] = DEFAULT_ELEVATE) -> list[str]:
    """The prefix that starts a root process as this user: the elevation command, or nothing for root."""
    return list(elevate) if needs_elevation() else []


def elevated_argv(argv: list[str], elevate: Sequence[str] | None, elevated: bool | None = None) -> list[str]:
    """argv through the elevation command when the app is not root (or `elevated` says so)."""
    if elevated is None:
        elevated = needs_elevation()
    return [*elevate, *argv] if elevated and elevate else argv


def elevation_works(command: Sequence[str] = DEFAULT_ELEVATE) -> bool:
    """Whether this user can start a metric as root without a password (always, when already root)."""
    if not needs_elevation():
        return True
    try:
        return subprocess.run([*command, "true"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def with_elevation(verdicts: list[Verdict], elevation_ok: bool) -> list[Verdict]:
    """The preflight judges this user; the controller starts each metric through `sudo -n`. A metric
    held back only by privileges can run when that works, and otherwise says what to do."""
    adjusted = []
    for verdict in verdicts:
        if not verdict.runnable and verdict.reason.startswith("needs root"):
            reason = "" if elevation_ok else "needs root, and `sudo -n` is refused: run the app as root or allow sudo"
            verdict = dataclasses.replace(verdict, runnable=not reason, reason=reason)
        adjusted.append(verdict)
    return adjusted


def said_by_elevation(elevate: Sequence[str], line: str) -> bool:
    """A stderr line written by the elevation command itself (`sudo: ...`)."""
    return bool(elevate) and line.startswith(f"{os.path.basename(elevate[0])}:")


def refused_message(name: str, elevate: Sequence[str], command: Sequence[str], said: str) -> str:
    """One clear message when the elevation command refused (e.g. sudo wants a password). command is
    what it was asked to run: the interpreter and the metric script. The advice allows the metric
    scripts only: passwordless sudo for the interpreter alone would be root for anything."""
    interpreter, script = command[0], command[1] if len(command) > 1 else ""
    return (f"cannot start {name} as root: `{' '.join(elevate)}` refused ({said}). Run the app as root, or let "
            f"this user run the metric scripts only, with a sudoers rule like "
            f"`{os.environ.get('USER') or 'USER'} ALL=(root) NOPASSWD: {interpreter} {os.path.dirname(script)}/*.py *`.")


def missing_message(name: str, program: str) -> str:
    """The elevation command itself is not installed."""
    return (f"cannot start {name} as root: elevation command `{program}` not found. "
            "Run the app as root, or configure another elevation command.")
