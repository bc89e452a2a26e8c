"""bench/app_cost.py's arithmetic and parsers, against figures worked out by hand: the bracketed order of
rounds and the bare rounds each row is compared with, ratios and losses from them, the issue-27
targets' verdicts, pgbench's per-transaction log and wrk's report; and bench/probe_floor.py holding one
program per probe it is given, empty or doing the least work (a count, the clock where asked, the
thread's time kept where asked)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
from helpers import PYTHON, ROOT, prog_ids_of

sys.path.insert(0, os.path.join(ROOT, "bench"))

import app_cost
import app_servers  # noqa: E402
import stats  # noqa: E402

import config  # noqa: E402


def test_bracketed_runs_bare_around_every_group_and_pairs_each_row_with_its_neighbours():
    order = []
    counter = iter(range(100))

    def run_one(name, rep):
        order.append(name)
        return next(counter)

    values, around = stats.bracketed(["a", "b", "c", "d"], "bare", run_one, reps=2, every=3)
    assert order == ["bare", "a", "b", "c", "bare", "d", "bare",          # rep 1
                     "bare", "b", "c", "d", "bare", "a", "bare"]          # rep 2: rotated by one
    assert values["bare"] == [0, 4, 6, 7, 11, 13]
    assert around["a"] == [[0, 4], [11, 13]]
    assert around["d"] == [[4, 6], [7, 11]]


def test_bracketed_pairs_a_row_with_the_bare_round_that_did_not_fail():
    calls = iter([stats.BenchError("down"), 5, 7])

    def run_one(name, rep):
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    values, around = stats.bracketed(["a"], "bare", run_one, reps=1, every=3)
    assert values == {"bare": [None, 7], "a": [5]}
    assert around["a"] == [[7]]


def round_of(per_s: float, p99: float = 1.0) -> dict:
    load = {"per_s": per_s, "p99_ms": p99, "user_pct": 50.0, "sys_pct": 20.0, "cpu_ms_per_s": {"t": 3.0}}
    return {"loads": dict.fromkeys(app_cost.LOADS, load), "memory": {"t": {"pss": 40.0, "private": 30.0}}}


def test_a_rows_loss_is_its_throughput_over_the_mean_of_the_bare_rounds_around_it():
    got = [round_of(99, 3.0), round_of(80, 2.0), None]
    around = [[round_of(100, 1.0), round_of(120, 2.0)], [round_of(100, 2.0)], [round_of(100)]]
    fig = app_cost.summarize("sysnest", got, around, None, list(app_cost.LOADS))["loads"]["pg_select"]
    assert fig["per_s_ratio"] == {"median": 0.85, "min": 0.8, "max": 0.9, "n": 2}
    assert fig["loss_pts"] == {"median": 15.0, "min": 10.0, "max": 20.0, "n": 2}
    assert fig["p99_ms_ratio"]["median"] == 1.5            # 3 / 1.5 and 2 / 2


def test_mode_rows_are_the_modes_each_metric_offers_besides_its_default():
    rows = app_cost.mode_rows()
    for row, (name, values) in rows.items():
        args = {a.name: a for a in config.get(name).args}
        assert all(not args[k].choices or v in args[k].choices for k, v in values.items()), row
        assert any(args[k].default != v for k, v in values.items()), row
    assert "compmem --user-stacks fp" in rows and "compmem --user-stacks bogus" not in rows
    assert "compmem --sample-bytes 0" in rows and "compmem --sample-bytes 65536" not in rows   # 65536: the default
    assert all(row in app_cost.row_names() for row in rows)


def test_a_run_of_some_loads_says_the_others_were_not_measured():
    assert app_cost.load_names("nginx,pg_select") == ["pg_select", "nginx"]
    fig = app_cost.summarize("sysnest", [round_of(90)], [[round_of(100)]], None, ["pg_select"])
    out = app_cost.tables({"loads": {"pg_select": app_cost.LOADS["pg_select"]}, "seconds": 8,
                           "rows": [fig], "interference": None})
    assert "not measured" in out["app_cost_nginx"] and "sysnest" in out["app_cost_pg_select"]


def test_targets_compare_losses_with_the_floors_and_with_the_bcc_peers():
    def row(name, loss):
        return {"row": name, "loads": {"pg_select": {"loss_pts": {"median": loss}}}}

    rows = [row("floor", 4.0), row("floor + least work", 5.5), row("all ten", 7.0), row("sysnest", 6.5),
            row("cpuschedrun", 7.5), row("BCC syscount -L", 6.0)]
    verdicts = {t["name"].split(":")[0].split(",")[0]: t for t in app_cost.targets_of(rows)}
    assert verdicts["all ten at their defaults"]["met"] is False            # 7 > 1.5 x 4
    assert verdicts["the bound under it"]["met"] is True                    # the least work: 5.5 <= 6
    assert verdicts["sysnest alone"]["met"] is True                         # 6.5 <= 1.5 x 4 + 1
    assert verdicts["cpuschedrun alone"]["met"] is False                    # 7.5 > 7
    assert verdicts["sysnest alone against BCC syscount -L"]["met"] is False  # 6.5 > 6
    assert verdicts["offcpu alone"]["met"] is None                          # not run


def test_pgbench_p99_from_its_per_transaction_log(tmp_path):
    log = tmp_path / "pgbench1.123"
    # client_id transaction_no time(us) script_no time_epoch time_us
    log.write_text("".join(f"0 {i} {1000 * (i + 1)} 0 1700000000 {i}\n" for i in range(100)))
    (tmp_path / "pgbench1.123.1").write_text("1 0 500000 0 1700000000 5\n")
    latencies = app_servers.pgbench_latencies_ms([str(log), str(tmp_path / "pgbench1.123.1")])
    assert len(latencies) == 101 and max(latencies) == 500.0
    assert stats.percentile(latencies, 99) == 100.0      # the 100th of 101 sorted: 1..100 ms, then 500


WRK = """Running 2s test @ http://127.0.0.1:8080/index.html
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   612.33us    1.02ms  20.11ms   93.42%
  Latency Distribution
     50%  345.00us
     75%  512.00us
     90%    1.01ms
     99%    5.23ms
  54321 requests in 2.00s, 60.00MB read
