"""Processes that share a comm are told apart by their command line (bcctool/procnames.py): "python3
(server.py)" beside "python3 (worker.py)", the cmdline read once per process, a unique comm left bare."""

import shutil
import subprocess
import sys
import time

import pytest

from bcctool import procmem, procnames, targets, taskinfo
from bcctool.maps import process_name
from bcctool.procnames import CommCensus, ProcessNames, comm_census, hint_of, read_cmdline


@pytest.mark.parametrize(("argv", "comm", "hint"), [
    (["python3", "server.py", "--port", "5000"], "python3", "server.py"),
    (["/usr/bin/python3", "-u", "/srv/app/server.py"], "python3", "server.py"),
    (["python3", "-X", "dev", "tool.py"], "python3", "tool.py"),
    (["python3", "-m", "http.server", "8000"], "python3", "http.server"),
    (["python3", "-c", "while True: pass"], "python3", "-c"),
    (["node", "--require", "ts-node/register", "./dist/app.js"], "node", "app.js"),
    (["bash", "/home/me/bin/backup.sh"], "bash", "backup.sh"),
    (["./forker", "3"], "forker", ""),                  # a value, not what runs: nothing to add
    (["/opt/x/really-long-command-name"], "really-long-com", "really-long-command-name"),   # comm cut at 15
    (["python3"], "python3", ""),
    (["postgres: autovacuum launcher "], "postgres", "autovacuum launcher"),       # a title it set itself
    (["sshd: root@pts/0"], "sshd", "root@pts/0"),
    (["postgres: postgres collector_t2293_6 [local] idle in transaction"], "postgres",
     "postgres collector_t2293_6 [local] idle…"),
    ([], "kworker/0:1", ""),                            # a kernel thread has no command line
])
def test_hint_of_names_what_the_command_line_runs(argv, comm, hint):
    assert hint_of(argv, comm) == hint


def test_a_long_script_path_keeps_its_end():
    hint = hint_of(["python3", "a_script_whose_name_goes_on_and_on_and_on_for_ever.py"], "python3")
    assert len(hint) == 40 and hint.startswith("…") and hint.endswith("for_ever.py")


def test_a_shared_comm_is_told_apart_and_stays_so_read_once_per_process():
    cmdlines = {10: ["python3", "server.py"], 11: ["python3", "worker.py"], 12: ["gzip", "-9"]}
    reads = []

    def read(pid):
        reads.append(pid)
        return cmdlines[pid]

    names = ProcessNames(read, census=lambda: {"python3": 1, "gzip": 1, "bash": 4}, started=lambda pid: 1)
    # one python3 alone: bare, and its command line not read
    assert names.names([(10, "python3"), (12, "gzip")]) == {(10, "python3"): "python3", (12, "gzip"): "gzip"}
    assert reads == []
    # a second: both named by their scripts from then on, each command line read once
    assert names.names([(10, "python3"), (11, "python3")]) == {(10, "python3"): "python3 (server.py)",
                                                               (11, "python3"): "python3 (worker.py)"}
    for _ in range(3):
        assert names.names([(10, "python3")]) == {(10, "python3"): "python3 (server.py)"}
    assert sorted(reads) == [10, 11]
    # an exec: the same pid under a new comm is a new process to name
    cmdlines[10] = ["gzip", "big.log"]
    assert names.names([(10, "gzip")])[(10, "gzip")] == "gzip (big.log)"
    assert names.names([(12, "gzip")])[(12, "gzip")] == "gzip"      # "-9" says nothing more


