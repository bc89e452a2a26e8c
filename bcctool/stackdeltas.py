"""An object's CFI as "stack delta" rows for the kernel's unwinder (bpf/kunwind.h's struct ku_row).

    deltas = stack_deltas(path, debug_path=None, cache_dir=None)   # None: unreadable, or no CFI
    deltas.rows              # bytes: ROW.size per row, sorted by pc (the file's own virtual address)
    deltas.expression_rows   # rows the kernel walks by frame pointer (a rule it cannot follow)

Each row says, from its pc up to the next row's: CFA = rsp or rbp + offset (or the PLT's expression),
the return address at CFA - 8, rbp saved at CFA + 8 * n or unchanged; a pc no FDE covers has a NONE row
(frame pointers, as unwind.py does there). A rule the kernel cannot follow — a CFA by DWARF expression
(signal trampolines, hand-written assembly), a return address elsewhere than CFA - 8 or by a register
rule, an offset out of the row's range — becomes an EXPR row: the kernel walks that frame by its frame
pointer and counts it. The rows are the ones cfi.py computes for unwind.py (cfi.read_table_fast), so
the two unwinders agree wherever the kernel has a row. Saved per build-id under `cache_dir` (python3's
take 0.3 s to build), read back at the next meeting.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from . import cfi
from .cfi import CfiTable, cache_name, read_table_fast, save_whole
from .elfimage import ElfInfo

ROW = struct.Struct("<IhBb")  # pc, cfa, kind, bp
KU_NONE, KU_SP, KU_BP, KU_PLT, KU_EXPR, KU_END = range(6)
SCALED = 0x80  # kind's flag: cfa is in units of 8 bytes (rsp + 65,600 in python3's largest frame)
BP_UNKNOWN = -128
MAGIC = b"SDT1"
_HEADER = struct.Struct("<4sII")  # magic, rows, expression rows


@dataclass(frozen=True)
class StackDeltas:
    rows: bytes
    expression_rows: int

    def __len__(self) -> int:
        return len(self.rows) // ROW.size


def _cfa(kind: int, off: int) -> tuple[int, int] | None:
    """(kind byte, cfa field) for a CFA offset, None where it does not fit."""
    if -(1 << 15) <= off < 1 << 15:
        return kind, off
    if off % 8 == 0 and -(1 << 15) <= off // 8 < 1 << 15:
        return kind | SCALED, off // 8
    return None


def _bp(rule: int) -> int:
    if rule == cfi.SAME:
        return 0
    if rule == cfi.UNKNOWN or rule % 8 or not -127 <= rule // 8 <= 127:
        return BP_UNKNOWN
    return rule // 8


def _row(kind: int, off: int, ra: int, bp: int) -> tuple[int, int, int, bool]:
    """(kind byte, cfa field, bp field, needs an expression) of one CFI row."""
    if kind == cfi.CFA_NONE:
        return KU_NONE, 0, 0, False
    if ra == cfi.UNDEFINED:
        return KU_END, 0, 0, False
    if ra == -8 and kind in (cfi.CFA_SP, cfi.CFA_BP):
        fits = _cfa(KU_SP if kind == cfi.CFA_SP else KU_BP, off)
        if fits is not None:
            return fits[0], fits[1], _bp(bp), False
    if ra == -8 and kind == cfi.CFA_PLT:
        return KU_PLT, off, _bp(bp), False
    return KU_EXPR, 0, 0, True


def from_table(table: CfiTable) -> StackDeltas | None:
    """The rows of a CFI table; None where its addresses do not fit the rows' 32 bits."""
    if len(table) and table.pcs[-1] >> 32:
        return None
    out = bytearray()
    expression = 0
    last = None
    for pc, kind, off, ra, bp in zip(table.pcs, table.kind, table.cfa_off, table.ra, table.bp, strict=True):
        kind_byte, cfa, bp_field, expr = _row(kind, off, ra, bp)
        if (kind_byte, cfa, bp_field) == last:
            continue  # rules the kernel tells apart no better than the row before
        last = (kind_byte, cfa, bp_field)
        expression += expr
        out += ROW.pack(pc, cfa, kind_byte, bp_field)
    return StackDeltas(bytes(out), expression)


def save(deltas: StackDeltas, path: str) -> None:
    save_whole(path, lambda f: f.write(_HEADER.pack(MAGIC, len(deltas), deltas.expression_rows) + deltas.rows))


def load(path: str) -> StackDeltas | None:
    try:
        with open(path, "rb") as f:
            magic, count, expression = _HEADER.unpack(f.read(_HEADER.size))
            rows = f.read(count * ROW.size)
    except (OSError, struct.error):
        return None
    if magic != MAGIC or len(rows) != count * ROW.size:
        return None
    return StackDeltas(rows, expression)


def stack_deltas(path: str, info: ElfInfo, key: tuple, debug_path: str | None = None,
                 cache_dir: str | None = None) -> StackDeltas | None:
    """The rows of the object at `path` (`info`: its ELF facts; `key`: its file key, for a name on disk
    when it has no build-id): from the disk cache, else built from its CFI and saved there."""
    disk = os.path.join(cache_dir, cache_name(info, key)[: -len(".cfi")] + ".sdt") if cache_dir else None
    deltas = load(disk) if disk and os.path.exists(disk) else None
    if deltas is not None:
        return deltas
    table = read_table_fast(path, debug_path)
    if table is None or not len(table):
        return None
    deltas = from_table(table)
    if deltas is not None and disk:
        save(deltas, disk)
    return deltas
