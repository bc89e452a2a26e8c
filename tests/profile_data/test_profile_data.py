"""profile_data: folded round trip, records of offcpu / compmem / cpuprofile, call tree, top functions and
the differential, each against numbers worked out by hand."""

from __future__ import annotations

import json
import os

import pytest
from helpers import SAMPLES

from profile_data import (
    Frame,
    Functions,
    Profile,
    call_tree,
    differential,
    from_records,
    parse_folded,
    stack_of,
    to_folded,
    top_functions,
)
from profile_data.display import frame_rgb

# app: main calls a (60) and b (30, of which c 10); db: main calls a (10). Total 100.
FOLDED = """app;main;a 60
app;main;b 20
app;main;b;c 10
db;main;a 10
"""


def test_folded_round_trip_is_exact():
    profile = parse_folded(FOLDED)
    assert profile.total == 100
    assert len(profile) == 4
    assert to_folded(profile) == FOLDED


def test_folded_kernel_and_module_frames_round_trip():
    text = "cat;main [cat];read [libc.so.6];ksys_read_[k];vfs_read_[k] 7\n"
    profile = parse_folded(text)
    (stack,) = profile.stacks
    assert stack == (Frame("cat", "", "process"), Frame("main", "cat", "user"), Frame("read", "libc.so.6", "user"),
                     Frame("ksys_read", "", "kernel"), Frame("vfs_read", "", "kernel"))
    assert to_folded(profile) == text


def test_folded_export_keeps_one_frame_per_name_with_a_semicolon():
    profile = Profile("samples", [((Frame("p", kind="process"), Frame("f<a;b>")), 2)])
    assert to_folded(profile) == "p;f<a:b> 2\n"


def test_folded_repeated_stacks_add_and_bad_line_is_an_error():
    profile = parse_folded("a;b 1\n\na;b 2\n")
    assert profile.stacks == {(Frame("a", kind="process"), Frame("b")): 3}
    with pytest.raises(ValueError, match="line 2"):
        parse_folded("a;b 1\na;b\n")


def test_call_tree_totals_self_and_alphabetical_children():
    tree = call_tree(parse_folded(FOLDED))
    assert tree.total == 100
    assert [n.frame.name for n in tree.ordered()] == ["app", "db"]
    main = tree.child(Frame("app", kind="process")).child(Frame("main"))
    assert (main.total, main.self_weight) == (90, 0)
    assert [(n.frame.name, n.total, n.self_weight) for n in main.ordered()] == [("a", 60, 60), ("b", 30, 20)]
    assert tree.depth() == 4


def test_incremental_tree_keeps_order_when_a_child_arrives():
    tree = call_tree(parse_folded("p;z 1\n"))
    assert [n.frame.name for n in tree.ordered()[0].ordered()] == ["z"]
    tree.add((Frame("p", kind="process"), Frame("a")), 2)
    assert [n.frame.name for n in tree.ordered()[0].ordered()] == ["a", "z"]
    assert tree.total == 3


def test_top_functions_self_and_total_with_percent():
    stats = {s.frame.name: s for s in top_functions(parse_folded(FOLDED))}
    assert set(stats) == {"main", "a", "b", "c"}          # process roots are not functions
    assert (stats["a"].self_weight, stats["a"].total_weight, stats["a"].self_pct) == (70, 70, 70.0)
    assert (stats["b"].self_weight, stats["b"].total_weight, stats["b"].total_pct) == (20, 30, 30.0)
    assert (stats["main"].self_weight, stats["main"].total_pct) == (0, 100.0)
    assert [s.frame.name for s in top_functions(parse_folded(FOLDED))][:2] == ["a", "b"]


def test_recursion_counts_once_in_total():
    stats = {s.frame.name: s for s in top_functions(parse_folded("p;f;f;f 5\np;g 5\n"))}
    assert (stats["f"].self_weight, stats["f"].total_weight, stats["f"].total_pct) == (5, 5, 50.0)


def test_differential_is_the_change_of_share():
    baseline = parse_folded("p;main;a 50\np;main;b 50\n")
    current = parse_folded("p;main;a 300\np;main;b 100\n")     # 4x the weight; a's share 50 -> 75 %
    changes = {c.frame.name: c for c in differential(baseline, current)}
    assert changes["a"].change_pct == pytest.approx(25.0)
    assert changes["b"].change_pct == pytest.approx(-25.0)
    assert changes["a"].self_change_pct == pytest.approx(25.0)
    assert changes["main"].change_pct == pytest.approx(0.0)
    assert [c.frame.name for c in differential(baseline, current)][2] == "main"
    gone = {c.frame.name: c for c in differential(parse_folded("p;x 1\n"), parse_folded("p;y 1\n"))}
    assert (gone["x"].change_pct, gone["y"].change_pct) == (-100.0, 100.0)