def test_a_comm_shared_on_the_machine_is_told_apart_from_its_first_interval():
    """Met alone, a comm that other processes on the machine have is named at once: its name does not
    change when they are met later (one flame graph root per process across a run)."""
    censuses = []

    def census():
        censuses.append(1)
        return {"python3": 3, "sshd": 1}

    names = ProcessNames(lambda pid: ["python3", f"job{pid}.py"], census=census, started=lambda pid: 1)
    assert names.names([(5, "python3"), (6, "sshd")]) == {(5, "python3"): "python3 (job5.py)", (6, "sshd"): "sshd"}
    assert names.names([(5, "python3"), (6, "sshd")]) == {(5, "python3"): "python3 (job5.py)", (6, "sshd"): "sshd"}
    assert len(censuses) == 1, "the machine was looked at again with no new comm met"


def test_a_reused_pid_is_a_new_process_and_one_gone_is_not_kept_nameless():
    """A process is its pid and start time: a new process with an old one's pid gets its own hint, and a
    process gone before its command line was read ([] then) is not remembered as having none."""
    cmdlines: dict[int, list[str]] = {}
    starts: dict[int, int] = {}
    names = ProcessNames(lambda pid: cmdlines.get(pid, []), census=lambda: {"python3": 2},
                         started=starts.get)
    assert names.names([(7, "python3")]) == {(7, "python3"): "python3"}     # gone: no stat, no command line
    cmdlines[7], starts[7] = ["python3", "first.py"], 100                   # its pid taken by a new process
    assert names.name(7, "python3") == "python3 (first.py)"
    cmdlines[7], starts[7] = ["python3", "second.py"], 200                  # and again, by another
    assert names.name(7, "python3") == "python3 (second.py)"
    starts[7] = 100
    assert names.name(7, "python3") == "python3 (first.py)"     # (a start time names one process: kept)


def test_the_tables_of_comms_met_are_bounded():
    names = ProcessNames(lambda pid: ["x", f"{pid}.sh"], census=dict, started=lambda pid: 1, max_comms=16)
    for pid in range(1000):
        names.names([(pid, f"job-{pid}"), (pid + 5000, f"job-{pid}")])     # a comm of its own, twice
    assert len(names._first) <= 16 and len(names._shared) <= 16
    assert names.names([(1, "job-999")]) == {(1, "job-999"): "job-999 (1.sh)"}   # the recent ones kept


def test_real_processes_are_named_by_their_scripts(tmp_path):
    procs = []
    for name in ("server.py", "worker.py"):
        script = tmp_path / name
        script.write_text("import sys, time\nsys.stdin.read()\n")
        procs.append(subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE))
    try:
        for p, name in zip(procs, ("server.py", "worker.py"), strict=True):    # exec'd: their own command lines
            deadline = time.monotonic() + 10
            while read_cmdline(p.pid)[1:] != [str(tmp_path / name)] and time.monotonic() < deadline:
                time.sleep(0.01)
        comm = "twin"       # their comm as the kernel has it does not matter: shared is what counts
        found = ProcessNames(census=dict).names((p.pid, comm) for p in procs)
        assert found == {(procs[0].pid, comm): "twin (server.py)", (procs[1].pid, comm): "twin (worker.py)"}
        assert read_cmdline(procs[0].pid)[1:] == [str(tmp_path / "server.py")]
        with open(f"/proc/{procs[0].pid}/comm") as f:
            assert comm_census()[f.read().strip()] >= 2      # the twins, as the machine's census counts them
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(5)


def test_counts_keyed_by_process_are_renamed_and_kept():
    names = ProcessNames(lambda pid: ["python3", f"job{pid}.py"], census=lambda: {"python3": 2})
    stacks = {(5, "python3", 1, ("main", "spin")): 40, (6, "python3", 1, ("main",)): 2, (7, "cc1", 1, ()): 9}
    assert names.renamed(stacks) == {(5, "python3 (job5.py)", 1, ("main", "spin")): 40,
                                     (6, "python3 (job6.py)", 1, ("main",)): 2, (7, "cc1", 1, ()): 9}


