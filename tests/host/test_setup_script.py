"""scripts/setup.sh as a user who is not root and cannot sudo (`make test-quick` needs no root): with
everything in place it only checks and says "ready"; a package the profiler needs that is missing ends
it with one line naming the package and the command that installs it; one only tests or benchmarks use
is a warning. Run on a copy of the checkout's setup (its own package list) whose venv and npm packages
are the checkout's, as user nobody when the tests run as root, else as the user running them."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
from helpers import ROOT, reachable_by_others

NOBODY = 65534
ABSENT = "ebpf-profiler-no-such-package"   # a name no distro has: it is always "missing"


def _runner() -> list[str]:
    if os.geteuid() == 0:
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        pytest.skip("this user can sudo without a password: setup would install what is missing")
    return []


@pytest.fixture
def checkout(tmp_path: pathlib.Path):
    """A checkout holding setup.sh, its package list and requirements, the real venv and npm packages."""
    for name in ("scripts/setup.sh", "scripts/apt-packages.txt", "requirements.txt",
                 "collector/vendor/package-lock.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    os.symlink(os.path.realpath(os.path.join(ROOT, ".venv")), tmp_path / ".venv")
    os.symlink(os.path.realpath(os.path.join(ROOT, "collector/vendor/node_modules")),
               tmp_path / "collector/vendor/node_modules")
    for path in [tmp_path, *tmp_path.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755)
    with reachable_by_others(ROOT), reachable_by_others(str(tmp_path)):
        yield tmp_path


def setup(checkout: pathlib.Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(checkout), "LANG": "C.UTF-8"}
    return subprocess.run([*_runner(), "bash", str(checkout / "scripts/setup.sh")], env=env, capture_output=True,
                          text=True, timeout=120)


def with_package(checkout: pathlib.Path, section: str) -> None:
    """ABSENT listed first under the package list's `# required` or `# optional` heading."""
    listing = checkout / "scripts/apt-packages.txt"
    lines = listing.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"# {section}"))
    listing.write_text("\n".join([*lines[:at + 1], ABSENT, *lines[at + 1:]]) + "\n")


def test_with_everything_in_place_a_user_gets_ready_without_root(checkout):
    done = setup(checkout)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "setup: ready", done.stdout
    assert "installing" not in done.stdout and "needs root" not in done.stderr, done.stderr
    assert "could not mount" not in done.stderr   # tracefs is mounted: a user cannot look in, not a reason


def test_a_missing_package_the_profiler_needs_is_named_with_its_command(checkout):
    with_package(checkout, "required")
    done = setup(checkout)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"setup: installing {ABSENT} needs root: run `sudo make setup` once (or sudo apt-get install {ABSENT})")
    assert "ready" not in done.stdout


def test_a_missing_package_for_tests_only_is_a_warning(checkout):
    with_package(checkout, "optional")
    done = setup(checkout)
    assert done.returncode == 0, done.stderr
    assert f"not installed (for tests or benchmarks only; installing needs root): {ABSENT}" in done.stderr
    assert done.stdout.splitlines()[-1] == "setup: ready"
