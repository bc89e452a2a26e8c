#!/usr/bin/python3 -I
"""The privilege helper: the one command a least-privilege sudoers rule lets a user run as root.

    privhelper.py run NAME [ARGS...]      run registry metric NAME (config.py) with ARGS, as root
    privhelper.py check                   exit 0 when this runs as root with trusted code (elevation works)
    privhelper.py doctor                  the preflight (main_app.py --doctor) as root, as the metrics run
    privhelper.py stop PGID               end a metric group a killed app left running (only such a group)
    privhelper.py overhead                bpf_stats on while it runs; per line of pids read, the BPF program
                                          counters of those that are metrics this helper started for the caller
    privhelper.py sudoers [USER] [--install]   print (or install) the rule that allows this helper only

It runs nothing but the scripts config.py registers, with arguments parsed against their declarations
and rebuilt from the parsed values (so an option the registry does not declare never reaches a script),
under the project's own interpreter in isolated mode (-I: no PYTHONPATH, no user site, no script
directory on sys.path), with a fixed environment (no LD_PRELOAD, no PYTHON*). A sudoers rule for the
venv's python instead would be root for anything (`python -c ...`).

Such a rule is only least privilege while a user cannot change what the helper runs, so every file
and directory on the way (this helper, config.py and registry/, the metric and its harness, the interpreter
and the venv) must be root's and writable by root only; otherwise the helper refuses to start anything.
Every refusal is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pwd
import re
import signal
import stat
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:   # at run time the registry is imported where a metric is looked up (metric_argv)
    from registry.spec import MetricSpec

HELPER = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HELPER))
PROG = "privhelper"
SUDOERS_DIR = "/etc/sudoers.d"
# what the metric sees of the environment; nothing of the caller's passes (sudo resets it too, but a rule
# with SETENV or env_keep must not be able to change that)
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
             "HOME": "/root", "PYTHONUNBUFFERED": "1"}
# the project's directories whose code runs as root (the metric, its harness, the registry, this helper)
TRUSTED_DIRS = ("metrics", "bpf", "bcctool", "client", "host", "registry")
PR_SET_PDEATHSIG = 1


class Refused(Exception):
    """A request the helper will not carry out; its text is the one line the caller sees."""


# --- arguments: the registry's declarations ----------------------------------------------------------
class _MetricParser(argparse.ArgumentParser):
    """A metric's parser in the helper: a bad argument is a refusal (one line, exit 2), not argparse's exit."""

    def error(self, message: str) -> NoReturn:
        raise Refused(f"{self.prog}: {message}")


def parse_metric_args(spec: MetricSpec, tokens: list[str]) -> tuple[dict, bool]:
    """(values by argument name, --json given) from a metric's command line in the form
    config.MetricSpec.command writes it (declared long flags, `--flag VALUE`, positionals, --json),
    parsed as the script's own parser parses it (bcctool.arguments.add_argument: each value through
    Arg.convert) but with the long flags alone. Anything else that looks like an option (a short flag,
    `--flag=VALUE`, a harness hook) or an option given twice is refused first."""
    from bcctool.arguments import add_argument

    declared = [arg.flag for arg in spec.args if arg.flag]
    options = [token for token in tokens if token.startswith("-") and len(token) > 1 and token != "--json"]
    for token in options:
        if token not in declared:
            raise Refused(f"{spec.name}: unknown option {token!r} (the registry declares "
                          f"{', '.join(sorted(declared)) or 'none'})")
        if options.count(token) > 1:
            raise Refused(f"{spec.name}: {token} given twice")
    parser = _MetricParser(prog=spec.name, add_help=False, allow_abbrev=False)
    for arg in spec.args:
        add_argument(parser, arg, canonical=True)
    parser.add_argument("--json", action="store_true")
    parsed = parser.parse_args(tokens)
    return {arg.name: getattr(parsed, arg.name) for arg in spec.args}, parsed.json


def metric_argv(name: str, tokens: list[str]) -> list[str]:
    """The exact command the helper runs for `run NAME TOKENS`: the registry's script under the
    project's interpreter, with the arguments rebuilt from their validated values."""
    import config

    spec = next((s for s in config.METRICS if s.name == name), None)
    if spec is None:
        raise Refused(f"no metric named {name!r} in the registry (known: {', '.join(s.name for s in config.METRICS)})")
    script = os.path.realpath(spec.path)
    if os.path.dirname(script) != os.path.join(os.path.realpath(ROOT), "metrics"):
        raise Refused(f"{name}: its script {spec.file} is not in the project's metrics directory")
    values, json_output = parse_metric_args(spec, tokens)
    try:
        argv = spec.command(values, python=interpreter(), json_output=json_output)
    except ValueError as exc:
        raise Refused(f"{name}: {exc}") from None
    return [argv[0], "-I", script, *argv[2:]]


