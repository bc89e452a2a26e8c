"""cgroup v2 groups a test makes under the real v2 mount, and workloads started inside them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from bcctool import cgroups


class MadeCgroups:
    """Makes groups under the v2 mount (named for this test run) and removes them, children first,
    after moving anything still in them to the root."""

    def __init__(self, mount: str) -> None:
        self.mount = mount
        self.base = os.path.join(mount, f"pytest-cg-{os.getpid()}-{time.monotonic_ns()}")
        os.mkdir(self.base)
        self.made = [self.base]

    def make(self, name: str) -> str:
        path = os.path.join(self.base, name)
        os.mkdir(path)
        self.made.append(path)
        return path

    def id_of(self, path: str) -> int:
        return cgroups.cgroup_id(path)

    def rel(self, path: str) -> str:
        """The path as records carry it: relative to the mount, '/' first."""
        return "/" + os.path.relpath(path, self.mount)

    def remove(self) -> None:
        for path in sorted(self.made, key=len, reverse=True):
            for _ in range(50):
                try:
                    with open(os.path.join(path, "cgroup.procs")) as f:
                        pids = f.read().split()
                    for pid in pids:
                        try:
                            with open(os.path.join(self.mount, "cgroup.procs"), "w") as f:
                                f.write(pid)
                        except OSError:
                            pass
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@pytest.fixture
def test_cgroups() -> Iterator[MadeCgroups]:
    mount = cgroups.v2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    groups = MadeCgroups(mount)
    try:
        yield groups
    finally:
        groups.remove()


def workload_in(cgroup: str | None, code: str, *args: str) -> subprocess.Popen:
    """run_workload's child, moved into `cgroup` (None: left where the test is) before it execs, so
    the interpreter's whole life is in the group."""

    def enter() -> None:
        if cgroup is not None:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=enter)
