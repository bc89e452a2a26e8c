"""CPython function names in native stacks: the interpreter's own frame chain, taken by BPF at the
sample (bpf/pystack.h), named here and hung under the `_PyEval_EvalFrameDefault` frames that run them.

API (nothing here raises on bad input; a process that is not a known CPython simply gets no frames):

    py = PythonFrames()
    value = py.register(pid, maps)      # the py_procs map value (bytes) for a CPython 3.11 process, else None
    frames = py.merge(pid, native, raw, n=1)  # native: user frames innermost first, each (name, module,
                                        # kind); raw: a struct pystack_t (or its first 8 + 16 * depth bytes);
                                        # n: the samples it stands for (outcomes are counted per sample)
    py.outcomes                         # Counter: complete, truncated, no_thread, unreadable, unmatched
    py.count(pid, raw, n=1)             # count a walk's outcome without naming its frames
    py.retry(pid)                       # True: a CPython whose runtime was not up yet, worth registering again
    py.forget(pid)
    is_python_exe(pid)                  # its executable is named like an interpreter (python3.11...)

A Python frame is (f"{qualname} ({file base name}:{line})", co_filename, "python"); the frames of one
eval-loop invocation (3.11 runs a chain of Python calls in one _PyEval_EvalFrameDefault, its first frame
marked is_entry) go right above that native frame, so a flame graph reads
`Py_RunMain;...;_PyEval_EvalFrameDefault;<module> (prog.py:9);outer (prog.py:7);inner_hot (prog.py:3)`.

Where the offsets come from: CPython's structures are a user-space ABI fixed per minor version and
build flavour. LAYOUTS holds those of 3.11 release builds on x86-64 (Include/internal/pycore_runtime.h,
pycore_interp.h, cpython/pystate.h, pycore_frame.h, cpython/code.h of 3.11); the interpreter running
the tests is the ground truth for them (tests/metrics/test_pyframes.py reads its own frames with
them). A process is registered only when its binary or libpython exports `Py_Version` of a known
minor version and `_PyRuntime`, and what /proc/PID/mem holds there checks out: an interpreter whose
first thread state points back at it. A code object is named only if its type is PyCode_Type.
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

from .elfimage import SHT_DYNSYM, ElfInfo, load_per_file, read_info, section_data, sections, symbol_rows, with_elf
from .lrucache import BoundedCache
from .procmaps import Mapping, ProcessMaps

__all__ = ["LAYOUTS", "Layout", "PythonFrames", "line_of", "read_str"]

EVAL_FRAME = "_PyEval_EvalFrameDefault"  # its .cold part too
KIND = "python"
PY_OK, PY_NOT_PYTHON, PY_NO_THREAD, PY_READ, PY_TRUNCATED = range(5)  # bpf/pystack.h's err
OUTCOME = {PY_OK: "complete", PY_NO_THREAD: "no_thread", PY_READ: "unreadable", PY_TRUNCATED: "truncated"}
PYSTACK_HEAD = struct.Struct("<Ii")  # struct pystack_t: depth, err, then frames[][2]
_PROC = struct.Struct("<QQ10I")  # struct py_proc_t
_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")
_LIBRARY = re.compile(r"(^|/)(lib)?python3\.\d+")  # python3.11, libpython3.11.so.1.0, python3.11d
_MAX_STR = 1024
_MAX_LINETABLE = 1 << 16
_MAX_CODES = 8192  # code objects named (all processes together) before the caches are emptied
_MAX_TRIES = 10  # registrations of a process whose runtime is not up yet (once an interval)


@dataclass(frozen=True)
class Layout:
    """Field offsets of one CPython minor version (release build, x86-64)."""

    runtime_interp_head: int  # _PyRuntimeState.interpreters.head
    runtime_tstate_current: int  # _PyRuntimeState.gilstate.tstate_current
    interp_threads_head: int  # PyInterpreterState.threads.head
    tstate_next: int
    tstate_interp: int
    tstate_native_tid: int  # PyThreadState.native_thread_id
    tstate_cframe: int
    cframe_current: int  # _PyCFrame.current_frame
    frame_code: int  # _PyInterpreterFrame.f_code
    frame_previous: int
    frame_prev_instr: int
    frame_is_entry: int
    code_filename: int  # PyCodeObject.co_filename
    code_name: int
    code_qualname: int
    code_linetable: int
    code_firstlineno: int
    code_firsttraceable: int  # PyCodeObject._co_firsttraceable
    code_adaptive: int  # PyCodeObject.co_code_adaptive: the instructions prev_instr points into


LAYOUTS = {
    (3, 11): Layout(
        runtime_interp_head=40, runtime_tstate_current=576, interp_threads_head=16,
        tstate_next=8, tstate_interp=16, tstate_native_tid=160, tstate_cframe=56, cframe_current=8,
        frame_code=32, frame_previous=48, frame_prev_instr=56, frame_is_entry=68,
        code_filename=112, code_name=120, code_qualname=128, code_linetable=136, code_firstlineno=72,
        code_firsttraceable=168, code_adaptive=184,
    ),
}
_OB_TYPE = 8  # PyObject.ob_type
# PyASCIIObject: length at 16, state bits at 32 (interned:2, kind:3, compact:1, ascii:1), the data of a
# compact ASCII string at 48, of a compact other one at 72 (after PyCompactUnicodeObject's fields)
_STR_LENGTH, _STR_STATE, _ASCII_DATA, _COMPACT_DATA = 16, 32, 48, 72
_BYTES_SIZE, _BYTES_DATA = 16, 32  # PyBytesObject.ob_size, ob_sval


@dataclass(frozen=True)
class _Binary:
    """What an interpreter binary (or libpython) exports: its version and the symbols read here."""

    info: ElfInfo
    version: tuple[int, int]
    runtime: int  # ELF virtual addresses
    code_type: int
    nbytes: int = 200


@dataclass
class _Process:
    layout: Layout
    code_type: int  # PyCode_Type's address in the process
    mem: int  # a descriptor of /proc/PID/mem
    codes: dict  # code address -> (qualname, filename, firstlineno, linetable, firsttraceable) or None
    lines: dict  # (code address, prev_instr) -> frame tuple


class PythonFrames:
    def __init__(self) -> None:
        self.binaries = BoundedCache(32, 1 << 20)
        self.processes: dict[int, _Process] = {}
        self.outcomes: Counter[str] = Counter()
        self.cached = 0  # code objects held, all processes together
        self.unready: dict[int, int] = {}  # pid -> registrations tried that found no runtime yet

    # --- processes ----------------------------------------------------------------------------
    def register(self, pid: int, maps: ProcessMaps | None) -> bytes | None:
        """The py_procs value (struct py_proc_t) for a CPython process of a known version, else None
        (not python, another version, or its runtime not initialized yet: ask again later)."""
        if maps is None:
            return None
        for mapping in maps.mappings:
            if not is_python_mapping(mapping):
                continue
            binary = load_per_file(self.binaries, mapping.readable_paths(), lambda path, _key: _read_binary(path))
            layout = LAYOUTS.get(binary.version) if binary else None
            if layout is None:
                continue
            vaddr = binary.info.vaddr_of(mapping.offset)
            if vaddr is None:
                continue
            bias = mapping.start - vaddr
            value = self._attach(pid, layout, bias + binary.runtime, bias + binary.code_type)
            if value is None:
                self.unready[pid] = self.unready.get(pid, 0) + 1
            else:
                self.unready.pop(pid, None)
            return value
        return None

    def retry(self, pid: int) -> bool:
        return 0 < self.unready.get(pid, 0) < _MAX_TRIES

    def _attach(self, pid: int, layout: Layout, runtime: int, code_type: int) -> bytes | None:
        proc = self.processes.pop(pid, None)
        if proc is not None:
            os.close(proc.mem)
        try:
            mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        interp = _read_u64(mem, runtime + layout.runtime_interp_head)
        tstate = _read_u64(mem, interp + layout.interp_threads_head) if interp else None
        if not tstate or _read_u64(mem, tstate + layout.tstate_interp) != interp:
            os.close(mem)
            return None
        self.processes[pid] = _Process(layout, code_type, mem, {}, {})
        return _PROC.pack(
            runtime + layout.runtime_tstate_current, runtime + layout.runtime_interp_head,
            layout.interp_threads_head, layout.tstate_next, layout.tstate_native_tid, layout.tstate_cframe,
            layout.cframe_current, layout.frame_code, layout.frame_previous, layout.frame_prev_instr,
            layout.frame_is_entry, 0,
        )

    def forget(self, pid: int) -> None:
        self.unready.pop(pid, None)
        proc = self.processes.pop(pid, None)
        if proc is not None:
            self.cached -= len(proc.codes)
            os.close(proc.mem)

    def close(self) -> None:
        for pid in list(self.processes):
            self.forget(pid)

    # --- stacks -------------------------------------------------------------------------------
    def frames(self, pid: int, raw: bytes, n: int = 1) -> list[tuple[tuple, bool]] | None:
        """The Python frames of a struct pystack_t, innermost first, each (frame, is_entry); None for a
        process not registered (or a sample BPF took before it was). Counts the walk's outcome."""
        proc = self.processes.get(pid)
        if proc is None or len(raw) < PYSTACK_HEAD.size:
            return None
        depth, err = PYSTACK_HEAD.unpack_from(raw)
        if err == PY_NOT_PYTHON:
            return None
        self.count(pid, raw, n)
        depth = min(depth, (len(raw) - PYSTACK_HEAD.size) // 16)
        out = []
        for i in range(depth):
            code, prev_instr = struct.unpack_from("<QQ", raw, PYSTACK_HEAD.size + 16 * i)
            frame = self._frame(proc, code & ~7, prev_instr)
            if frame is not None:
                out.append((frame, bool(code & 1)))
        return out

    def count(self, pid: int, raw: bytes, n: int = 1) -> None:
        if pid in self.processes and len(raw) >= PYSTACK_HEAD.size:
            err = PYSTACK_HEAD.unpack_from(raw)[1]
            if err != PY_NOT_PYTHON:
                self.outcomes[OUTCOME.get(err, "unreadable")] += n

    def merge(self, pid: int, native: list[tuple], raw: bytes | None, n: int = 1) -> list[tuple]:
        """`native` (innermost first) with each eval loop's Python frames just inside its
        _PyEval_EvalFrameDefault frame. Runs of frames the native stack has no eval frame for (its unwinding
        stopped early) go at its outer end; a count that does not match is counted as unmatched."""
        py = self.frames(pid, raw, n) if raw else None
        if not py:
            return native
        runs: list[list[tuple]] = [[]]
        for frame, entry in py:
            runs[-1].append(frame)
            if entry:
                runs.append([])
        if not runs[-1]:
            runs.pop()
        out: list[tuple] = []
        evals = 0
        for frame in native:
            if frame[0].startswith(EVAL_FRAME) and evals < len(runs):
                out += runs[evals]
                evals += 1
            out.append(frame)
        if evals != len(runs) or sum(f[0].startswith(EVAL_FRAME) for f in native) != evals:
            self.outcomes["unmatched"] += n
        for run in runs[evals:]:
            out += run
        return out

    # --- code objects -------------------------------------------------------------------------
    def _frame(self, proc: _Process, code: int, prev_instr: int) -> tuple | None:
        key = (code, prev_instr)
        frame = proc.lines.get(key)
        if frame is not None:
            return frame
        if code not in proc.codes:
            if self.cached >= _MAX_CODES:  # bounded memory over any number of python processes
                for other in self.processes.values():
                    other.codes.clear()
                    other.lines.clear()
                self.cached = 0
            proc.codes[code] = _read_code(proc, code)
            self.cached += 1
        info = proc.codes[code]
        if info is None:
            return ("[unknown python]", "", KIND)
        qualname, filename, firstlineno, linetable, firsttraceable = info
        index = (prev_instr - code - proc.layout.code_adaptive) // 2
        if index < firsttraceable:  # not started yet (an incomplete frame), or its first line
            index = firsttraceable
        line = line_of(linetable, firstlineno, index)
        frame = (f"{qualname} ({os.path.basename(filename)}:{line if line is not None else '?'})", filename, KIND)
        if len(proc.lines) < 4 * len(proc.codes):
            proc.lines[key] = frame
        return frame


def _read_code(proc: _Process, code: int) -> tuple | None:
    """(qualname, filename, firstlineno, linetable, firsttraceable) of a code object; None when the
    address holds no code object (freed since the sample) or cannot be read."""
    lay = proc.layout
    head = _pread(proc.mem, code, lay.code_adaptive)
    if head is None or _U64.unpack_from(head, _OB_TYPE)[0] != proc.code_type:
        return None
    ptr = lambda off: _U64.unpack_from(head, off)[0]  # noqa: E731
    qualname = read_str(proc.mem, ptr(lay.code_qualname))
    filename = read_str(proc.mem, ptr(lay.code_filename))
    if qualname is None or filename is None:
        return None
    table = ptr(lay.code_linetable)
    size = _read_u64(proc.mem, table + _BYTES_SIZE) or 0
    linetable = _pread(proc.mem, table + _BYTES_DATA, min(size, _MAX_LINETABLE)) or b""
    firstlineno = _I32.unpack_from(head, lay.code_firstlineno)[0]
    return qualname, filename, firstlineno, linetable, _I32.unpack_from(head, lay.code_firsttraceable)[0]


def read_str(mem: int, addr: int) -> str | None:
    """A compact str object (what code objects' names are) from another process; None otherwise."""
    head = _pread(mem, addr, _COMPACT_DATA)
    if head is None:
        return None
    length = _U64.unpack_from(head, _STR_LENGTH)[0]
    state = _I32.unpack_from(head, _STR_STATE)[0]
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or length > _MAX_STR:
        return None
    data = _pread(mem, addr + (_ASCII_DATA if ascii_ else _COMPACT_DATA), length * kind)
    if data is None:
        return None
    return data.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind], errors="replace")


