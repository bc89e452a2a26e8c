"""The harness marks the summary of an interval cut short (`partial: true`): a stop during the wait, the
--duration's end, the final tick of an event tool's stop; a whole interval, or a short one that only
catches up with a late tick, is not marked. No BPF: the interval loops run on their own."""

from __future__ import annotations

import json
import socket
import time
import types

import bcctool
import config


def _tool(argv: list[str]) -> bcctool.Tool:
    tool = bcctool.Tool("t", "test", [], args=config.interval_args(0.1))
    tool.parse_args([*argv, "--json"])
    return tool


def _summaries(capsys) -> list[dict]:
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [r for r in records if r["kind"] == "summary"]


def test_a_stop_during_the_wait_marks_that_interval_partial(own_signals, capsys):
    tool = _tool(["0.1"])
    real_wait = tool.wait
    for index in tool.intervals():
        tool.emit("summary", n=index)
        if index == 2:                  # the third wait is cut after 20 ms by a stop
            tool.wait = lambda seconds: (real_wait(0.02), setattr(tool, "stopping", True), False)[2]
    assert [s.get("partial") for s in _summaries(capsys)] == [None, None, True]


def test_the_durations_end_cuts_the_last_interval_and_a_whole_run_has_none(own_signals, capsys):
    for argv, marks in ((["0.2", "--duration", "0.5"], [None, None, True]),     # 0.2 + 0.2 + 0.1
                        (["0.05", "3"], [None, None, None])):
        tool = _tool(argv)
        for index in tool.intervals():
            tool.emit("summary", n=index)
            tool.emit("row", n=index)
        assert [s.get("partial") for s in _summaries(capsys)] == marks, argv


def _poll(tool: bcctool.Tool, stop_after: int | None) -> None:
    tool.bpf = types.SimpleNamespace(perf_buffers={}, _ringbuf_manager=None)

    def tick() -> None:
        tool.emit("summary", n=tool.interval_index)
        if stop_after is not None and tool.interval_index == stop_after:
            time.sleep(0.03)            # the stop lands 30 ms into the next interval
            tool.stopping = True

    tool.poll_until_stopped(on_tick=tick, tick=0.1)


def test_an_event_tools_stop_marks_its_final_tick_partial(own_signals, capsys):
    tool = _tool(["0.1"])
    _poll(tool, stop_after=2)
    assert [s.get("partial") for s in _summaries(capsys)] == [None, None, True]


def test_an_event_tools_duration_end_cuts_its_last_tick(own_signals, capsys):
    _poll(_tool(["0.1", "--duration", "0.25"]), stop_after=None)
    assert [s.get("partial") for s in _summaries(capsys)] == [None, None, True]


def test_a_late_ticks_short_follower_is_whole_and_the_stops_tick_partial(own_signals, capsys):
    """The first tick 70 ms late (a long buffer read): the second, on schedule, follows it by 30 ms but
    is not cut short by anything (its counts are a whole interval's catch-up); the stop's tick is."""
    tool = _tool(["0.1"])
    polls = []

    def tick() -> None:
        tool.emit("summary", n=tool.interval_index)
        if tool.interval_index == 3:
            time.sleep(0.03)
            tool.stopping = True

    events, arrive = socket.socketpair()
    events.setblocking(False)   # a buffer's read takes what waits, and returns at once when nothing does
    arrive.send(b"x")   # an event waits from the start; reading it takes 170 ms

    def consume() -> None:
        polls.append(time.sleep(0.17 if not polls else 0))
        try:
            events.recv(16)
        except BlockingIOError:
            pass

    tool.bpf = types.SimpleNamespace(perf_buffers={}, _ringbuf_manager=None)
    tool._event_sources = lambda: [(events.fileno(), consume)]
    tool.poll_until_stopped(on_tick=tick, tick=0.1)
    events.close()
    arrive.close()
    assert [s.get("partial") for s in _summaries(capsys)] == [None, None, None, True]


def test_events_below_a_wakeup_batch_are_read_into_the_interval_they_came_in(own_signals, capsys):
    """With wakeup_events batching, events can wait in a buffer whose fd never turns readable: each tick
    reads every buffer before the interval's summary, so each event lands in the interval it came in."""
    tool = _tool(["0.1"])
    waiting: list[int] = []   # events in the buffer, below the batch that would wake the reader
    read_in: dict[int, int] = {}

    def consume() -> None:
        for n in waiting:
            read_in[n] = tool.interval_index + 1   # emit_event()'s numbering
        waiting.clear()

    def tick() -> None:
        tool.emit("summary", n=tool.interval_index)
        if tool.interval_index < 3:
            waiting.append(tool.interval_index + 1)   # an event of the next interval, just after this tick
        else:
            tool.stopping = True

    silent, _other_end = socket.socketpair()   # never readable: only the tick reads the buffer
    tool.bpf = types.SimpleNamespace(perf_buffers={}, _ringbuf_manager=None)
    tool._event_sources = lambda: [(silent.fileno(), consume)]
    tool.poll_until_stopped(on_tick=tick, tick=0.05)
    silent.close()
    _other_end.close()
    assert read_in == {2: 2, 3: 3}


def test_events_wake_the_reader_in_batches_only_under_json_with_intervals():
    assert _tool(["0.1"]).wakeup_events() == 256 and _tool(["0.1"]).wakeup_events(32) == 32
    by_hand = bcctool.Tool("t", "test", [], args=config.interval_args(0.1))
    by_hand.parse_args(["0.1"])
    assert by_hand.wakeup_events() == 1   # each event printed as it comes


def test_meta_names_the_host(own_signals, capsys):

    _tool(["0.1"]).meta()
    (meta,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert meta["host"] == socket.gethostname()
