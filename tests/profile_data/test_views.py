"""profile_data.views on trees worked out by hand: Python stacks without the interpreter's frames, blocks
ended at the frame that blocked, the bottom-up tree, the sandwich and butterfly of one function, and the
top functions of a zoomed node or a search."""

from __future__ import annotations

import pytest

from profile_data import (
    Frame,
    Functions,
    Profile,
    bottom_up,
    functions_in,
    parse_folded,
    sandwich,
    simplified,
    simplify,
    stack_of,
    tree_stacks,
)
from profile_data.tree import call_tree

# svc: run calls f (10, of which f again 3) and g (5); f calls g; db: run calls g (2). g is the only leaf.
FOLDED = """svc;run;f;g 10
svc;run;g 5
svc;run;f;f;g 3
db;run;g 2
"""
RUN, F, G = Frame("run"), Frame("f"), Frame("g")
SVC = Frame("svc", kind="process")


def native(name: str, module: str = "python3.11") -> Frame:
    return Frame(name, module, "user")


def py(name: str) -> Frame:
    return Frame(name, "/tmp/hot.py", "python")


PROCESS = Frame("python3", kind="process")
# as cpuprofile records a CPython 3.11 program: 12 interpreter frames, then the program's own
STARTUP = (native("_start"), native("__libc_start_main", "libc.so.6"), native("__libc_start_call_main", "libc.so.6"),
           native("Py_BytesMain"), native("Py_RunMain"), native("_PyRun_AnyFileObject"),
           native("_PyRun_SimpleFileObject"), native("python3.11+0x65176f"), native("python3.11+0x6456ee"),
           native("python3.11+0x647d96"), native("PyEval_EvalCode"), native("_PyEval_EvalFrameDefault"))


def test_a_python_stack_keeps_its_python_frames_and_its_native_leaf():
    stack = (PROCESS, *STARTUP, py("<module> (hot.py:13)"), py("outer (hot.py:9)"), native("_PyEval_EvalFrameDefault"),
             py("inner (hot.py:5)"), native("PyNumber_Multiply"), native("long_mul"))
    assert simplify(stack) == (PROCESS, py("<module> (hot.py:13)"), py("outer (hot.py:9)"), py("inner (hot.py:5)"),
                               native("long_mul"))
    assert simplify(stack, interpreter=True) == stack


def test_a_python_stack_keeps_extensions_libc_and_the_kernel_below_its_python_frames():
    stack = (PROCESS, *STARTUP, py("<module> (hot.py:13)"), native("cfunction_call"), native("dot", "_multiarray.so"),
             native("_PyObject_Call"), py("key (hot.py:2)"), native("write", "libc.so.6"),
             Frame("ksys_write", "", "kernel"), Frame("vfs_write", "", "kernel"))
    assert simplify(stack) == (PROCESS, py("<module> (hot.py:13)"), native("dot", "_multiarray.so"),
                               py("key (hot.py:2)"), native("write", "libc.so.6"), Frame("ksys_write", "", "kernel"),
                               Frame("vfs_write", "", "kernel"))


def test_a_native_stack_is_left_as_it_is():
    stack = (PROCESS, *STARTUP, native("PyLong_FromLong"))
    assert simplify(stack) == stack
    for stack in parse_folded(FOLDED).stacks:
        assert simplify(stack) == simplify(stack, scheduler=False) == stack


