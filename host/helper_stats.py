"""The overhead panel's numbers for an app that is not root: its metrics run as root, so it can neither
read their programs' descriptors nor turn bpf_stats on. One `sudo -n privhelper.py overhead` process,
started when metrics run and ended when none does, holds bpf_stats on while it lives and answers each
line of pids with the counters of those that are metrics the helper started for this user."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time

from host.bpf_stats import ProgStat
from host.privhelper import HELPER

HELPER_WAIT = 5.0      # seconds for the helper's answer before the panel gives up on it


class HelperStats:
    """Used from the sampler's thread only (a subprocess: never on the GUI thread)."""

    def __init__(self, elevate: list[str]) -> None:
        self.elevate = list(elevate)
        self.proc: subprocess.Popen | None = None
        self.state = ""          # how bpf_stats is on, for the panel
        self._buf = b""

    def stats_of(self, pids: set[int]) -> dict[int, dict[int, ProgStat]]:
        """{pid: {prog id: counters}} of those pids that are this user's metrics; {} when unavailable."""
        if self.proc is None and not self._start():
            return {}
        try:
            os.write(self.proc.stdin.fileno(), (" ".join(map(str, sorted(pids))) + "\n").encode())
            answer = json.loads(self._readline() or "null")
            return {int(pid): {p[0]: ProgStat(p[0], p[1], p[2], p[3], p[4]) for p in progs}
                    for pid, progs in answer.items()}
        except (OSError, ValueError, TypeError, AttributeError, IndexError):
            self.close()
            self.state = "unavailable: the privilege helper stopped answering"
            return {}

    def _start(self) -> bool:
        try:
            self.proc = subprocess.Popen([*self.elevate, HELPER, "overhead"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            self.state = json.loads(self._readline() or "null")["stats"]
            return True
        except (OSError, ValueError, TypeError, KeyError):
            said = self._said()
            self.close()
            self.state = f"unavailable: the privilege helper did not start ({said or 'no answer'})"
            return False

    def _readline(self) -> str | None:
        deadline = time.monotonic() + HELPER_WAIT
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def _said(self) -> str:
        """The helper's (or sudo's) last stderr line, once it has exited."""
        if self.proc is None:
            return ""
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return ""
        lines = (self.proc.stderr.read() or b"").decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def close(self) -> None:
        """End the helper (end of its input); bpf_stats goes off with it."""
        proc, self.proc, self._buf = self.proc, None, b""
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
        try:
            proc.wait(timeout=HELPER_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
