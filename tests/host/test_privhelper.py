"""The privilege helper (host/privhelper.py): the one command a least-privilege sudoers rule allows.

Quick tests: every registry metric's command line passes the helper unchanged; anything else (an unknown
name, a path, an undeclared option, a bad value) is refused with one line and exit status 2. Root tests
(CI is root; elsewhere they skip without root) make a real unprivileged user and a real
/etc/sudoers.d rule through the helper's own installer: sudo refuses that user everything but the
helper, the helper refuses untrusted code and a hostile environment, and (BPF) a metric runs as root for
that user, counted against a workload with a known number of calls, also started from the window."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time

import pytest
from helpers import PYTHON, ROOT, MetricProcess, reachable_by_others
from workloads import GETPPID_CHILD, GETPPID_N

import config
from host import privhelper
from host.privhelper import HELPER, Refused

IN_CI = bool(os.environ.get("CI"))


def sample_values(spec: config.MetricSpec) -> dict:
    values = {}
    for arg in spec.args:
        value = arg.sample if arg.sample is not None else arg.default
        if arg.type == "flag":
            value = True
        values[arg.name] = value
    return values


# --- quick: the registry's command lines, and what is refused ---------------------------------------
@pytest.mark.parametrize("spec", config.METRICS, ids=lambda s: s.name)
def test_registry_command_lines_pass_unchanged(spec):
    """What the app writes for a metric (spec.command, every declared argument given) is what the helper
    runs: the same script and arguments, under the project's interpreter in isolated mode."""
    argv = spec.command(sample_values(spec), python="PY")
    ran = privhelper.metric_argv(spec.name, argv[2:])
    assert ran == [privhelper.interpreter(), "-I", os.path.realpath(spec.path), *argv[2:]]
    bare = spec.command({}, python="PY", json_output=False)      # nothing given: nothing added
    assert privhelper.metric_argv(spec.name, bare[2:])[3:] == bare[2:]