def test_an_offcpu_record_ends_at_the_frame_that_blocked():
    """offcpu's kernel stacks, innermost first, as tests/samples/offcpu.ndjson holds them: the scheduler's
    frames go, the leaf is where the thread blocked; a stack of cpuprofile (scheduler kept) is untouched."""
    epoll = {"kind": "row", "level": "stack", "comm": "python", "total_ms": 1004.9,
             "kernel_frames": ["__schedule", "schedule", "schedule_hrtimeout_range_clock", "do_epoll_wait",
                               "__x64_sys_epoll_wait", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"],
             "user_frames": ["epoll_wait [libc.so.6]"]}
    rcu = {"kind": "row", "level": "stack", "comm": "rcu_preempt", "total_ms": 972.9,
           "kernel_frames": ["__schedule.isra.0", "schedule", "schedule_timeout", "rcu_gp_fqs_loop", "rcu_gp_kthread",
                             "kthread"], "user_frames": []}
    io = {"kind": "row", "level": "stack", "comm": "dd", "total_ms": 5.0,
          "kernel_frames": ["__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "filemap_read"],
          "user_frames": []}
    leaves = [simplify(stack_of(r), scheduler=False)[-1].name for r in (epoll, rcu, io)]
    assert leaves == ["do_epoll_wait", "rcu_gp_fqs_loop", "folio_wait_bit_common"]
    assert simplify(stack_of(epoll))[-1].name == "__schedule"
    only_scheduler = (Frame("t", kind="process"), Frame("__schedule", "", "kernel"), Frame("schedule", "", "kernel"))
    assert simplify(only_scheduler, scheduler=False) == only_scheduler[:2]


def test_offcpu_python_frames_written_as_text_are_python_frames():
    record = {"kind": "row", "level": "stack", "comm": "python3", "total_ms": 3.0, "kernel_frames": ["do_nanosleep"],
              "user_frames": ["clock_nanosleep [libc.so.6]", "inner (hot.py:5)", "_PyEval_EvalFrameDefault [python3.11]",
                              "<module> (hot.py:13)", "Py_RunMain [python3.11]", "main [python3.11]"]}
    stack = stack_of(record)
    assert [f.kind for f in stack] == ["process", "user", "user", "python", "user", "python", "user", "kernel"]
    assert [f.name for f in simplify(stack)] == ["python3", "<module> (hot.py:13)", "inner (hot.py:5)",
                                                 "clock_nanosleep", "do_nanosleep"]


def test_simplified_profile_sums_stacks_that_become_one():
    a = (PROCESS, *STARTUP, py("f (hot.py:1)"))
    b = (PROCESS, native("clone3", "libc.so.6"), native("thread_run"), native("_PyEval_EvalFrameDefault"),
         py("f (hot.py:1)"))
    profile = Profile("samples", [(a, 3), (b, 4)])
    assert simplified(profile).stacks == {(PROCESS, py("f (hot.py:1)")): 7}
    assert simplified(profile, interpreter=True, scheduler=True) is profile


def test_bottom_up_roots_are_the_leaves_weighted_by_self():
    root = bottom_up(parse_folded(FOLDED))
    assert root.total == 20
    assert list(root.children) == [G]
    g = root.child(G)
    assert (g.total, g.self_weight) == (20, 0)
    assert {c.frame.name: c.total for c in g.ordered()} == {"f": 13, "run": 7}
    assert g.child(F).child(F).total == 3
    assert g.child(RUN).child(SVC).total == 5


def test_a_call_tree_gives_back_its_stacks_and_the_same_views():
    profile = parse_folded(FOLDED + "svc;run;f 4\n")      # f's own time: a node with self and callees
    tree = call_tree(profile)
    assert dict(tree_stacks(tree)) == profile.stacks
    assert bottom_up(tree).child(F).total == bottom_up(profile).child(F).total == 4
    assert sandwich(tree, F).callees_of() == sandwich(profile, F).callees_of() == [(G, 10), (F, 3)]
    assert sandwich(tree, F).self_weight == 4


def test_sandwich_of_a_leaf_and_of_a_recursive_function():
    profile = parse_folded(FOLDED)
    of_g = sandwich(profile, G)
    assert (of_g.total, of_g.self_weight) == (20, 20)
    assert of_g.callers_of() == [(F, 13), (RUN, 7)]
    assert of_g.callees_of() == []
    of_f = sandwich(profile, F)
    assert (of_f.total, of_f.self_weight) == (13, 0)
    assert of_f.callers_of() == [(RUN, 13)]             # the outermost f's caller, each stack once
    assert of_f.callees_of() == [(G, 10), (F, 3)]
    assert of_f.callees.child(F).child(F).child(G).total == 3
    assert of_f.callers.child(F).child(RUN).child(SVC).total == 13
    nowhere = sandwich(profile, Frame("absent"))
    assert (nowhere.total, nowhere.callers_of(), nowhere.callees_of()) == (0, [], [])


def stats(functions: Functions) -> dict[str, tuple[float, float]]:
    return {f.name: (s, t) for f, (s, t) in functions.weights.items()}


def test_functions_in_the_whole_tree_are_the_top_functions():
    profile = parse_folded(FOLDED)
    whole = functions_in(call_tree(profile))
    assert stats(whole) == stats(Functions(profile)) == {"run": (0, 20), "f": (0, 13), "g": (20, 20)}
    assert whole.total == 20


def test_functions_follow_the_zoom():
    root = call_tree(parse_folded(FOLDED))
    zoomed = functions_in(root, (SVC, RUN, F))
    assert zoomed.total == 13
    assert stats(zoomed) == {"run": (0, 13), "f": (0, 13), "g": (13, 13)}    # f recursing counts once
    assert [s.frame.name for s in zoomed.stats()] == ["g", "f", "run"]
    assert zoomed.stats()[0].self_pct == pytest.approx(100.0)
    # a path the tree does not have (any more): as far as it goes
    assert functions_in(root, (SVC, Frame("gone"))).total == 18


def test_functions_follow_the_search():
    root = call_tree(parse_folded(FOLDED))
    found = functions_in(root, (), "F")                   # any case; f's stacks only
    assert found.total == 13
    assert stats(found) == {"run": (0, 13), "f": (0, 13), "g": (13, 13)}
    assert functions_in(root, (), "db").total == 2       # a process name matches its stacks
    assert functions_in(root, (SVC,), "nothing").total == 0
    # zoomed on svc;run;g and searching f: no stack of the zoomed node holds f
    assert functions_in(root, (SVC, RUN, G), "f").total == 0
    # a match on the zoom path takes the whole zoomed node
    assert functions_in(root, (SVC, RUN, F), "f").total == 13