def interpreter() -> str:
    """The project's venv python (its packages: pyelftools...), else the system's."""
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else "/usr/bin/python3"


# --- trust: nothing a user can change runs as root --------------------------------------------------
def _check_one(path: str) -> None:
    st = os.lstat(path)
    if st.st_uid != 0:
        owner = _user_name(st.st_uid)
        raise Refused(f"refusing: {path} belongs to {owner}, and anything the helper runs as root must be "
                      "root's (install the profiler root-owned: docs/privileges.md)")
    loose = st.st_mode & (stat.S_IWOTH | (stat.S_IWGRP if st.st_gid != 0 else 0))
    sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if loose and not sticky_dir:
        raise Refused(f"refusing: {path} is writable by users other than root (mode {stat.S_IMODE(st.st_mode):o}); "
                      "the helper runs only code root alone can change (docs/privileges.md)")


def check_trusted(paths: list[str]) -> None:
    """Each path (symlinks followed) and every directory above it: root's, writable by root only."""
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        chain = [real]
        while chain[-1] != "/":
            chain.append(os.path.dirname(chain[-1]))
        for part in chain:
            if part not in seen:
                seen.add(part)
                _check_one(part)


def trusted_paths() -> list[str]:
    """What runs as root when the helper starts a metric: the project's code (including this helper),
    the interpreter, and the venv with its site-packages and their .pth files (run at startup)."""
    paths = [HELPER, os.path.join(ROOT, "config.py")]
    for sub in TRUSTED_DIRS:
        top = os.path.join(ROOT, sub)
        if os.path.isdir(top):
            for base, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                paths.append(base)
                paths += [os.path.join(base, f) for f in files if f.endswith((".py", ".c", ".h"))]
    python = interpreter()
    paths.append(python)
    venv = os.path.join(ROOT, ".venv")
    if os.path.isdir(venv):
        paths.append(os.path.join(venv, "pyvenv.cfg"))
        lib = os.path.join(venv, "lib")
        for version in os.listdir(lib):
            site = os.path.join(lib, version, "site-packages")
            if os.path.isdir(site):
                paths.append(site)
                paths += [os.path.join(site, f) for f in os.listdir(site) if f.endswith(".pth")]
    return paths


