"""bcctool.pyframes against CPython itself: the 3.11 layout read out of a running Debian python3 whose
frames are known (its program's call chain, the lines it blocks on), the location-table decoder
against code objects' own co_lines(), and what a process that is not python gets (nothing). No BPF:
the walk bpf/pystack.h does is done here over /proc/PID/mem with the same py_procs value."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import types

import pytest

from bcctool import pyframes
from bcctool.procmaps import ProcessMaps
from bcctool.pyframes import EVAL_FRAME, PYSTACK_HEAD, PythonFrames, line_of

PYTHON = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    not os.path.exists(PYTHON)
    or subprocess.run([PYTHON, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 11))"]).returncode,
    reason="needs Debian's python3 3.11",
)

# the main thread blocks in a read below outer -> middle -> inner; a second thread spins below spin_a ->
# spin_b, holding the GIL (so one thread is found through gilstate.tstate_current, the other through
# the interpreter's thread list)
PROGRAM = """\
import sys, threading, json
def spin_b():
    while True:
        pass
def spin_a():
    spin_b()
def inner():
    sys.stdin.read()
def middle():
    inner()
def outer():
    middle()
t = threading.Thread(target=spin_a, daemon=True)
t.start()
print(json.dumps({"main": threading.get_native_id(), "spinner": t.native_id}), flush=True)
outer()
"""


def line_in(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def walk(pid: int, value: bytes, tid: int, limit: int = 64) -> bytes:
    """What bpf/pystack.h's pystack_capture() hands over for thread `tid`, read the same way."""
    (current, interp_head, interp_threads, t_next, t_tid, t_cframe, c_current, f_code, f_previous,
     f_prev_instr, f_entry, _pad) = struct.unpack("<QQ10I", value)
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)

    def u64(addr: int, size: int = 8) -> int:
        try:
            return int.from_bytes(os.pread(fd, size, addr), "little") if addr else 0
        except OSError:
            return 0

    try:
        ts = u64(current)
        if not ts or u64(ts + t_tid) != tid:
            t, ts = u64(u64(interp_head) + interp_threads), 0
            for _ in range(32):
                if not t:
                    break
                if u64(t + t_tid) == tid:
                    ts = t
                    break
                t = u64(t + t_next)
        assert ts, f"no thread state for {tid}"
        frame = u64(u64(ts + t_cframe) + c_current)
        frames = []
        while frame and len(frames) < limit:
            frames.append((u64(frame + f_code) | (u64(frame + f_entry, 1) & 1), u64(frame + f_prev_instr)))
            frame = u64(frame + f_previous)
        err = 0 if not frame else 4
    finally:
        os.close(fd)
    return PYSTACK_HEAD.pack(len(frames), err) + b"".join(struct.pack("<QQ", *f) for f in frames)