Requests/sec:  27160.50
Transfer/sec:     30.00MB
"""


def test_wrk_report_rate_and_p99():
    assert app_servers.parse_wrk(WRK) == {"per_s": 27160.5, "p99_ms": 5.23}
    assert app_servers.parse_wrk(WRK.replace("5.23ms", "812.00us"))["p99_ms"] == 0.812


def test_wrk_report_with_failed_requests_is_no_throughput():
    with pytest.raises(stats.BenchError, match="Non-2xx"):
        app_servers.parse_wrk(WRK + "  Non-2xx or 3xx responses: 12\n")
    with pytest.raises(stats.BenchError, match="Socket errors"):
        app_servers.parse_wrk(WRK + "  Socket errors: connect 0, read 3, write 0, timeout 0\n")


@contextlib.contextmanager
def probe_floor(*args: str):
    """bench/probe_floor.py with these arguments, once ready: the ids of the BPF programs it holds."""
    proc = subprocess.Popen([PYTHON, os.path.join(ROOT, "bench", "probe_floor.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        yield prog_ids_of(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def xlated(ids) -> list[str]:
    """bpftool's dump of each program's instructions as the verifier left them, in id order."""
    return [subprocess.run(["bpftool", "prog", "dump", "xlated", "id", str(i)], capture_output=True, text=True,
                           timeout=30).stdout for i in sorted(ids)]


@pytest.mark.bpf
def test_probe_floor_holds_one_program_per_probe_given():
    with probe_floor("raw_tracepoint:sys_enter", "tracepoint:sched:sched_switch", "perf_event:minor-faults") as ids:
        assert len(ids) == 3


def test_the_least_work_floor_times_the_events_each_metric_times_and_counts_the_rest():
    argv = app_cost.floor_argv("sysnest", ["tracepoint:cgroup:cgroup_attach_task", "raw_tracepoint:sys_enter"], work=True)
    assert argv[2:] == ["--work", "tracepoint:cgroup:cgroup_attach_task", "raw_tracepoint:sys_enter+clock"]
    assert app_cost.floor_argv("pagefault", ["perf_event:minor-faults"], work=True)[2:] == ["--work", "perf_event:minor-faults"]
    assert app_cost.floor_argv("sysnest", ["raw_tracepoint:sys_enter"], work=False)[2:] == ["raw_tracepoint:sys_enter"]
    assert app_cost.floor_argv("offcpu", ["tracepoint:sched:sched_switch", "raw_tracepoint:sys_exit"], work=True,
                               state=True)[2:] == ["--work", "tracepoint:sched:sched_switch+state", "raw_tracepoint:sys_exit"]
    assert set(app_cost.TIMED_PROBES) <= {spec.name for spec in config.METRICS}


@pytest.mark.bpf
def test_probe_floor_with_work_counts_every_event_and_reads_the_clock_where_asked():
    with probe_floor("--work", "raw_tracepoint:sys_enter+clock", "raw_tracepoint:sys_exit") as ids:
        assert len(ids) == 2
        # the programs' instructions: the timed one calls bpf_ktime_get_ns, the other does not
        dumps = xlated(ids)
        assert [("bpf_ktime_get_ns" in d) for d in dumps] == [True, False], dumps


@pytest.mark.bpf
def test_probe_floor_with_state_keeps_each_threads_time_where_the_event_says_whose():
    probes = ["raw_tracepoint:sys_enter+state", "tracepoint:sched:sched_switch+state", "tracepoint:kmem:kmalloc+state"]
    with probe_floor("--work", *probes) as ids:
        dumps = xlated(ids)
        # a syscall keeps it in task storage, a switch in a hash by tid; kmalloc starts no thread's span: a clock
        assert "bpf_task_storage_get" in dumps[0], dumps[0]
        assert "bpf_ktime_get_ns" in dumps[1] and "bpf_task_storage_get" not in dumps[1], dumps[1]
        assert "bpf_ktime_get_ns" in dumps[2] and "bpf_task_storage_get" not in dumps[2], dumps[2]
        # this test's thread has switched out since (waiting for bpftool): its tid is a key of the hash
        dump = subprocess.run(["bpftool", "-j", "map", "dump", "name", "thread_ts"], capture_output=True, text=True,
                              timeout=30)
        keys = {entry["key"] if isinstance(entry["key"], int) else int.from_bytes(bytes(int(b, 16) for b in entry["key"]), "little")
                for entry in json.loads(dump.stdout)}
        assert os.getpid() in keys, f"{len(keys)} threads kept, not this test's {os.getpid()}"


def test_probe_floor_refuses_a_clock_without_work():
    out = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "probe_floor.py"), "raw_tracepoint:sys_enter+clock"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == "probe_floor: a probe written +clock needs --work"


def test_probe_floor_refuses_a_probe_it_cannot_copy():
    out = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "probe_floor.py"), "kprobe:tcp_connect"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("probe_floor: not TYPE:NAME") and "Traceback" not in out.stderr