def _user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def die_with_parent() -> None:
    """The metric dies with sudo, its parent (kept across the exec of a non-set-uid program): when the
    app stops a metric the hard way, SIGKILL reaches sudo, which the app may signal, but not the root
    metric, which would otherwise go on holding its BPF programs with nobody reading it."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        raise Refused("the command that started the helper is gone")


def require_root() -> None:
    if os.geteuid() != 0:
        raise Refused("must run as root (through sudo, e.g. `sudo -n " + HELPER + " check`)")


# --- the commands ------------------------------------------------------------------------------------
def run(tokens: list[str]) -> int:
    if not tokens:
        raise Refused("usage: run NAME [ARGS...]")
    argv = metric_argv(tokens[0], tokens[1:])
    require_root()
    check_trusted(trusted_paths())
    os.chdir(ROOT)
    os.umask(0o022)
    die_with_parent()
    os.execve(argv[0], argv, CLEAN_ENV)
    return 127   # not reached


def check() -> int:
    require_root()
    check_trusted(trusted_paths())
    print(f"{PROG}: ok: root, and {ROOT} is root's alone")
    return 0


# the preflight's report as root: fixed code, the same interpreter, directory and environment as a metric
DOCTOR_CODE = "import sys; sys.path.insert(0, '.'); from host import preflight; sys.exit(preflight.main())"


def doctor() -> int:
    require_root()
    check_trusted(trusted_paths())
    os.chdir(ROOT)
    python = interpreter()
    os.execve(python, [python, "-I", "-c", DOCTOR_CODE], CLEAN_ENV)
    return 127   # not reached


def stop(tokens: list[str]) -> int:
    """SIGKILL a process group only when its leader is sudo running this helper's `run` for the caller
    (the group a killed app left behind), never any other group."""
    require_root()
    if len(tokens) != 1 or not tokens[0].isdigit() or int(tokens[0]) < 2:
        raise Refused("usage: stop PGID (a process group id)")
    pgid = int(tokens[0])
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as f:
            leader = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        with open(f"/proc/{pgid}/status") as f:
            real_uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration, ValueError):
        raise Refused(f"no process group {pgid}") from None
    caller = os.environ.get("SUDO_UID")
    ours = (os.getpgid(pgid) == pgid and HELPER in leader and "run" in leader[leader.index(HELPER):]
            and os.path.basename(leader[0]) == "sudo")
    if not ours or (caller is not None and str(real_uid) != caller):
        raise Refused(f"process group {pgid} is not a metric this helper started for you")
    os.killpg(pgid, signal.SIGKILL)
    return 0


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(f"{field}:")).split()[1])


def started_for(pid: int, caller: str | None) -> bool:
    """pid is a metric this helper ran (the project's interpreter, -I, a script in metrics/) whose parent
    is sudo running the helper's `run` for the caller (its real uid)."""
    try:
        argv = _cmdline(pid)
        parent = _status(pid, "PPid")
        leader = _cmdline(parent)
        parent_uid = _status(parent, "Uid")
    except (OSError, StopIteration, ValueError):
        return False
    ours = (len(argv) >= 3 and argv[0] == interpreter() and argv[1] == "-I"
            and os.path.dirname(argv[2]) == os.path.join(os.path.realpath(ROOT), "metrics"))
    return (ours and os.path.basename(leader[0] if leader else "") == "sudo" and HELPER in leader
            and "run" in leader[leader.index(HELPER):] and (caller is None or str(parent_uid) == caller))


def overhead() -> int:
    """For an app that is not root, the overhead panel's numbers: bpf_stats on (an enable-stats fd the
    kernel drops when this process ends), and for each line of pids on stdin one JSON line on stdout,
    {pid: [[prog id, run_time_ns, run_cnt, type, name], ...]}, for the pids that are metrics this
    helper started for the caller (others are left out). Ends at end of input or with its parent."""
    import json

    from host.bpf_stats import enable_stats_fd, prog_stats_bpftool, prog_stats_of_pid

    require_root()
    check_trusted(trusted_paths())
    die_with_parent()
    held = enable_stats_fd()
    state = "on (held by the privilege helper while metrics run)" if held is not None else \
        "unavailable: the kernel refused BPF_ENABLE_STATS"
    print(json.dumps({"stats": state}), flush=True)
    caller = os.environ.get("SUDO_UID")
    names: dict[int, str] = {}
    for line in sys.stdin:
        answer = {}
        for word in line.split()[:64]:
            if not word.isdigit() or not started_for(int(word), caller):
                continue
            progs = prog_stats_of_pid(int(word)) or {}
            if progs.keys() - names.keys():
                names.update({i: s.name for i, s in prog_stats_bpftool().items() if i in progs})
            answer[word] = [[i, s.run_time_ns, s.run_cnt, s.type, names.get(i, "")] for i, s in progs.items()]
        print(json.dumps(answer), flush=True)
    return 0


def sudoers_rule(user: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", user):
        raise Refused(f"not a user name: {user!r}")
    return (f"# {user} may run the eBPF profiler's metrics as root, through its helper alone\n"
            f"{user} ALL=(root) NOPASSWD: {HELPER}\n")


def sudoers(tokens: list[str]) -> int:
    install = "--install" in tokens
    names = [t for t in tokens if t != "--install"]
    user = names[0] if names else os.environ.get("SUDO_USER") or os.environ.get("USER") or ""
    if len(names) > 1:
        raise Refused("usage: sudoers [USER] [--install]")
    if user in ("", "root"):
        raise Refused("name the user the rule is for (sudoers alice, or make sudoers FOR=alice): root needs none")
    rule = sudoers_rule(user)
    if not install:
        print(rule, end="")
        return 0
    require_root()
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise Refused(f"no user named {user!r}") from None
    check_trusted(trusted_paths())
    path = os.path.join(SUDOERS_DIR, f"ebpf-profiler-{user.replace('.', '_')}")
    fd, tmp = tempfile.mkstemp(dir=SUDOERS_DIR, prefix=".ebpf-profiler")   # files with a '.' are not read
    try:
        with os.fdopen(fd, "w") as f:
            f.write(rule)
        os.chmod(tmp, 0o440)
        checked = subprocess.run(["visudo", "-cqf", tmp], capture_output=True, text=True)
        if checked.returncode != 0:
            raise Refused(f"visudo rejected the rule: {(checked.stderr or checked.stdout).strip()}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"{PROG}: installed {path}: {user} may run {HELPER} as root, nothing else")
    return 0


COMMANDS = {"run": run, "check": lambda t: check(), "doctor": lambda t: doctor(), "stop": stop,
            "overhead": lambda t: overhead(), "sudoers": sudoers}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"{PROG}: usage: {HELPER} run NAME [ARGS...] | check | doctor | stop PGID | overhead | sudoers [USER] [--install]",
              file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    # -I left the script's directory off sys.path: the project's modules come from ROOT, nowhere else
    sys.path.insert(0, ROOT)
    sys.exit(main(sys.argv[1:]))