def line_of(linetable: bytes, firstlineno: int, index: int) -> int | None:
    """The line of instruction `index` (in code units) from a 3.11 location table (Objects/locations.md:
    entries of a header byte 1CCCCLLL, code C, L+1 code units, then the code's varints)."""
    line, unit, i, n = firstlineno, 0, 0, len(linetable)
    while i < n:
        header = linetable[i]
        code, length = (header >> 3) & 15, (header & 7) + 1
        i += 1
        delta = 0
        if code == 15:  # no location
            pass
        elif code == 14:  # long form: line delta, end line delta, column, end column
            delta, i = _svarint(linetable, i)
            for _ in range(3):
                _, i = _varint(linetable, i)
        elif code == 13:  # no column
            delta, i = _svarint(linetable, i)
        elif code >= 10:  # one line: delta code - 10, two column bytes
            delta, i = code - 10, i + 2
        else:  # short form: same line, one column byte
            i += 1
        line += delta
        if unit <= index < unit + length:
            return None if code == 15 else line
        unit += length
    return None


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while i < len(data):
        b = data[i]
        i += 1
        value |= (b & 63) << shift
        shift += 6
        if not b & 64:
            break
    return value, i


def _svarint(data: bytes, i: int) -> tuple[int, int]:
    value, i = _varint(data, i)
    return (-(value >> 1) if value & 1 else value >> 1), i


