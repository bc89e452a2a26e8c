"""The rules every metric keeps, whatever it traces (bcctool's docstring states them):
- how long it runs: `-i 0.5 2` is two half-second intervals, then exit 0; `--duration` ends a run that
  has no count;
- targets: a process, thread, parent or device that does not exist is one line and exit 2 at start
  (before anything loads); a traced process that exits ends the metric after that interval, with an
  `end` record.
Each case is generated from the registry, so a new metric is held to the same rules."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import PYTHON, MetricProcess, end_workload, run_workload, script

import config

NO_SUCH = {"--pid": "999999", "--tid": "999999", "--ppid": "999999", "--dev": "nosuch0", "--device": "nosuch0"}
TARGETS = [(spec.name, arg.flag) for spec in config.METRICS for arg in spec.args if arg.flag in NO_SUCH]
IDS = [spec.name for spec in config.METRICS]
PID_METRICS = [name for name, flag in TARGETS if flag == "--pid"]


@pytest.mark.parametrize(("metric", "flag"), TARGETS, ids=[f"{m} {f}" for m, f in TARGETS])
def test_a_target_that_does_not_exist_is_one_line_and_exit_2(metric: str, flag: str) -> None:
    done = subprocess.run([PYTHON, script(metric), flag, NO_SUCH[flag]], capture_output=True, text=True,
                          timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "no " in lines[0] and NO_SUCH[flag] in lines[0], lines[0]


@pytest.mark.parametrize("argv", [["-i", "0.5", "1", "2"], ["-i", "0.5", "1.5"]], ids=["three", "fraction"])
def test_with_i_a_positional_is_only_the_count(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, script("sysnest"), *argv, "--validate-args"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(("argv", "interval", "count", "duration"), [
    (["-i", "0.5", "2"], 0.5, 2, None), (["0.5", "2"], 0.5, 2, None), (["-i", "0.5"], 0.5, None, None),
    (["--duration", "3"], 3.0, None, 3.0), (["-d", "3", "-i", "0.5"], 0.5, None, 3.0), ([], 1.0, None, None),
])
def test_interval_count_and_duration_combine_as_in_bcc(argv, interval, count, duration) -> None:
    done = subprocess.run([sys.executable, script("offcpu"), *argv, "--validate-args"], capture_output=True,
                          text=True, timeout=60, check=True)
    args = json.loads(done.stdout)
    assert (args["interval"], args["count"], args["duration"]) == (interval, count, duration)


@pytest.mark.bpf
@pytest.mark.parametrize("metric", IDS)
def test_i_half_a_second_count_2_ends_after_two_intervals(metric: str) -> None:
    tool = MetricProcess(metric, "-i", "0.5", "2")
    tool.wait_meta()
    started = time.monotonic()
    out, err = tool.proc.communicate(timeout=60)
    took = time.monotonic() - started
    assert tool.proc.returncode == 0, err
    tool.records += [json.loads(line) for line in out.splitlines() if line.strip()]
    assert max(r["interval"] for r in tool.records) == 2
    assert [r["interval"] for r in tool.of_kind("summary")] == [1, 2]
    assert took >= 0.9, f"two 0.5 s intervals took {took:.2f} s"


@pytest.mark.bpf
@pytest.mark.parametrize("metric", ["sysnest", "tcpconnlat"])   # an interval loop, an event-polling loop
def test_duration_ends_a_run_without_a_count(metric: str) -> None:
    tool = MetricProcess(metric, "-i", "0.5", "--duration", "1.2")
    tool.wait_meta()
    out, err = tool.proc.communicate(timeout=60)
    assert tool.proc.returncode == 0, err
    summaries = [json.loads(line) for line in out.splitlines() if '"kind":"summary"' in line]
    # 0.5 + 0.5 + the 0.2 left; two when printing the second interval took the last 0.2 s
    assert len(summaries) in (2, 3), out
    assert 1.1 <= sum(s["interval_s"] for s in summaries) <= 1.8, summaries


@pytest.mark.bpf
@pytest.mark.parametrize("metric", PID_METRICS)
def test_the_metric_ends_when_its_process_exits(metric: str) -> None:
    child = run_workload("import sys; sys.stdin.readline()")
    tool = MetricProcess(metric, "-p", str(child.pid), "0.5")
    try:
        tool.wait_meta()
        tool.read_until(lambda r: r["kind"] == "summary")
        end_workload(child)
        end = tool.read_until(lambda r: r["kind"] == "end", timeout=30)
        assert tool.proc.wait(timeout=30) == 0, tool.proc.stderr.read()
    finally:
        tool.kill()
    assert end["target"] == {"pid": child.pid} and end["reason"] == "process exited"
    last = max(r["interval"] for r in tool.records if r["kind"] == "summary")
    assert end["interval"] == last, "the end record follows the interval the process exited in"


THREAD_THEN_EXIT = """
import sys, threading
go = threading.Event()
def work():
    print(threading.get_native_id(), flush=True)
    go.wait()
thread = threading.Thread(target=work)
thread.start()
sys.stdin.readline()
go.set()
thread.join()
sys.stdin.readline()
"""
TID_METRICS = [name for name, flag in TARGETS if flag == "--tid"]


@pytest.mark.bpf
@pytest.mark.parametrize("metric", TID_METRICS)
def test_the_metric_ends_when_its_thread_exits(metric: str) -> None:
    child = run_workload(THREAD_THEN_EXIT)
    tid = int(child.stdout.readline())
    tool = MetricProcess(metric, "--tid", str(tid), "0.5")
    try:
        tool.wait_meta()
        tool.read_until(lambda r: r["kind"] == "summary")
        child.stdin.write("\n")
        child.stdin.flush()
        end = tool.read_until(lambda r: r["kind"] == "end", timeout=30)
        assert tool.proc.wait(timeout=30) == 0, tool.proc.stderr.read()
    finally:
        tool.kill()
        end_workload(child)
    assert end["target"] == {"tid": tid} and end["reason"] == "thread exited"
