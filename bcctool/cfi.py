"""An object's call-frame information (.eh_frame, or .debug_frame of its debug file) as a compact table.

pyelftools parses the CFI entries (ehframe.py decodes single FDEs, faster); their instructions are run
here into one row per address range,
holding just what an x86-64 unwinder with ip, sp and bp can use:

    cfa   = sp + off | bp + off | the PLT expression (sp + 8, + 8 more past the push) | unusable
    ra    = *(cfa + off) | undefined (the outermost frame: _start, clone) | unknown
    bp    = *(cfa + off) | unchanged | unknown

Rows are kept as parallel arrays sorted by address (bisect); an address no FDE covers gets a NONE row.
Parsing python3's .eh_frame whole takes seconds, so such a table is saved once per build-id under a
cache directory and read back with array.frombytes. Where the object has an .eh_frame_hdr (every
linker writes one), LazyCfiTable reads its binary search table instead and parses only the FDEs of
the addresses looked up, each on first use: a new object costs milliseconds, not seconds.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
import operator
import os
import struct
import weakref
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, BinaryIO

from elftools.dwarf.callframe import FDE, CallFrameInstruction

from .ehframe import Cie, Fde, read_fde
from .elfimage import ELF_ERRORS, SHT_NOBITS, ELFFile, ElfInfo, section_data, section_named, with_elf

# a CFA instruction as _run reads it: its name without DW_CFA_ and its operands
Instruction = tuple[str, Sequence[Any]]

# how the CFA is found
CFA_NONE, CFA_SP, CFA_BP, CFA_PLT, CFA_EXPR = 0, 1, 2, 3, 4
# a saved-register rule: a CFA-relative offset (a multiple of 8, never odd) or one of these
SAME, UNDEFINED, UNKNOWN = 0, 1, 3
RSP, RBP, RA = 7, 6, 16  # DWARF numbers of x86-64's stack pointer, frame pointer, return address

# DW_OP bytes of the PLT's CFA expression: rsp + 8 + ((rip & 15) >= N) << 3
_PLT_HEAD = bytes([0x77, 8, 0x80, 0, 0x3F, 0x1A])
_PLT_TAIL = bytes([0x2A, 0x33, 0x24, 0x22])
MAGIC = b"CFI1"
_HEADER = struct.Struct("<4sI")


@dataclass(frozen=True)
class Row:
    cfa_kind: int
    cfa_off: int
    ra: int
    bp: int


NO_ROW = Row(CFA_NONE, 0, UNKNOWN, UNKNOWN)


class CfiTable:
    """Sorted rows: rows[i] holds for pcs[i] <= addr < pcs[i+1]."""

    def __init__(self, pcs: array, kind: array, cfa_off: array, ra: array, bp: array) -> None:
        self.pcs, self.kind, self.cfa_off, self.ra, self.bp = pcs, kind, cfa_off, ra, bp
        self.nbytes = sum(a.itemsize * len(a) for a in (pcs, kind, cfa_off, ra, bp)) + 200

    def __len__(self) -> int:
        return len(self.pcs)

    def find(self, vaddr: int) -> tuple[int, int, int, int] | None:
        """(cfa kind, cfa offset, ra rule, bp rule) for an address, None where no CFI covers it."""
        i = bisect.bisect_right(self.pcs, vaddr) - 1
        if i < 0 or self.kind[i] == CFA_NONE:
            return None
        return self.kind[i], self.cfa_off[i], self.ra[i], self.bp[i]

    # --- on disk: a header, then each array's bytes ------------------------------------------
    def save(self, path: str) -> None:
        def write(f: BinaryIO) -> None:
            f.write(_HEADER.pack(MAGIC, len(self.pcs)))
            for a in (self.pcs, self.kind, self.cfa_off, self.ra, self.bp):
                a.tofile(f)

        save_whole(path, write)

    @classmethod
    def load(cls, path: str) -> CfiTable | None:
        try:
            with open(path, "rb") as f:
                magic, n = _HEADER.unpack(f.read(_HEADER.size))
                if magic != MAGIC:
                    return None
                arrays = []
                for code in ("Q", "B", "i", "i", "i"):
                    a = array(code)
                    a.fromfile(f, n)
                    arrays.append(a)
                return cls(*arrays)
        except (OSError, EOFError, struct.error, ValueError):
            return None


def save_whole(path: str, write: Callable[[BinaryIO], None]) -> None:
    """`write(file)` into a temporary file renamed to `path`: a reader sees the whole file or none (two
    profilers may save one object's table at once); nothing is left behind on an error."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _plt_threshold(expr: bytes | Sequence[int]) -> int | None:
    data = bytes(expr)
    if len(data) == 11 and data.startswith(_PLT_HEAD) and data.endswith(_PLT_TAIL) and 0x30 <= data[6] <= 0x4F:
        return data[6] - 0x30
    return None


def _rule(rule: tuple | None) -> int:
    if rule is None:
        return SAME
    return rule if isinstance(rule, int) else UNKNOWN


class _State:
    """One row being built: the CFA rule and the rules of the registers the unwinder reads."""

    __slots__ = ("kind", "off", "reg_rules")

    def __init__(self) -> None:
        self.kind, self.off = CFA_EXPR, 0  # until the CIE says otherwise
        self.reg_rules: dict[int, object] = {}

    def copy(self) -> _State:
        s = _State()
        s.kind, s.off, s.reg_rules = self.kind, self.off, dict(self.reg_rules)
        return s

    def row(self) -> tuple[int, int, int, int]:
        ra = self.reg_rules.get(RA, UNKNOWN)
        bp = self.reg_rules.get(RBP, SAME)
        return self.kind, self.off, ra if isinstance(ra, int) else UNKNOWN, bp if isinstance(bp, int) else UNKNOWN


def _set_cfa_reg(state: _State, reg: int) -> None:
    state.kind = {RSP: CFA_SP, RBP: CFA_BP}.get(reg, CFA_EXPR)


def _run(
    instructions: Iterable[Instruction], state: _State, caf: int, daf: int, pc: int, initial: _State | None,
    rows: list,
) -> tuple[_State, int]:
    """Run CFA instructions, (name, args) pairs (ehframe.py's), from `state`, appending (pc, row)
    whenever the address advances."""
    stack: list[_State] = []
    for name, args in instructions:
        if name.startswith("advance_loc"):
            rows.append((pc, state.row()))
            pc += args[0] * caf
        elif name == "set_loc":
            rows.append((pc, state.row()))
            pc = args[0]
        elif name == "remember_state":
            stack.append(state.copy())
        elif name == "restore_state":
            if stack:
                state = stack.pop()
        elif name.startswith("def_cfa"):
            _cfa_rule(state, name, args, daf)
        else:
            _register_rule(state, name, args, daf, initial)
    return state, pc


def _cfa_rule(state: _State, name: str, args: Sequence[Any], daf: int) -> None:
    """A def_cfa* instruction: how the CFA is found (a register and an offset, or the PLT's expression)."""
    if name in ("def_cfa", "def_cfa_sf", "def_cfa_register"):
        _set_cfa_reg(state, args[0])
    if name == "def_cfa":
        state.off = args[1]
    elif name == "def_cfa_sf":
        state.off = args[1] * daf
    elif name == "def_cfa_offset":
        state.off = args[0]
    elif name == "def_cfa_offset_sf":
        state.off = args[0] * daf
    elif name == "def_cfa_expression":
        threshold = _plt_threshold(args[0])
        state.kind, state.off = (CFA_PLT, threshold) if threshold is not None else (CFA_EXPR, 0)


def _register_rule(state: _State, name: str, args: Sequence[Any], daf: int, initial: _State | None) -> None:
    """An instruction on a register's rule: where the caller's value is saved, or that it is not."""
    if name in ("offset", "offset_extended", "offset_extended_sf"):
        state.reg_rules[args[0]] = args[1] * daf
    elif name == "undefined":
        state.reg_rules[args[0]] = UNDEFINED
    elif name == "same_value":
        state.reg_rules[args[0]] = SAME
    elif name in ("restore", "restore_extended"):
        base = initial.reg_rules if initial is not None else {}
        if args[0] in base:
            state.reg_rules[args[0]] = base[args[0]]
        else:
            state.reg_rules.pop(args[0], None)
    elif name in ("val_offset", "val_offset_sf", "register", "expression", "val_expression"):
        state.reg_rules[args[0]] = None  # a rule this unwinder cannot follow (ip, sp, bp only)
    # nop, GNU_args_size, GNU_window_save ...: nothing the rows hold


def _named(instructions: Iterable[CallFrameInstruction]) -> list[Instruction]:
    """pyelftools' instructions as the (name, args) pairs _run reads."""
    return [(getattr(i.opcode, "name", str(i.opcode)).rsplit(".", 1)[-1].removeprefix("DW_CFA_"), i.args)
            for i in instructions]


def _rows(start: int, end: int, instructions: list, caf: int, daf: int, initial: _State) -> list:
    """[(pc, row)...] of one FDE: its rows inside its own address range, in order."""
    fde_rows: list = []
    last, last_pc = _run(instructions, initial.copy(), caf, daf, start, initial, fde_rows)
    fde_rows.append((last_pc, last.row()))
    return [(pc, row) for pc, row in fde_rows if start <= pc < end]


def _fde_rows(entry: FDE, cie_cache: dict[int, _State]) -> tuple[int, int, list]:
    """(start, end, [(pc, row)...]) of one FDE as pyelftools parsed it."""
    cie = entry.cie
    caf, daf = cie["code_alignment_factor"], cie["data_alignment_factor"]
    initial = cie_cache.get(cie.offset)
    if initial is None:
        initial = cie_cache[cie.offset] = _run(_named(cie.instructions), _State(), caf, daf, 0, None, [])[0]
    start = entry["initial_location"]
    end = start + entry["address_range"]
    return start, end, _rows(start, end, _named(entry.instructions), caf, daf, initial)


def _decoded_rows(fde: Fde, cie_cache: dict[int, _State]) -> tuple[int, list]:
    """(end, [(pc, row)...]) of one FDE as ehframe.read_fde decoded it."""
    cie = fde.cie
    caf, daf = cie.code_alignment_factor, cie.data_alignment_factor
    initial = cie_cache.get(cie.offset)
    if initial is None:
        initial = cie_cache[cie.offset] = _run(cie.instructions, _State(), caf, daf, 0, None, [])[0]
    return fde.end, _rows(fde.start, fde.end, fde.instructions, caf, daf, initial)


def build_table(entries: Iterable[object]) -> CfiTable:
    """Rows of every FDE in pyelftools' CFI entries, sorted, gaps marked NONE."""
    cie_cache: dict[int, _State] = {}
    fdes = (_fde_rows(entry, cie_cache)[1:] for entry in entries if isinstance(entry, FDE) and entry.cie is not None)
    return _sorted_table(fdes)


def _sorted_table(fdes: Iterable[tuple[int, list]]) -> CfiTable:
    """One table of FDEs given as (end, [(pc, row)...]), sorted, gaps marked NONE."""
    rows: list[tuple[int, int, tuple]] = []  # (pc, order, row): order 0 = a gap marker, so real rows win
    for end, fde_rows in fdes:
        rows.extend((pc, 1, row) for pc, row in fde_rows)
        rows.append((end, 0, (CFA_NONE, 0, UNKNOWN, UNKNOWN)))
    rows.sort(key=lambda r: (r[0], r[1]))
    pcs, kind, off, ra, bp = array("Q"), array("B"), array("i"), array("i"), array("i")
    for pc, _, row in rows:
        if pcs and pcs[-1] == pc:  # the later row at one address wins (a real row over a gap marker)
            kind[-1], off[-1], ra[-1], bp[-1] = row
            continue
        if pcs and (kind[-1], off[-1], ra[-1], bp[-1]) == row:
            continue  # the same rule continues
        pcs.append(pc)
        kind.append(row[0])
        off.append(row[1])
        ra.append(row[2])
        bp.append(row[3])
    return CfiTable(pcs, kind, off, ra, bp)


# .eh_frame_hdr's pointer encodings this reader knows: DW_EH_PE_udata4/sdata4/udata8/sdata8, absolute
# or pc-relative (the value's size is all that matters for the pointer skipped), and "omitted"
_ENCODED_SIZE = {0x03: 4, 0x0B: 4, 0x04: 8, 0x0C: 8}
_DATAREL_SDATA4 = 0x3B  # the search table's encoding every linker writes: int32 from the header's start
_OMIT = 0xFF


def search_table(hdr: bytes, hdr_addr: int) -> tuple[array, array] | None:
    """The binary search table of an .eh_frame_hdr: (function starts, their FDEs), each as an int32
    offset from hdr_addr (the .eh_frame_hdr's vaddr), sorted by start; None where the header holds none
    or encodes it in a way not read here."""
    if len(hdr) < 4 or hdr[0] != 1 or hdr[3] != _DATAREL_SDATA4 or hdr[2] == _OMIT:
        return None
    pos = 4
    if hdr[1] != _OMIT:
        if hdr[1] & 0x0F not in (0x03, 0x0B, 0x04, 0x0C):
            return None
        pos += _ENCODED_SIZE[hdr[1] & 0x0F]
    size = _ENCODED_SIZE.get(hdr[2] & 0x0F)
    if size is None or len(hdr) < pos + size:
        return None
    count = int.from_bytes(hdr[pos : pos + size], "little", signed=bool(hdr[2] & 0x08))
    pos += size
    if count <= 0 or len(hdr) < pos + 8 * count:
        return None
    pairs = array("i")
    pairs.frombytes(hdr[pos : pos + 8 * count])
    if struct.pack("=i", 1) != struct.pack("<i", 1):
        pairs.byteswap()
    # kept as they are in the file, 4 bytes each from hdr_addr (an object of 100,000 functions: 0.8 MB
    # where 8-byte addresses took 1.6 MB, and no list of ints on the way)
    starts, fdes = pairs[0::2], pairs[1::2]
    if any(map(operator.gt, starts, itertools.islice(starts, 1, None))):  # C-speed: libLLVM has 98,000
        return None
    return starts, fdes


class LazyCfiTable:
    """An object's CFI read one FDE at a time: the .eh_frame_hdr search table says which FDE covers an
    address, and that FDE alone is read from the file and parsed, on its first lookup. A large object's
    first samples then cost milliseconds, not the seconds of parsing its whole .eh_frame (python3:
    1.8 s of CPU), and a profile only ever parses the functions it saw. The .eh_frame stays in the file
    (an open descriptor; libLLVM's is 5 MB, which a copy held in every profiling process); parsed FDEs
    are kept up to MAX_FDES, then the memo starts over."""

    MAX_FDES = 1024
    # what one parsed FDE holds (its pcs, its list of shared rows, the memo's entry), counted up front,
    # MAX_FDES of them: 550 bytes for libLLVM's 16 rows per FDE (tracemalloc); 160 was counted while
    # each row was a tuple of its own, 1.6 KB an FDE, so a table could hold 3 MB where 0.3 were counted
    FDE_BYTES = 550

    def __init__(self, starts: array, fdes: array, hdr_addr: int, stream: IO[bytes], eh_frame_addr: int) -> None:
        """starts, fdes: search_table()'s, from hdr_addr; stream: a file (or bytes) positioned so that
        `stream offset + eh_frame_addr` is a vaddr (pyelftools computes pc-relative pointers that way)."""
        self.starts, self.fdes, self.hdr_addr, self.eh_frame_addr = starts, fdes, hdr_addr, eh_frame_addr
        weakref.finalize(self, stream.close)  # evicted from a cache: its descriptor closed with it
        self._stream = stream
        self._parsed: dict[int, tuple[int, array, list]] = {}  # FDE index -> (end, pcs, rows)
        self._cies: dict[int, Cie] = {}  # CIE offset -> decoded (few, shared by every FDE)
        self._initial: dict[int, _State] = {}  # CIE offset -> its initial rules
        self.parsed_fdes = 0  # FDEs parsed so far (a re-parse after the memo started over counts again)
        self.nbytes = 8 * len(starts) + self.MAX_FDES * self.FDE_BYTES + 8600  # + the file's read buffer

    def __len__(self) -> int:
        return len(self.starts)

    def find(self, vaddr: int) -> tuple[int, int, int, int] | None:
        i = bisect.bisect_right(self.starts, vaddr - self.hdr_addr) - 1
        if i < 0:
            return None
        parsed = self._parsed.get(i)
        if parsed is None:
            parsed = self._parse(i)
        end, pcs, rows = parsed
        j = bisect.bisect_right(pcs, vaddr) - 1
        if vaddr >= end or j < 0 or rows[j][0] == CFA_NONE:
            return None
        return rows[j]

    def _parse(self, i: int) -> tuple[int, array, list]:
        if len(self._parsed) >= self.MAX_FDES:
            self._parsed.clear()
        offset = self.hdr_addr + self.fdes[i] - self.eh_frame_addr
        parsed: tuple[int, array, list] = (0, array("Q"), [])
        try:
            fde = read_fde(self._stream, offset, self.eh_frame_addr, self._cies)
            if fde is not None:
                end, rows = _decoded_rows(fde, self._initial)
                parsed = (end, array("Q", [pc for pc, _ in rows]), [_shared(row) for _, row in rows])
        except (*ELF_ERRORS, ArithmeticError):
            pass
        self.parsed_fdes += 1
        self._parsed[i] = parsed
        return parsed


_ROWS: dict[tuple, tuple] = {}  # every distinct row once: (CFA_SP, 16, -8, SAME) recurs in most FDEs


def _shared(row: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    if len(_ROWS) >= 1 << 14:  # a few hundred distinct rows are usual; garbage CFI could make more
        _ROWS.clear()
    return _ROWS.setdefault(row, row)


def read_lazy_table(elf: ELFFile) -> LazyCfiTable | None:
    """A LazyCfiTable of the object's .eh_frame, None where it has no usable .eh_frame_hdr."""
    hdr, eh = section_named(elf, ".eh_frame_hdr"), section_named(elf, ".eh_frame")
    if hdr is None or eh is None or eh.type == SHT_NOBITS or elf.elfclass != 64 or not elf.little_endian:
        return None
    table = search_table(section_data(elf, hdr), hdr.addr)
    if table is None:
        return None
    if isinstance(elf.stream, io.BytesIO):  # the vDSO, from this process's memory: a page or two
        return LazyCfiTable(*table, hdr.addr, io.BytesIO(section_data(elf, eh)), eh.addr)
    # the file itself, read where an FDE is looked up: its offset 0 is the vaddr .eh_frame's offset
    # below .eh_frame's own vaddr
    stream = open(os.dup(elf.stream.fileno()), "rb", buffering=4096)  # noqa: SIM115 - the table owns it
    return LazyCfiTable(*table, hdr.addr, stream, eh.addr - eh.offset)


def read_whole_table(elf: ELFFile) -> CfiTable | None:
    """Every FDE of the object's .eh_frame in one table, found through its .eh_frame_hdr and decoded by
    ehframe.py (python3's 10,000 FDEs: 0.5 s, where pyelftools takes 1.8 s); None where it has no usable
    .eh_frame_hdr. An FDE that does not decode is left out (its functions have no rows)."""
    lazy = read_lazy_table(elf)
    if lazy is None:
        return None
    cies: dict[int, Cie] = {}
    initial: dict[int, _State] = {}
    fdes = []
    try:
        for i in range(len(lazy)):
            try:
                fde = read_fde(lazy._stream, lazy.hdr_addr + lazy.fdes[i] - lazy.eh_frame_addr, lazy.eh_frame_addr, cies)
                if fde is not None:
                    fdes.append(_decoded_rows(fde, initial))
            except (*ELF_ERRORS, ArithmeticError):
                continue
    finally:
        lazy._stream.close()
    return _sorted_table(fdes)


def read_table_fast(path: str, debug_path: str | None = None) -> CfiTable | None:
    """read_table(), through the .eh_frame_hdr where the object has one."""
    table = with_elf(path, read_whole_table)
    return table if table is not None and len(table) else read_table(path, debug_path)


def _entries(elf: ELFFile) -> list:
    if section_named(elf, ".eh_frame") is not None:
        return elf.get_dwarf_info(relocate_dwarf_sections=False, follow_links=False).EH_CFI_entries()
    if section_named(elf, ".debug_frame") is not None:
        return elf.get_dwarf_info(relocate_dwarf_sections=False, follow_links=False).CFI_entries()
    return []


def read_table(path: str, debug_path: str | None = None) -> CfiTable | None:
    """The object's CFI table: its .eh_frame, else the debug file's .debug_frame; None if unreadable."""
    table = with_elf(path, lambda elf: build_table(_entries(elf)))
    if table is not None and not len(table) and debug_path:
        table = with_elf(debug_path, lambda elf: build_table(_entries(elf))) or table
    return table


def cache_name(info: ElfInfo, key: tuple) -> str:
    """A file name for an object's table: its build-id, else a hash of its (dev, inode, size, mtime)."""
    if info.build_id:
        return f"{info.build_id}.cfi"
    return hashlib.sha1(repr(key).encode()).hexdigest() + ".cfi"