def _pread(mem: int, addr: int, size: int) -> bytes | None:
    if addr <= 0 or size < 0:
        return None
    try:
        data = os.pread(mem, size, addr)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None


def _read_u64(mem: int, addr: int) -> int | None:
    data = _pread(mem, addr, 8)
    return _U64.unpack(data)[0] if data else None


def _read_binary(path: str) -> _Binary | None:
    """The version (from Py_Version) and the addresses of _PyRuntime and PyCode_Type that an
    interpreter binary or libpython exports; None for anything else."""

    def read(elf: ELFFile) -> _Binary | None:
        table = sections(elf)
        dynsym = next((sec for sec in table if sec.type == SHT_DYNSYM), None)
        if dynsym is None or elf.elfclass != 64 or not elf.little_endian or not 0 < dynsym.link < len(table):
            return None
        found = _dynamic_symbols(elf, section_data(elf, dynsym), section_data(elf, table[dynsym.link]), _WANTED)
        if len(found) < len(_WANTED):
            return None
        info = read_info(elf)
        raw = _read_at_vaddr(elf, info, found[b"Py_Version"], 4)
        if raw is None:
            return None
        hexversion = int.from_bytes(raw, "little")
        version = (hexversion >> 24, (hexversion >> 16) & 0xFF)
        return _Binary(info, version, found[b"_PyRuntime"], found[b"PyCode_Type"])

    return with_elf(path, read)


