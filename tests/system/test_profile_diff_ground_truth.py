"""The diff of two selections against the workload's own clock: a C program (tests/support/hotspots.py,
frame pointers) spends its one thread in hot_a and hot_b, 70/30 of its CPU in one run and 30/70 in the
other, timing every call on its thread CPU clock; each run is profiled by cpuprofile under the headless
client (--command: the program in a cgroup of its own, cpuprofile limited to it) posting to a real
collector (server.py), and /api/profile/diff between the two runs gives each function's change of share
within 5 points of the change the program measured itself."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from urllib.parse import quote

import pytest
import requests
from helpers import PYTHON, ROOT
from hotspots import SHARES_C, build
from server_fixtures import ServerProcess

pytestmark = [pytest.mark.bpf, pytest.mark.slow]

SECONDS = 6.0
HZ = 997
HOT = ("hot_a", "hot_b")


def profiled_run(exe: str, share: float, server: ServerProcess, tmp_path, name: str) -> dict[str, float]:
    """One run of the workload under cpuprofile, posted to the collector; the program's own shares of
    its CPU time, in %."""
    report = tmp_path / f"{name}.json"
    argv = [PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "cpuprofile",
            "--arg", "cpuprofile.interval=0.5", "--arg", f"cpuprofile.frequency={HZ}",
            "--command", shlex.join([exe, str(share), str(SECONDS), str(report)]), "--server", server.url,
            "--state-dir", str(tmp_path / f"state-{name}")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    own = json.loads(report.read_text())
    return {f: 100.0 * own[f] / own["cpu_s"] for f in HOT}


@pytest.mark.timeout(420)
def test_diff_of_two_runs_matches_the_workloads_own_change(tmp_path):
    exe = build(SHARES_C, str(tmp_path), "shares")
    server = ServerProcess("--db", str(tmp_path / "lab.db"), output=str(tmp_path / "server.log"))
    try:
        base_truth = profiled_run(exe, 0.7, server, tmp_path, "base")
        target_truth = profiled_run(exe, 0.3, server, tmp_path, "target")
        streams = requests.get(server.url + "/api/streams?source=cpuprofile", timeout=10).json()["streams"]
        runs = [s["run_id"] for s in sorted(streams, key=lambda s: s["first_seen"])]
        assert len(runs) == 2, streams
        sides = {side: quote(f"source=cpuprofile&run_id={run}&comm=shares") for side, run in zip(("base", "target"), runs, strict=True)}
        answer = requests.get(f"{server.url}/api/profile/diff?base={sides['base']}&target={sides['target']}", timeout=60)
    finally:
        server.stop()
    assert answer.status_code == 200, answer.text[:500]
    body = answer.json()
    assert body["base"]["total"] > SECONDS * HZ * 0.5 and body["target"]["total"] > SECONDS * HZ * 0.5
    changes = {f["name"]: f for f in body["functions"] if f["name"] in HOT}
    assert set(changes) == set(HOT), [f["name"] for f in body["functions"][:10]]
    for name in HOT:
        truth = target_truth[name] - base_truth[name]
        assert abs(truth) > 30   # the runs did differ as asked (70/30 against 30/70)
        assert changes[name]["change_pct"] == pytest.approx(truth, abs=5.0), (name, changes[name], base_truth,
                                                                               target_truth)
    assert [f["name"] for f in body["functions"][:2]] in (list(HOT), list(HOT)[::-1])   # the largest changes first
