"""The diff of two selections against the workload's own clock: a C program (tests/support/share_workload.py,
frame pointers) spends its one thread in hot_a and hot_b, 70/30 of its CPU in one run and 30/70 in the
other, timing every call on its thread CPU clock; each run is profiled by cpuprofile -p under the
headless client posting to a real collector (server.py), and /api/profile/diff between the two runs gives
each function's change of share within 5 points of the change the program measured itself. (Not
--command: its child is sampled once before it execs the program, and cpuprofile then names the
program's addresses from the maps it read of the child before, "[unknown]" for 40 % of the samples.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from urllib.parse import quote

import pytest
import requests
from helpers import PYTHON, ROOT
from server_fixtures import ServerProcess
from share_workload import build_shares

pytestmark = [pytest.mark.bpf, pytest.mark.slow]

SECONDS = 6.0
HZ = 997
HOT = ("hot_a", "hot_b")


def new_run(server: ServerProcess, known: set[str], timeout: float = 120.0) -> str:
    """The run id of the first cpuprofile stream not in `known` (a metric posts once it has attached)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        streams = requests.get(server.url + "/api/streams?source=cpuprofile", timeout=10).json()["streams"]
        fresh = [s["run_id"] for s in streams if s["run_id"] not in known]
        if fresh:
            return fresh[0]
        time.sleep(0.2)
    raise AssertionError("cpuprofile posted nothing to the collector")


def summary_after(server: ServerProcess, run_id: str, ts: float, timeout: float = 60.0) -> None:
    """Wait for the run's first summary record after ts: every sample before it is named and posted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = requests.get(server.url + "/api/records", params={"source": "cpuprofile", "run_id": run_id,
                             "kind": "summary", "since": ts, "limit": 1}, timeout=10).json()["records"]
        if found:
            return
        time.sleep(0.2)
    raise AssertionError(f"no summary of run {run_id} after {ts}")


def profiled_run(exe: str, share: float, server: ServerProcess, tmp_path, known: set[str]) -> tuple[str, dict]:
    """One run of the workload under cpuprofile -p (it is started, and waits, before the metric attaches:
    no sample of it is taken before its exec), posted by the headless client to the collector: the run
    id, and the program's own shares of its CPU time in %."""
    child = subprocess.Popen([exe, str(round(share * 1000)), str(SECONDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    word, pid = child.stdout.readline().split()
    assert word == "ready"
    argv = [PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "cpuprofile",
            "--arg", f"cpuprofile.pid={pid}", "--arg", "cpuprofile.interval=0.5", "--arg", f"cpuprofile.frequency={HZ}",
            "--server", server.url, "--state-dir", str(tmp_path / f"state-{share}"), "--duration", "300"]
    with open(tmp_path / f"headless-{share}.log", "w") as log:
        client = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        run_id = new_run(server, known)
        child.stdin.write("\n")
        child.stdin.flush()
        own = json.loads(child.stdout.readline())
        summary_after(server, run_id, time.time() + 1.0)
        client.send_signal(signal.SIGINT)   # Ctrl-C: the metric stopped, the outbox sent
        assert client.wait(timeout=60) == 0, (tmp_path / f"headless-{share}.log").read_text()[-3000:]
    finally:
        if client.poll() is None:
            client.kill()
        child.communicate("\n", timeout=30)
    return run_id, {f: 100.0 * own[f] / own["cpu_s"] for f in HOT}


@pytest.mark.timeout(420)
def test_diff_of_two_runs_matches_the_workloads_own_change(tmp_path):
    exe = build_shares(tmp_path)
    server = ServerProcess("--db", str(tmp_path / "lab.db"), output=str(tmp_path / "server.log"))
    try:
        base_run, base_truth = profiled_run(exe, 0.7, server, tmp_path, set())
        target_run, target_truth = profiled_run(exe, 0.3, server, tmp_path, {base_run})
        sides = {side: quote(f"source=cpuprofile&run_id={run}&comm=shares")
                 for side, run in (("base", base_run), ("target", target_run))}
        answer = requests.get(f"{server.url}/api/profile/diff?base={sides['base']}&target={sides['target']}", timeout=60)
    finally:
        server.stop()
    assert answer.status_code == 200, answer.text[:500]
    body = answer.json()
    assert body["base"]["total"] > SECONDS * HZ * 0.5 and body["target"]["total"] > SECONDS * HZ * 0.5
    changes = {f["name"]: f for f in body["functions"] if f["name"] in HOT}
    assert set(changes) == set(HOT), [f["name"] for f in body["functions"][:10]]
    print(f"own shares {base_truth} -> {target_truth}; diff change_pct "
          f"{ {n: round(changes[n]['change_pct'], 2) for n in HOT} }")
    for name in HOT:
        truth = target_truth[name] - base_truth[name]
        assert abs(truth) > 30   # the runs did differ as asked (70/30 against 30/70)
        assert changes[name]["change_pct"] == pytest.approx(truth, abs=5.0), (name, changes[name], base_truth,
                                                                               target_truth)
    assert [f["name"] for f in body["functions"][:2]] in (list(HOT), list(HOT)[::-1])   # the largest changes first