def test_merge_and_trim_keep_the_total():
    merged = parse_folded(FOLDED).merge(parse_folded("app;main;a 40\n"))
    assert merged.total == 140
    assert merged.stacks[tuple(parse_folded("app;main;a 1").stacks)[0]] == 100
    trimmed = merged.trimmed(3)           # the heaviest stack, and the rest of each process summed
    assert len(trimmed) == 3 and trimmed.total == 140
    assert trimmed.stacks[(Frame("app", kind="process"), Frame("[other stacks]", kind="process"))] == 30
    assert trimmed.stacks[(Frame("db", kind="process"), Frame("[other stacks]", kind="process"))] == 10
    with pytest.raises(ValueError):
        merged.merge(Profile("bytes"))


OFFCPU_ROW = {"kind": "row", "level": "stack", "comm": "cat", "total_ms": 1.5,
              "kernel_frames": ["schedule", "pipe_read"], "user_frames": ["read [libc.so.6]", "main [cat]"]}


def test_offcpu_record_is_rooted_at_comm_user_then_kernel_in_ns():
    assert stack_of(OFFCPU_ROW) == (Frame("cat", "", "process"), Frame("main", "cat"), Frame("read", "libc.so.6"),
                                    Frame("pipe_read", "", "kernel"), Frame("schedule", "", "kernel"))
    profile = from_records([OFFCPU_ROW, {**OFFCPU_ROW, "level": "thread"}, OFFCPU_ROW], "total_ms", "ns")
    assert profile.total == 3_000_000
    assert to_folded(profile) == "cat;main [cat];read [libc.so.6];pipe_read_[k];schedule_[k] 3000000\n"


def test_compmem_stack_record_is_kernel_frames_in_bytes():
    record = {"kind": "row", "level": "stack", "pid": 7, "comm": "leaky", "outstanding_bytes": 4096,
              "active_allocs": 2, "oldest_age_s": 3.0, "kernel_frames": ["__kmalloc", "alloc_pipe_info"]}
    profile = from_records([record], "outstanding_bytes", "bytes")
    assert to_folded(profile) == "leaky;alloc_pipe_info_[k];__kmalloc_[k] 4096\n"


def test_cpuprofile_stack_record_frames_root_first_with_kind():
    record = {"kind": "stack", "pid": 9, "comm": "hot", "count": 12,
              "frames": [{"name": "main", "module": "hot", "kind": "user"},
                         {"name": "work", "module": "hot", "kind": "user"},
                         {"name": "asm_sysvec_apic_timer_interrupt", "module": "", "kind": "kernel"}]}
    profile = from_records([record], "count", "samples")
    assert to_folded(profile) == "hot;main [hot];work [hot];asm_sysvec_apic_timer_interrupt_[k] 12\n"


def test_python_frames_keep_their_kind_and_a_colour_of_their_own():
    record = {"kind": "stack", "pid": 9, "comm": "python3", "count": 5,
              "frames": [{"name": "_PyEval_EvalFrameDefault", "module": "python3.11", "kind": "user"},
                         {"name": "outer (app.py:12)", "module": "/srv/app.py", "kind": "python"},
                         {"name": "odd", "module": "", "kind": "lisp"}]}
    (stack,) = from_records([record], "count", "samples").stacks
    assert [f.kind for f in stack] == ["process", "user", "python", "user"]
    red, green, _blue = frame_rgb(stack[2])
    assert green > 150 and red < 60   # green, as flamegraph.pl paints interpreted code
    assert frame_rgb(stack[1])[0] >= 200   # native user code stays red


def test_offcpu_sample_records_make_a_profile_of_every_stack_row():
    with open(os.path.join(SAMPLES, "offcpu.ndjson")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in records if r.get("kind") == "row" and r.get("level") == "stack"]
    profile = from_records(records, "total_ms", "ns")
    assert rows and profile.total == sum(round(r["total_ms"] * 1e6) for r in rows)
    assert all(stack[0].kind == "process" for stack in profile.stacks)


def test_sliding_window_subtract_and_remove_undo_an_add():
    first, second = parse_folded("p;main;a 6\np;main;b 4\n"), parse_folded("p;main;a 1\n")
    window, tree, functions = first.copy().merge(second), call_tree(first), Functions(first)
    for stack, weight in second:
        tree.add(stack, weight)
        functions.add(stack, weight)
    for stack, weight in first:                        # the first interval expires
        tree.remove(stack, weight)
        functions.remove(stack, weight)
    window.subtract(first)
    assert window == second and window.total == 1
    assert tree.total == 1 and [n.frame.name for n in tree.ordered()[0].ordered()[0].ordered()] == ["a"]
    assert {s.frame.name: (s.self_weight, s.total_weight) for s in functions.stats()} == {"main": (0, 1), "a": (1, 1)}
    assert differential(functions, second)[0].change_pct == 0