@pytest.mark.parametrize("args, said", [
    (["nosuchmetric"], "no metric named 'nosuchmetric' in the registry"),
    (["../../../tmp/evil"], "no metric named '../../../tmp/evil'"),
    (["metrics/sysnest.py"], "no metric named 'metrics/sysnest.py'"),
    ([os.path.join(ROOT, "metrics", "sysnest.py")], "no metric named"),
    (["sysnest", "--pid", "0"], "sysnest: argument --pid: must be at least 1"),   # the script's own words
    (["sysnest", "--pid", "1; id"], "sysnest: argument --pid: must be an integer"),
    (["sysnest", "--top", "1e9"], "sysnest: argument --top: must be an integer"),
    (["sysnest", "--group-by", "everything"], "sysnest: argument --group-by: must be one of process, syscall, cgroup"),
    (["sysnest", "nan"], "sysnest: argument interval: must be a finite number"),
    (["sysnest", "1", "2", "3"], "sysnest: unrecognized arguments: 3"),
    (["sysnest", "--pid"], "sysnest: argument --pid: expected one argument"),
    (["sysnest", "--pid", "5", "--pid", "6"], "sysnest: --pid given twice"),
    (["sysnest", "--pid=5"], "sysnest: unknown option '--pid=5'"),
    (["sysnest", "-p", "5"], "sysnest: unknown option '-p'"),            # the canonical long flag only
    (["sysnest", "--validate-args"], "sysnest: unknown option '--validate-args'"),   # harness-only hooks
    (["sysnest", "--cgroup", "a\nb"], "sysnest: argument --cgroup: has a control character"),
    ([], "usage: run NAME"),
])
def test_bad_requests_are_one_line_and_exit_2(args, said):
    """Refused before anything runs, as whoever asks (no root needed to be told no)."""
    result = subprocess.run([HELPER, "run", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"privhelper: {said}"), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("argv", [[], ["exec", "/bin/sh"], ["stop", "-1"], ["sudoers", "a b"], ["sudoers", "root"]])
def test_other_commands_are_refused(argv):
    result = subprocess.run([HELPER, *argv], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stderr.startswith("privhelper: ")


def test_the_printed_rule_allows_the_helper_alone():
    result = subprocess.run([HELPER, "sudoers", "alice"], capture_output=True, text=True, timeout=30)
    rules = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert rules == [f"alice ALL=(root) NOPASSWD: {HELPER}"]


def test_a_file_others_can_write_is_refused(tmp_path):
    loose = tmp_path / "x.py"
    loose.write_text("")
    loose.chmod(0o666)
    with pytest.raises(Refused, match="writable by users other than root"):
        privhelper.check_trusted([str(loose)])


def test_the_app_starts_metrics_through_the_helper(monkeypatch):
    """The window's and headless runs' controller: as a user, the metric's argv is sudo -n, the helper,
    `run`, the name and the registry's own arguments; as root, the script itself."""
    import monitor.controller as controller_module
    from worker import build_argv

    spec = config.get("sysnest")
    direct = spec.command({"pid": 42, "interval": 0.5}, python=PYTHON)
    assert build_argv(spec, {"pid": 42, "interval": 0.5}, PYTHON, ["sudo", "-n"], elevated=True) == \
        ["sudo", "-n", HELPER, "run", "sysnest", *direct[2:]]
    assert build_argv(spec, {"pid": 42, "interval": 0.5}, PYTHON, ["sudo", "-n"], elevated=False) == direct
    assert controller_module.build_argv is build_argv


# --- root: a real user, a real sudoers rule ----------------------------------------------------------
def _root_gate() -> None:
    reason = None
    if os.geteuid() != 0:
        reason = "needs root to make a user and a sudoers rule"
    elif not all(os.stat(d).st_mode & 0o001 for d in _above(ROOT)):
        reason = f"an unprivileged user cannot reach {ROOT}"
    elif shutil.which("sudo") is None:
        reason = "sudo is not installed (scripts/apt-packages.txt lists it)"
    else:
        try:
            privhelper.check_trusted(privhelper.trusted_paths())
        except Refused as exc:
            reason = f"this checkout cannot be trusted by the helper: {exc}"
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def _above(path: str) -> list[str]:
    parts = [path]
    while parts[-1] != "/":
        parts.append(os.path.dirname(parts[-1]))
    return parts


@pytest.fixture(scope="module", autouse=True)
def checkout_reachable():
    with reachable_by_others(ROOT):
        yield


@pytest.fixture(scope="module")
def user():
    """A fresh unprivileged user with the helper's rule in /etc/sudoers.d, both removed afterwards."""
    _root_gate()
    name = f"ebpfph{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    rule = f"/etc/sudoers.d/ebpf-profiler-{name}"
    home = tempfile.mkdtemp(prefix="privhelper-home-")
    try:
        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        installed = subprocess.run([HELPER, "sudoers", name, "--install"], capture_output=True, text=True, timeout=30)
        assert installed.returncode == 0, installed.stderr
        with open(rule) as f:
            assert f"{name} ALL=(root) NOPASSWD: {HELPER}" in f.read()
        assert os.stat(rule).st_mode & 0o777 == 0o440
        yield {"name": name, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": home}
    finally:
        if os.path.exists(rule):
            os.unlink(rule)
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def as_user(user: dict, *argv: str, env: dict | None = None) -> list[str]:
    """argv run as the user (setpriv execs it: no process in between); env replaces the environment."""
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": user["home"], "USER": user["name"], "LANG": "C.UTF-8"}
    pairs = [f"{k}={v}" for k, v in {**base, **(env or {})}.items()]
    return ["setpriv", f"--reuid={user['uid']}", f"--regid={user['gid']}", "--init-groups",
            "env", "-i", *pairs, *argv]


def run_as(user: dict, *argv: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(as_user(user, *argv, env=env), capture_output=True, text=True, timeout=timeout,
                          cwd=user["home"], stdin=subprocess.DEVNULL)


def test_sudo_lets_the_user_run_the_helper_and_nothing_else(user, tmp_path):
    marker = tmp_path / "ran"
    tmp_path.chmod(0o777)
    assert run_as(user, "sudo", "-n", HELPER, "check").returncode == 0
    refused = [
        ["sudo", "-n", "true"],
        ["sudo", "-n", "id", "-u"],
        ["sudo", "-n", PYTHON, "-c", f"open({str(marker)!r}, 'w')"],
        ["sudo", "-n", "/usr/bin/python3", HELPER, "check"],            # the helper's file under another interpreter
        ["sudo", "-n", "PYTHONPATH=/tmp", HELPER, "check"],
        ["sudo", "-n", f"LD_PRELOAD={tmp_path}/x.so", HELPER, "check"],
        ["sudo", "-n", "-E", HELPER, "check"],
        ["sudo", "-n", "-u", "nobody", HELPER, "check"],
        ["sudo", "-n", "-s"],
    ]
    for argv in refused:
        result = run_as(user, *argv)
        assert result.returncode != 0 and result.stdout == "", (argv, result)
        assert result.stderr.startswith("sudo: "), (argv, result.stderr)
    assert not marker.exists()


def test_elevation_check_asks_the_helper_not_sudo_true(user):
    """As that user, `sudo -n true` is refused, and yet elevation works: the app's check asks the helper,
    and the preflight then offers every metric held back only by privileges."""
    code = ("import json, sys; sys.path.insert(0, '.'); from host.elevation import elevation_works, with_elevation; "
            "from host import preflight; v = preflight.metric_verdicts(); "
            "print(json.dumps([elevation_works(), elevation_works(['sudo', '-n', '-u', 'nobody']), "
            "sum(x.runnable for x in v), sum(x.runnable for x in with_elevation(v, elevation_works()))]))")
    result = subprocess.run(as_user(user, PYTHON, "-c", code), capture_output=True, text=True, timeout=60, cwd=ROOT)
    works, works_otherwise, alone, elevated = json.loads(result.stdout)
    assert works is True and works_otherwise is False, result.stderr
    assert elevated == len(config.METRICS) and elevated >= alone


def test_the_doctor_run_by_the_user_reports_as_root(user):
    """`main_app.py --doctor` as the user: root's view through the helper (every metric root can run is
    runnable), where alone the user sees tracefs as root's only; a user the rule does not name (nobody)
    is told the exact command that installs it."""
    from host import preflight

    root_lines, root_status = preflight.report()
    result = subprocess.run(as_user(user, PYTHON, "main_app.py", "--doctor"), capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == root_status == 0, result.stderr
    assert "root's view" in result.stdout.splitlines()[0]
    assert "privileges    ok: root" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1] == root_lines[-1]
    nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i",
                             "PATH=/usr/bin:/bin", PYTHON, "main_app.py", "--doctor"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert nobody.returncode == 1 and "Traceback" not in nobody.stderr, nobody.stderr
    assert f"  sudo {HELPER} sudoers nobody --install" in nobody.stdout.splitlines()


def test_refusals_through_sudo_are_one_line(user):
    for args, said in ((["run", "nosuchmetric"], "no metric named"), (["run", "../metrics/sysnest"], "no metric named"),
                       (["run", "sysnest", "--top", "0"], "sysnest: argument --top: must be at least 1"),
                       (["run", "sysnest", "--exec", "/bin/sh"], "sysnest: unknown option '--exec'"),
                       (["stop", str(os.getpid())], "process group")):
        result = run_as(user, "sudo", "-n", HELPER, *args)
        assert result.returncode == 2, (args, result)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"privhelper: {said}"), (args, result.stderr)


def test_stop_ends_only_a_group_the_helper_started(user):
    """A group that is not sudo running the helper's `run` (here the user's own sleep) is not the
    helper's to end, for that user or for root."""
    sleeper = subprocess.Popen(as_user(user, "sleep", "60"), start_new_session=True)
    try:
        for argv in (["sudo", "-n", HELPER, "stop", str(sleeper.pid)],):
            result = run_as(user, *argv)
            assert result.returncode == 2 and "not a metric this helper started" in result.stderr, result
        result = subprocess.run([HELPER, "stop", str(sleeper.pid)], capture_output=True, text=True, timeout=30)
        assert result.returncode == 2, result
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_code_a_user_can_change_is_refused(user, tmp_path):
    """A copy of the project where one metric script belongs to the user: the helper will not run
    anything from it (that user could make the script do anything as root)."""
    copy = tmp_path / "profiler"
    keep = ("config.py", "registry", "metrics", "bpf", "bcctool", "client", "host")
    copy.mkdir()
    for name in keep:
        source = os.path.join(ROOT, name)
        if os.path.isdir(source):
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    helper = str(copy / "host" / "privhelper.py")
    assert subprocess.run([helper, "check"], capture_output=True, text=True, timeout=30).returncode == 0
    os.chown(copy / "metrics" / "sysnest.py", user["uid"], user["gid"])
    result = subprocess.run([helper, "run", "sysnest", "1", "1"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result
    assert result.stderr.startswith(f"privhelper: refusing: {copy}/metrics/sysnest.py belongs to {user['name']}")
    os.chown(copy / "metrics" / "sysnest.py", 0, 0)
    os.chmod(copy / "bcctool", 0o777)
    result = subprocess.run([helper, "check"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "bcctool is writable by users other than root" in result.stderr, result


def test_a_hostile_environment_does_not_reach_the_helper(tmp_path):
    """PYTHONPATH with a planted config.py and sitecustomize.py, PYTHONSTARTUP, LD_PRELOAD: the helper
    (python -I) imports none of them, even run by root directly with that environment."""
    _root_gate()
    marker = tmp_path / "planted-ran"
    for name in ("config.py", "sitecustomize.py", "startup.py"):
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\nMETRICS = []\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "PYTHONSTARTUP": str(tmp_path / "startup.py"),
           "PYTHONHOME": str(tmp_path), "PYTHONINSPECT": "1"}
    result = subprocess.run([HELPER, "check"], capture_output=True, text=True, timeout=30, env=env,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


# --- root and BPF: a metric run as root for that user --------------------------------------------------
N = GETPPID_N


class ThroughHelper(MetricProcess):
    """A metric started by an argv of our choosing (here: as the user, through sudo and the helper)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd="/", start_new_session=True, stdin=subprocess.DEVNULL)
        self.records, self.prog_ids, self._buf = [], set(), ""


def workload_as(user: dict) -> subprocess.Popen:
    return subprocess.Popen(as_user(user, PYTHON, "-c", GETPPID_CHILD), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd="/")


def metric_processes(leader: int) -> list[dict]:
    """sudo's children (the metric, the helper having exec'd it): uids, argv and environment of each."""
    children = set()
    for tid in os.listdir(f"/proc/{leader}/task"):
        with open(f"/proc/{leader}/task/{tid}/children") as f:
            children |= {int(c) for c in f.read().split()}
    found = []
    for pid in sorted(children):
        try:
            with open(f"/proc/{pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0")[:-1]]
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.decode().partition("=")[::2] for e in f.read().split(b"\0") if e)
        except OSError:
            continue
        found.append({"pid": pid, "uids": [int(u) for u in uids], "argv": argv, "env": env})
    return found


@pytest.mark.bpf
def test_the_user_runs_a_metric_as_root_through_the_helper(user, tmp_path):
    """As the user, with a planted PYTHONPATH and LD_PRELOAD in the environment: the metric runs as root
    (uid 0, the registry's script under `python -I`, a clean environment) and counts the user's own
    workload's N getppid calls."""
    planted = tmp_path / "bcctool"
    planted.mkdir(parents=True)
    tmp_path.chmod(0o755)
    marker = tmp_path / "planted-ran"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w')\n")
    child = workload_as(user)
    tool = ThroughHelper(as_user(user, "sudo", "-n", HELPER, "run", "sysnest", "--pid", str(child.pid), "0.5",
                                 "--group-by", "syscall", "--top", "50", "--json",
                                 env={"PYTHONPATH": str(tmp_path), "LD_PRELOAD": str(tmp_path / "x.so")}))
    try:
        meta = tool.wait_meta()
        assert meta["filters"] == {"filter_pid": child.pid}
        (metric,) = metric_processes(tool.proc.pid)
        assert metric["uids"] == [0, 0, 0, 0]
        assert metric["argv"][1:] == ["-I", os.path.join(os.path.realpath(ROOT), "metrics", "sysnest.py"), "--pid",
                                      str(child.pid), "--group-by", "syscall", "--top", "50", "0.5", "--json"]
        assert set(metric["env"]) == set(privhelper.CLEAN_ENV)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 3)
        status, _ = tool.stop()     # SIGINT to sudo, as the app stops it: sudo relays it to the metric
        assert status == 0, tool.stderr
    finally:
        tool.kill()
        child.stdin.close()
        child.wait(timeout=30)
    count = sum(r["count"] for r in tool.records
                if r["kind"] == "row" and r["level"] == "group" and r["syscall"] == "getppid")
    assert abs(count - N) <= N * 0.001, count
    assert not marker.exists()


@pytest.mark.bpf
def test_a_group_left_running_is_ended_by_the_user_through_the_helper(user):
    """A metric started through sudo and the helper whose app is gone: the user cannot signal the root
    metric, but `sudo -n privhelper.py stop PGID` ends the group, and its BPF programs go with it."""
    from helpers import progs_released

    from host.procs import group_members, prog_ids_of

    tool = ThroughHelper(as_user(user, "sudo", "-n", HELPER, "run", "sysnest", "0.5", "--json"))
    try:
        tool.wait_meta()
        (metric,) = metric_processes(tool.proc.pid)
        held = prog_ids_of(metric["pid"])
        assert held
        refused = run_as(user, "kill", "-KILL", str(metric["pid"]))
        assert refused.returncode != 0
        ended = run_as(user, "sudo", "-n", HELPER, "stop", str(tool.proc.pid))
        assert ended.returncode == 0, ended.stderr
        tool.proc.wait(timeout=10)
        # a killed metric tears down its BPF programs and maps before it is a zombie (about 0.1 s)
        deadline = time.monotonic() + 5
        while group_members(tool.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group_members(tool.proc.pid) == []
        assert progs_released(held, timeout=5)
    finally:
        tool.kill()


@pytest.mark.bpf
def test_the_metric_dies_with_sudo(user):
    """The app's last resort is SIGKILL to the group: it reaches sudo (the user's to signal), not the root
    metric; the helper made the metric die with its parent, so it goes too, with its BPF programs."""
    from helpers import process_alive, progs_released

    from host.procs import prog_ids_of

    tool = ThroughHelper(as_user(user, "sudo", "-n", HELPER, "run", "sysnest", "0.5", "--json"))
    try:
        tool.wait_meta()
        (metric,) = metric_processes(tool.proc.pid)
        held = prog_ids_of(metric["pid"])
        assert held
        assert run_as(user, "kill", "-KILL", "--", f"-{tool.proc.pid}").returncode == 0
        tool.proc.wait(timeout=10)
        assert progs_released(held, timeout=5)
        assert not process_alive(metric["pid"])
    finally:
        tool.kill()


OVERHEAD = """
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from host.bpf_sampler import OverheadSampler
sampler = OverheadSampler(elevate=["sudo", "-n"])
sampler.set_targets({"sysnest": (int(sys.argv[1]), set()), "init": (1, set())})
sampler.sample()
time.sleep(1)
rows, summary = sampler.sample()
helper = sampler.helper.proc.pid
state = sampler.stats_state
sampler.stop()
print(json.dumps({"state": state, "rows": rows, "helper": helper}))
"""


@pytest.mark.bpf
def test_the_overhead_panel_of_a_user_reads_its_metrics_through_the_helper(user):
    """The window's overhead sampler run by the user: bpf_stats on and the counters of the user's root
    metric through `privhelper.py overhead` (within what root reads of the metric's descriptors just before
    and after), nothing of a process that is not such a metric (pid 1), and the helper gone after."""
    from host.bpf_stats import prog_stats_of_pid

    tool = ThroughHelper(as_user(user, "sudo", "-n", HELPER, "run", "sysnest", "0.5", "--json"))
    try:
        tool.wait_meta()
        (metric,) = metric_processes(tool.proc.pid)
        before = prog_stats_of_pid(metric["pid"])
        result = subprocess.run(as_user(user, PYTHON, "-c", OVERHEAD, str(metric["pid"])), capture_output=True,
                                text=True, timeout=60, cwd=ROOT)
        after = prog_stats_of_pid(metric["pid"])
    finally:
        tool.stop()
        tool.kill()
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout)
    assert seen["state"].startswith("on (held by the privilege helper")
    progs = {r["id"]: r for r in seen["rows"] if r["metric"] == "sysnest" and r["id"] is not None}
    assert set(progs) == set(before) == set(after) and progs
    for prog_id, row in progs.items():
        assert before[prog_id].run_cnt <= row["run_cnt"] <= after[prog_id].run_cnt
        if row["name"] == "tracepoint__cgroup__cgroup_attach_task":   # runs on a cgroup move only
            continue
        assert row["name"] in ("sys_enter", "sys_exit") and row["runs_per_s"] > 0 and row["cpu_pct"] > 0
    assert not [r for r in seen["rows"] if r["metric"] == "init" and r["id"] is not None]
    assert not os.path.exists(f"/proc/{seen['helper']}")


WINDOW = """
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
app = QApplication(["profiler"])
from host import preflight
from host.elevation import elevation_works, with_elevation
from bcctool.taskinfo import descendants
from gui.thread_relay import GuiThreadRelay
from main_app import MainWindow
from monitor.controller import MonitorController

state = sys.argv[1]
verdicts = {v.name: v for v in with_elevation(preflight.metric_verdicts(), elevation_works())}
controller = MonitorController(None, state_dir=state, relay=GuiThreadRelay())
window = MainWindow(controller, verdicts=list(verdicts.values()),
                    settings=QSettings(os.path.join(state, "settings.ini"), QSettings.Format.IniFormat))
records = []
controller.records.connect(lambda name, batch: records.extend(batch))
started = window.start_metric("sysnest", {"pid": int(sys.argv[2]), "interval": 0.5, "group_by": "syscall", "top": 50})
worker = controller._workers["sysnest"]
uids, deadline = [], time.monotonic() + 60
while time.monotonic() < deadline and not any(r.get("kind") == "summary" and r.get("interval", 0) >= 2 for r in records):
    app.processEvents()
    for pid in descendants(worker.pid or 0)[1:]:
        try:
            uids.append(int(next(l for l in open(f"/proc/{pid}/status") if l.startswith("Uid:")).split()[2]))
        except (OSError, StopIteration):
            pass
    time.sleep(0.05)
print(json.dumps({"runnable": verdicts["sysnest"].runnable, "started": started, "argv": worker.argv,
                  "metric_euids": sorted(set(uids)), "summaries": sum(r.get("kind") == "summary" for r in records),
                  "pid": worker.pid}))
sys.stdout.flush()
window.shutdown()
"""


@pytest.mark.bpf
def test_the_window_started_by_the_user_starts_its_metric_through_the_helper(user):
    """The real window (offscreen) run by the user: the preflight offers sysnest (elevation works through
    the helper), its start goes through sudo and the helper, the metric runs as root, and records come."""
    child = workload_as(user)
    try:
        result = subprocess.run(as_user(user, PYTHON, "-c", WINDOW, user["home"], str(child.pid),
                                        env={"QT_QPA_PLATFORM": "offscreen", "XDG_RUNTIME_DIR": user["home"]}),
                                capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        child.stdin.close()
        child.kill()
        child.wait()
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["runnable"] and seen["started"]
    assert seen["argv"][:5] == ["sudo", "-n", HELPER, "run", "sysnest"], seen["argv"]
    assert seen["metric_euids"] == [0], seen
    assert seen["summaries"] >= 2
    assert not os.path.exists(f"/proc/{seen['pid']}"), "the window left its metric running"
