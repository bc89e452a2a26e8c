"""Source lines of machine code, from an object's DWARF line tables (.debug_line): a -g build's own, or
its separate debug file's (a distro's -dbg / -dbgsym package, found as symbols.py finds it).

    table = line_table(path)          # LineTable, or None when the file has no usable line tables
    table.lookup(vaddr) -> (file, line) | None   # the file's base name; None outside every sequence

What addr2line answers: the row covering an address is the last row at or before it in its sequence
(where one address has several rows, the last), and no row covers the address that ends a sequence.

Read lazily: pyelftools takes about 60 us a row (libc's 291,000 rows: 17.5 s), so only the compilation
unit that holds an address is read, when an address in it is first asked for (libc: 0.4 s to open its
debug file and read .debug_aranges, which maps addresses to units, then about 20 ms a unit). An
object without .debug_aranges is read whole if its .debug_line is small (MAX_WHOLE_BYTES), else gets
no lines; so does one whose debug sections, which pyelftools holds in memory, pass MAX_DEBUG_BYTES.
The file stays open while its table is kept (closed when the table is dropped).
"""

from __future__ import annotations

import bisect
import os
import weakref
from array import array
from typing import Any

from elftools.common.exceptions import DWARFError, ELFParseError
from elftools.construct.core import ConstructError

from .elfimage import ELF_ERRORS, open_elf, sections

MAX_WHOLE_BYTES = 64 << 10
MAX_DEBUG_BYTES = 256 << 20
NO_FILE = 0xFFFFFFFF      # a row that ends a sequence
ERRORS = (DWARFError, ELFParseError, ConstructError, *ELF_ERRORS)


class Rows:
    """Line-program rows as three sorted arrays (16 bytes a row)."""

    def __init__(self, rows: list[tuple[int, bool, int, int]]) -> None:
        """rows: (address, starts a row (False: ends a sequence), file index, line), in program order."""
        rows.sort(key=lambda r: (r[0], r[1]))      # stable: at one address, the program's last row stays last
        self.starts = array("Q", (r[0] for r in rows))
        self.files_of = array("I", (r[2] if r[1] else NO_FILE for r in rows))
        self.lines = array("I", (r[3] for r in rows))

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, vaddr: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0 or self.files_of[i] == NO_FILE:
            return None
        return self.files_of[i], self.lines[i]


class LineTable:
    def __init__(self, dwarf: Any, units: list[tuple[int, int, int]], debug_bytes: int,
                 stream: Any = None) -> None:
        """units: (first address, end, the unit's offset in .debug_info), sorted; offset -1: every row is
        read already (self._rows[-1])."""
        self.dwarf = dwarf
        self.begins = [u[0] for u in units]
        self.units = units
        self.files: list[str] = []
        self._file_index: dict[str, int] = {}
        self._rows: dict[int, Rows | None] = {}
        self.nbytes = debug_bytes + 40 * len(units) + 1000
        if stream is not None:
            weakref.finalize(self, stream.close)

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.begins, vaddr) - 1
        if i < 0 or vaddr >= self.units[i][1]:
            return None
        offset = self.units[i][2]
        if offset not in self._rows:
            self._rows[offset] = self._read_unit(offset)
        rows = self._rows[offset]
        found = rows.lookup(vaddr) if rows is not None else None
        return (self.files[found[0]], found[1]) if found else None

    def _read_unit(self, offset: int) -> Rows | None:
        try:
            rows = self.unit_rows(self.dwarf.get_CU_at(offset))
        except ERRORS:
            return None
        return Rows(rows) if rows else None

    def unit_rows(self, cu: Any) -> list[tuple[int, bool, int, int]]:
        """The rows of one compilation unit's line program, its files named in self.files."""
        program = self.dwarf.line_program_for_CU(cu)
        if program is None:
            return []
        entries = program.header.file_entry
        first = 0 if program.header.version >= 5 else 1      # DWARF 5 numbers files from 0
        local: dict[int, int] = {}
        rows: list[tuple[int, bool, int, int]] = []
        for entry in program.get_entries():
            state = entry.state
            if state is None:
                continue
            if state.end_sequence:
                rows.append((state.address, False, 0, 0))
                continue
            at = local.get(state.file)
            if at is None:
                at = local[state.file] = self._file(entries, state.file - first)
            rows.append((state.address, True, at, state.line))
        return rows

    def _file(self, entries: Any, k: int) -> int:
        raw = entries[k].name if 0 <= k < len(entries) else b"?"
        name = os.path.basename(raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw))
        at = self._file_index.setdefault(name, len(self._file_index))
        if at == len(self.files):
            self.files.append(name)
        return at


def line_table(path: str) -> LineTable | None:
    opened = open_elf(path)
    if opened is None:
        return None
    elf, stream = opened
    try:
        table = _table(elf, stream)
    except ERRORS:
        table = None
    if table is None or table.dwarf is None:
        stream.close()
    return table


def _table(elf: Any, stream: Any) -> LineTable | None:
    debug = {s.name: s.size for s in sections(elf) if s.name.startswith((".debug_", ".zdebug_"))}
    line_bytes = debug.get(".debug_line", debug.get(".zdebug_line"))
    if line_bytes is None or sum(debug.values()) > MAX_DEBUG_BYTES or not elf.has_dwarf_info():
        return None
    dwarf = elf.get_dwarf_info()
    aranges = dwarf.get_aranges() if ".debug_aranges" in debug else None
    units = sorted((e.begin_addr, e.begin_addr + e.length, e.info_offset)
                   for e in (aranges.entries if aranges is not None else ()) if e.length > 0)
    if units:
        return LineTable(dwarf, units, sum(debug.values()), stream)
    if line_bytes > MAX_WHOLE_BYTES:
        return None
    whole = LineTable(dwarf, [(0, 1 << 64, -1)], 0)
    rows = [row for cu in dwarf.iter_CUs() for row in whole.unit_rows(cu)]
    if not rows:
        return None
    whole._rows[-1] = Rows(rows)
    whole.dwarf = None         # nothing more to read: the file can close
    whole.nbytes = 16 * len(rows) + 1000
    return whole
