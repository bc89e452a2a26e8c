"""Unit tests of the metric-script harness's pure parts."""

import json
import os
import re
import subprocess
import time

import pytest
from helpers import PYTHON, ROOT

import bcctool
import config


def test_log2_buckets_follow_bpf_log2l():
    # bpf_log2l(0) = bpf_log2l(1) = 1, values 2..3 -> 2, 4..7 -> 3
    buckets = bcctool.log2_buckets({1: 5, 3: 2})
    assert buckets == [{"lo": 0, "hi": 1, "count": 5}, {"lo": 2, "hi": 3, "count": 0},
                       {"lo": 4, "hi": 7, "count": 2}]
    assert bcctool.log2_buckets({}) == []


def test_table_alignment():
    """Numbers right-aligned, text left (netpack's device names too, though "dev" names a device number
    elsewhere), two spaces between columns; a missing value is a blank cell; a column of times in the
    unit its largest reads best in (1.5 ms is 1,500 µs), -m's unit when given."""
    fields = (config.Field("pid", "PID"), config.Field("comm", "Command"), config.Field("dev", "Device"),
              config.Field("run_ms", "Run", "ms"))
    rows = [{"pid": 1, "comm": "a", "dev": "lo", "run_ms": 1.5}, {"pid": 22222, "comm": "bb"}]
    assert bcctool.table(fields, rows).splitlines() == ["  PID  Command  Device  Run (µs)",
                                                        "    1  a        lo         1,500", "22222  bb"]
    assert bcctool.table(fields, rows, time_unit="s").splitlines()[:2] == ["  PID  Command  Device  Run (s)",
                                                                           "    1  a        lo       0.0015"]
    assert bcctool.table(fields, []) == "PID  Command  Device  Run (ms)"


def test_a_line_table_keeps_its_widths_and_declared_units():
    """Rows printed as they come cannot choose a column's unit from values yet to come: the declared one,
    each column at least as wide as its heading."""
    fields = (config.Field("comm", "Command"), config.Field("pid", "PID"), config.Field("latency_ms", "Latency", "ms"))
    lines = bcctool.LineTable(fields, widths=(-8, 5, 5))
    assert lines.heading() == "Command     PID  Latency (ms)"
    assert lines.line({"comm": "curl", "pid": 181, "latency_ms": 0.0412}) == "curl        181         0.041"
    # text past 60 characters keeps its start and its end
    assert lines.line({"comm": "a" * 70, "pid": 1, "latency_ms": 12_345.6}) == "a" * 28 + "..." + "a" * 29 + \
        "      1        12,346"


def test_a_tool_finds_its_fields_in_its_registry_entry():
    tool = bcctool.Tool("sysnest", "test", [])
    assert [(f.label, f.unit) for f in tool.fields("total_us", "per_sec", "cgroup_id")] == [
        ("Total", "us"), ("Syscalls", "/s"), ("Cgroup ID", "id")]
    assert tool.fields("errors", kind="summary")[0].label == "Errors"
    assert bcctool.Tool("t", "test", [], args=()).fields("avg_lat_us")[0] == config.Field("avg_lat_us", "Avg latency", "us")


def _stop_after_second_interval(how: str) -> list[int]:
    """The interval indexes a 10 ms tool yields when a stop arrives after its second interval was read:
    while it is being processed ("processing"), or during the wait for the third ("waiting")."""
    tool = bcctool.Tool("t", "test", [], args=config.interval_args(0.01))
    tool.parse_args(["0.01"])
    seen = []
    for index in tool.intervals():
        seen.append(index)
        if index == 2 and how == "processing":
            tool.stopping = True  # as the SIGINT handler does
        elif index == 2:
            tool.wait = lambda seconds: (setattr(tool, "stopping", True), False)[1]
        assert index <= 3, "the loop went on after the final read"
    return seen


@pytest.mark.parametrize("how", ["processing", "waiting"])
def test_a_stop_always_ends_with_one_final_read(own_signals, how):
    """A stop during the wait makes that interval the last (partial) one; a stop that lands while an
    interval is printed must not drop what the probes counted since its read: one more read, at once."""
    assert _stop_after_second_interval(how) == [1, 2, 3]


