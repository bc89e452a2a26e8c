"""Baselines from outside the live session, for a flame graph's "Compare": a metric's profile in a saved
session file (monitor/session_profile.py), or a selection's profile from a collector (client/profile_fetch.py),
each named by where it came from ("baseline: file run1.ndjson, 12.3 s"). Reading a file and asking a
collector may take seconds: BaselineLoader runs them on a thread of its own and hands the result back to
the GUI thread by a queued signal, so the window never waits on a disk or the network.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

import config
from client.profile_fetch import FetchError, fetch_folded
from monitor.session import SessionError
from monitor.session_profile import session_profile
from profile_data import Frame, Profile, parse_folded
from profile_data.records import PYTHON_NAME


@dataclass(frozen=True)
class Baseline:
    profile: Profile
    label: str             # where it came from, for the panel's status line


def from_file(path: str, spec: config.MetricSpec, from_s: float = 0.0, to_s: float | None = None) -> Baseline:
    """spec's profile over the session at path, or over [from_s, to_s] seconds of it."""
    got = session_profile(path, spec, from_s, to_s)
    whole = from_s == 0 and (to_s is None or to_s >= got.session_s)
    span = "" if whole else f" (from {from_s:g} s of {got.session_s:.1f} s)"
    return Baseline(got.profile, f"baseline: file {os.path.basename(path)}, {got.span_s:.1f} s{span}")


def from_collector(url: str, selection: Mapping[str, Sequence[str]], unit: str, token: str | None = None,
                   shown_metric: str = "") -> Baseline:
    """The selection's profile from the collector at url, its folded weights read in `unit`."""
    profile = with_python_kinds(parse_folded(fetch_folded(url, selection, token), unit))
    if not profile.total:
        raise FetchError("the collector has no stacks for that selection")
    words = ["baseline: collector"]
    sources = [s for s in selection.get("source", ()) if s and s != shown_metric]
    words += [", ".join(sources)] if sources else []
    for key, name in (("host", "host"), ("run_id", "run"), ("cgroup", "cgroup"), ("comm", "comm")):
        values = [v for v in selection.get(key, ()) if v]
        words += [f"{name} {', '.join(values)}"] if values else []
    ranges = [r for r in selection.get("range", ()) if r]
    return Baseline(profile, " ".join(words) + (f", range {ranges[0]}" if ranges else ""))


def with_python_kinds(profile: Profile) -> Profile:
    """Folded text has no mark for a CPython function: a frame named as bcctool/pyframes.py names one
    ("qualname (file:line)") is one again, so it meets the same frame of the live stacks."""
    def kind_of(frame: Frame) -> Frame:
        return frame._replace(kind="python") if frame.kind == "user" and PYTHON_NAME.match(frame.name) else frame

    if not any(PYTHON_NAME.match(f.name) for stack in profile.stacks for f in stack[1:]):
        return profile
    return Profile(profile.unit, ((tuple(map(kind_of, stack)), weight) for stack, weight in profile))


class BaselineLoader(QObject):
    done = Signal(object, str)        # the Baseline, or None and one line saying why not

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, job: Callable[[], Baseline]) -> None:
        self.thread = threading.Thread(target=self._run, args=(job,), name="baseline-loader", daemon=True)
        self.thread.start()

    def _run(self, job: Callable[[], Baseline]) -> None:
        try:
            baseline, why = job(), ""
        except (SessionError, FetchError, ValueError, OSError) as e:
            baseline, why = None, str(e).splitlines()[0] if str(e) else type(e).__name__
        try:
            self.done.emit(baseline, why)       # queued to the GUI thread, where this object lives
        except RuntimeError:
            pass                                # the window closed meanwhile