_WANTED = (b"Py_Version", b"_PyRuntime", b"PyCode_Type")
def _dynamic_symbols(elf: ELFFile, table: bytes, strtab: bytes, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """{name: value} of the defined symbols among `names` (a raw walk: pyelftools' symbol objects
    take 0.1 s over an interpreter's 10,000 exports)."""
    first = {name[:1] for name in names}
    found = {}
    for name_at, value, _size, _info, shndx in symbol_rows(elf, table):
        if shndx and strtab[name_at : name_at + 1] in first:
            end = strtab.find(b"\0", name_at)
            name = strtab[name_at:end]
            if name in names:
                found[name] = value
    return found


def _read_at_vaddr(elf: ELFFile, info: ElfInfo, vaddr: int, size: int) -> bytes | None:
    for seg in info.segments:
        if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
            elf.stream.seek(seg.offset + vaddr - seg.vaddr)
            data = elf.stream.read(size)
            return data if len(data) == size else None
    return None


def is_python_mapping(mapping: Mapping) -> bool:
    return mapping.is_file and bool(_LIBRARY.search(mapping.path))


def is_python_exe(pid: int) -> bool:
    try:
        return bool(_LIBRARY.search(os.readlink(f"/proc/{pid}/exe")))
    except OSError:
        return False