def test_a_target_that_exits_during_a_read_gets_one_more_read_at_once(own_signals):
    """A -p target that exits after an interval's read but before the exit check raised events since
    the read (a loaded machine widens that gap: sysnest once missed its target's last 9 % of syscalls):
    one more read, at once, then the end."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        tool = bcctool.Tool("t", "test", [], args=(*config.interval_args(0.01), config.PID))
        tool.parse_args(["-p", str(child.pid), "0.5"])
        seen = []
        for index in tool.intervals():
            seen.append((index, time.monotonic()))
            if index == 2:   # it exits while the interval is read
                child.kill()
                child.wait()
            assert index <= 3, "the loop went on after the final read"
    finally:
        child.kill()
        child.wait()
    assert [index for index, _ in seen] == [1, 2, 3]
    assert seen[2][1] - seen[1][1] < 0.25   # at once, not an interval (0.5 s) later


@pytest.mark.parametrize("text", ["eth0", '";return(0);"', "a\\\\b", "x\x7f", "名"])
def test_a_string_filter_is_one_c_literal_of_its_bytes(text):
    """A string filter goes into BPF C compiled as root (-DFILTER_DEV=...): only octal escapes between
    the quotes, decoding to exactly its bytes (netpack --dev '";return(0);"' turned the filter off)."""
    (flag,) = bcctool.Tool("t", "test", [], args=()).filter_cflags(filter_dev=text)
    name, _, literal = flag.partition("=")
    assert name == "-DFILTER_DEV" and re.fullmatch(r'"(\\[0-7]{3})*"', literal)
    assert bytes(int(escape, 8) for escape in literal[1:-1].split("\\")[1:]) == text.encode()


@pytest.mark.parametrize("dev", [".", "..", "a:b", "a/b", "a b", "sixteen-chars-xx", ""])
def test_netpack_refuses_what_the_kernel_refuses_as_a_device_name(dev):
    result = subprocess.run([PYTHON, os.path.join(ROOT, "metrics", "netpack.py"), "--dev", dev],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "not a network device name" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_signal_that_does_not_stop_the_tool_leaves_its_wait_asleep(own_signals):
    """A signal with a handler of its own (SIGUSR1 for a profiler, say) writes to the wakeup fd like a
    stop does; left unread, every later select() returned at once and the wait spun a CPU."""
    import signal
    saved = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        tool = bcctool.Tool("t", "test", [], args=config.interval_args(0.01))
        tool.parse_args(["0.01"])
        tool.wait(0.01)                  # the wakeup fd is installed
        os.kill(os.getpid(), signal.SIGUSR1)
        cpu = time.process_time()
        assert tool.wait(0.5)            # not a stop: the whole wait, True
        assert time.process_time() - cpu < 0.1   # asleep: the spin took the whole 0.5 s
    finally:
        signal.signal(signal.SIGUSR1, saved)


class _FakeBPF(dict):
    """Maps by name, no probe attached: what meta() reads of a loaded program."""
    tracepoint_fds = raw_tracepoint_fds = kprobe_fds = open_perf_events = {}


class _EpochsTable(dict):
    Key = staticmethod(lambda i: i)
    Leaf = staticmethod(lambda *fields: fields)


def test_meta_refuses_to_come_before_the_first_interval_begins():
    """A program keyed by epochs (bpf/epoch.h): the first interval begins, and what ended before it is
    thrown away, before meta tells a reader tracing has begun; a script doing it the other way round
    fails at its first run, not by losing an event now and then."""
    table = _EpochsTable()
    tool = bcctool.Tool("t", "test", [], args=())
    tool.parse_args([])
    tool.bpf = _FakeBPF(epochs=table)
    with pytest.raises(RuntimeError, match="begin_epochs"):
        tool.meta()
    seen_at_discard = []
    cuts = tool.begin_epochs(lambda: seen_at_discard.append(dict(table)))
    assert seen_at_discard == [{0: (1, cuts.began, cuts.began, 0)}]   # epoch 1 written before slot 0 went
    tool.meta()
    plain = bcctool.Tool("t", "test", [], args=())
    plain.parse_args([])
    plain.bpf = _FakeBPF()
    plain.meta()   # no epochs map: nothing to begin


def test_a_record_of_fields_already_in_json_has_the_same_envelope_as_any(capsys):
    tool = bcctool.Tool("t", "test", [], args=())
    tool.parse_args(["--json"])
    tool.interval_index = 3
    tool.emit("stack", pid=7, count=2)
    tool.emit_encoded("stack", '"pid":7,"count":2')
    tool.emit_encoded("stack", '"pid":8,"count":1', '"pid":9,"count":5')   # several at once: a line each
    tool.emit_encoded("stack")                                           # none: nothing written
    plain, encoded, *more = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert isinstance(encoded.pop("ts"), float) and isinstance(plain.pop("ts"), float)
    assert encoded == plain == {"metric": "t", "kind": "stack", "interval": 3, "pid": 7, "count": 2}
    assert [(r["kind"], r["interval"], r["pid"], r["count"]) for r in more] == [("stack", 3, 8, 1), ("stack", 3, 9, 5)]


WRITER = """
import signal, sys
sys.path.insert(0, {root!r})
from bcctool.outstream import use_buffered_stdout
signal.signal(signal.SIGUSR1, lambda *a: None)   # as a stop's handler: a flag, no exception
if {buffered}:
    use_buffered_stdout(line_buffered=True)
sys.stdout.write(("x" * 999 + "\\n") * 200)
sys.stdout.flush()
"""


def written_past_a_signal(buffered: bool) -> int:
    """Bytes a PYTHONUNBUFFERED writer of 200,000 bytes gets through a pipe left full (64 KiB) until a
    signal comes while it waits."""
    import fcntl
    import signal
    import struct
    import termios

    proc = subprocess.Popen([PYTHON, "-c", WRITER.format(root=ROOT, buffered=buffered)], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 10
    while struct.unpack("i", fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0] < 65536:
        assert time.monotonic() < deadline, "the writer never filled the pipe"
        time.sleep(0.01)
    time.sleep(0.05)   # the pipe full: the writer is blocked in its write
    proc.send_signal(signal.SIGUSR1)
    data = proc.stdout.read()
    assert proc.wait(10) == 0
    return len(data)


def test_a_write_the_pipe_has_no_room_for_is_not_cut_by_a_signal():
    """Under PYTHONUNBUFFERED (the app starts every metric so) a write to a full pipe that a signal
    interrupts is cut to what was written (CPython's unbuffered text layer drops the rest); the metric's
    buffered stdout writes it whole (a stop's tail of records was lost so, CI run 70)."""
    print("unbuffered stdout, as CPython leaves it:", written_past_a_signal(False), "of 200000 bytes")
    assert written_past_a_signal(True) == 200000