def test_a_comm_cut_inside_a_utf8_character_is_read_as_the_bpf_side_reads_it():
    """The kernel cuts a comm at 15 bytes: "abcdefghijklmné" keeps the first byte of é alone. Every /proc
    reader of a comm (the census, process_name, taskinfo, the liveness checks, procmem) reads it with
    U+FFFD for that byte, as a BPF record's comm is decoded, instead of raising UnicodeDecodeError."""
    code = ("import ctypes, sys\nctypes.CDLL(None).prctl(15, 'abcdefghijklmné'.encode(), 0, 0, 0)\n"
            "print(flush=True)\nsys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        child.stdout.readline()      # renamed
        with open(f"/proc/{child.pid}/comm", "rb") as f:
            assert f.read() == b"abcdefghijklmn\xc3\n"      # as the kernel keeps it
        shown = "abcdefghijklmn\ufffd"
        assert b"abcdefghijklmn\xc3".decode(errors="replace") == shown     # the BPF side's comm
        assert comm_census()[shown] >= 1
        assert process_name(child.pid) == taskinfo.comm_of(child.pid) == shown
        assert taskinfo.tgid_of(child.pid) == child.pid and taskinfo.stat(child.pid)["ppid"] > 0
        assert targets.process_alive(child.pid) and targets.task_alive(child.pid)
        assert procmem.process_memory(child.pid)["rss_bytes"] > 0
    finally:
        child.stdin.close()
        child.wait(5)


def test_rows_of_a_process_each_are_renamed_in_place():
    names = ProcessNames(lambda pid: ["python3", f"job{pid}.py"], census=lambda: {"python3": 2}, started=lambda pid: 1)
    rows = [{"pid": 5, "comm": "python3", "minor": 3}, {"pid": 7, "comm": "cc1", "minor": 1},
            {"pid": 5, "comm": "python3", "minor": 4}]
    names.rename_rows(rows)
    assert [(r["comm"], r["minor"]) for r in rows] == [("python3 (job5.py)", 3), ("cc1", 1), ("python3 (job5.py)", 4)]


def test_a_census_reads_the_comms_of_new_processes_only(monkeypatch, tmp_path):
    """The machine's census is taken for every interval that meets a new comm: a process whose comm two
    censuses in a row read alike keeps it (its /proc inode tells a reused pid), so only processes started
    lately are read, until a full census every FULL_S; the counts are those of reading every comm."""
    reads: list[str] = []
    real = procnames.read_text
    monkeypatch.setattr(procnames, "read_text", lambda path: reads.append(path) or real(path))
    census = CommCensus()
    census()
    everyone = len(reads)
    shutil.copy("/bin/sleep", tmp_path / "census-probe")   # a comm no other process has
    child = subprocess.Popen([str(tmp_path / "census-probe"), "30"])
    try:
        census()   # every comm read twice now, the child's maybe before its exec renamed it
        deadline = time.monotonic() + 10
        while procnames.read_text(f"/proc/{child.pid}/comm") != "census-probe\n" and time.monotonic() < deadline:
            time.sleep(0.01)
        reads.clear()
        again = census()
        assert f"/proc/{child.pid}/comm" in reads and len(reads) < everyone / 2, (len(reads), everyone)
        assert again["census-probe"] == 1
        census.full_at -= CommCensus.FULL_S
        reads.clear()
        census()
        assert len(reads) >= everyone - 5          # all read again (a few may have exited)
    finally:
        child.kill()
        child.wait()


def test_a_process_the_caller_listed_gone_is_named_by_its_comm_without_a_read():
    asked: list[int] = []

    def started(pid: int) -> int:
        asked.append(pid)
        return 1

    names = ProcessNames(lambda pid: ["python3", f"job{pid}.py"], census=lambda: {"python3": 2}, started=started)
    counts = {(7, "python3", "a"): 2, (8, "python3", "b"): 3}
    assert names.renamed(counts, alive={7}) == {(7, "python3 (job7.py)", "a"): 2, (8, "python3", "b"): 3}
    assert 8 not in asked and 7 in asked