@pytest.fixture
def blocked(tmp_path):
    path = tmp_path / "chain.py"
    path.write_text(PROGRAM)
    child = subprocess.Popen([PYTHON, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tids = json.loads(child.stdout.readline())
    try:
        yield child, tids, str(path)
    finally:
        child.kill()
        child.wait()


def settled(read, expected, timeout: float = 5.0):
    """read() until it returns `expected` (the thread has reached the call it stays in), else its last."""
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


def test_layout_reads_both_threads_of_a_running_interpreter(blocked):
    child, tids, path = blocked
    py = PythonFrames()
    value = py.register(child.pid, ProcessMaps.snapshot(child.pid))
    assert value is not None
    name = os.path.basename(path)
    expected = [
        f"inner ({name}:{line_in(PROGRAM, 'sys.stdin.read()')})",
        f"middle ({name}:{line_in(PROGRAM, '    inner()')})",
        f"outer ({name}:{line_in(PROGRAM, '    middle()')})",
        f"<module> ({name}:{len(PROGRAM.splitlines())})",
    ]
    main = settled(lambda: py.frames(child.pid, walk(child.pid, value, tids["main"])),
                   [((n, path, "python"), n.startswith("<module>")) for n in expected])
    assert [f[0] for f, _ in main] == expected
    assert {f[1] for f, _ in main} == {path} and {f[2] for f, _ in main} == {"python"}
    spinner = [f[0] for f, _ in py.frames(child.pid, walk(child.pid, value, tids["spinner"]))]
    # the loop is at `while True` or at `pass`
    assert spinner[0] in {f"spin_b ({name}:{line_in(PROGRAM, 'while True')})", f"spin_b ({name}:{line_in(PROGRAM, 'pass')})"}
    assert spinner[1] == f"spin_a ({name}:{line_in(PROGRAM, '    spin_b()')})"
    assert spinner[2].startswith("Thread.run (threading.py:") and spinner[-1].startswith("Thread._bootstrap (threading.py:")
    assert py.outcomes["complete"] >= 2
    py.close()


def test_runs_of_frames_go_inside_their_eval_loops(blocked):
    """3.11 runs outer -> middle -> inner in one _PyEval_EvalFrameDefault (is_entry marks <module>); a
    thread's run() calls its target through C, so spin_a starts a second eval loop."""
    child, tids, _path = blocked
    py = PythonFrames()
    value = py.register(child.pid, ProcessMaps.snapshot(child.pid))
    settled(lambda: len(walk(child.pid, value, tids["main"])), PYSTACK_HEAD.size + 4 * 16)   # in inner()
    native = [("read", "libc.so.6", "user"), (EVAL_FRAME, "python3.11", "user"),
              ("PyEval_EvalCode", "python3.11", "user"), ("Py_RunMain", "python3.11", "user")]
    merged = [f[0].split(" ")[0] for f in py.merge(child.pid, native, walk(child.pid, value, tids["main"]))]
    assert merged == ["read", "inner", "middle", "outer", "<module>", EVAL_FRAME, "PyEval_EvalCode", "Py_RunMain"]
    assert py.outcomes["unmatched"] == 0
    raw = walk(child.pid, value, tids["spinner"])
    native = [(EVAL_FRAME, "python3.11", "user"), ("_PyObject_Call", "python3.11", "user"),
              (EVAL_FRAME, "python3.11", "user"), ("thread_run", "python3.11", "user")]
    merged = [f[0].split(" ")[0] for f in py.merge(child.pid, native, raw)]
    assert merged == ["spin_b", "spin_a", EVAL_FRAME, "_PyObject_Call", "Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap",
                      EVAL_FRAME, "thread_run"]
    assert py.outcomes["unmatched"] == 0
    # a native stack whose unwinding stopped early: the outer runs go at its outer end, counted unmatched
    merged = [f[0].split(" ")[0] for f in py.merge(child.pid, [("spin", "", "user")], raw)]
    assert merged[:3] == ["spin", "spin_b", "spin_a"] and merged[-1] == "Thread._bootstrap"
    assert py.outcomes["unmatched"] == 1
    py.close()


def test_not_python_and_garbage_get_no_frames(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        py = PythonFrames()
        assert py.register(sleeper.pid, ProcessMaps.snapshot(sleeper.pid)) is None
        assert not py.retry(sleeper.pid)
        native = [("nanosleep", "libc.so.6", "user")]
        assert py.merge(sleeper.pid, native, PYSTACK_HEAD.pack(3, 0) + os.urandom(48)) == native
    finally:
        sleeper.kill()
        sleeper.wait()
    assert py.register(999_999_999, None) is None


def test_garbage_frames_of_a_python_process_are_named_unknown(blocked):
    child, _tids, _path = blocked
    py = PythonFrames()
    assert py.register(child.pid, ProcessMaps.snapshot(child.pid)) is not None
    raw = PYSTACK_HEAD.pack(3, 0) + struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 0xDEAD0000 | 1, 5) + os.urandom(16)
    frames = py.merge(child.pid, [], raw)
    assert len(frames) <= 3 and all(f[0] == "[unknown python]" for f in frames)
    assert py.merge(child.pid, [], b"\x01") == []
    py.close()


def code_objects(module: types.ModuleType):
    todo = [v.__code__ for v in vars(module).values() if hasattr(v, "__code__")]
    todo += [f.__code__ for v in vars(module).values() if isinstance(v, type) for f in vars(v).values()
             if hasattr(f, "__code__")]
    while todo:
        code = todo.pop()
        yield code
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the 3.11 location table")
def test_location_table_decoder_agrees_with_co_lines():
    import argparse  # noqa: PLC0415 - a few thousand instructions of varied shapes
    import json as json_module  # noqa: PLC0415

    checked = 0
    for module in (argparse, json_module.decoder, pyframes, subprocess):
        for code in code_objects(module):
            for start, end, line in code.co_lines():
                for unit in range(start // 2, end // 2):
                    assert line_of(code.co_linetable, code.co_firstlineno, unit) == line, (code, unit)
                    checked += 1
    assert checked > 5000
    assert line_of(b"", 7, 0) is None and line_of(b"\xff", 7, 3) is None
