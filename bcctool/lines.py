"""Source lines of machine code, from an object's DWARF line tables (.debug_line): a -g build's own, or
its separate debug file's (a distro's -dbg / -dbgsym package, found as symbols.py finds it).

    table = line_table(elf)           # LineTable, or None when the file has no usable .debug_line
    table.lookup(vaddr) -> (file, line) | None   # the file's base name; None outside every sequence

What addr2line answers: the row covering an address is the last row at or before it in its sequence
(where one address has several rows, the last), and no row covers the address that ends a sequence.
Rows are kept as three sorted arrays (16 bytes a row). A .debug_line past MAX_LINE_BYTES is not read
(parsing costs about 2 s per MB with pyelftools): its object gets no lines, rather than a stalled tool.
"""

from __future__ import annotations

import bisect
import os
from array import array

from .elfimage import section_named

MAX_LINE_BYTES = 8 << 20
NO_FILE = 0xFFFFFFFF      # a row that ends a sequence


class LineTable:
    def __init__(self, rows: list[tuple[int, bool, int, int]], files: list[str]) -> None:
        """rows: (address, starts a row (False: ends a sequence), file index, line), in line-program order."""
        rows.sort(key=lambda r: (r[0], r[1]))      # stable: at one address, the program's last row stays last
        self.starts = array("Q", (r[0] for r in rows))
        self.files_of = array("I", (r[2] if r[1] else NO_FILE for r in rows))
        self.lines = array("I", (r[3] for r in rows))
        self.files = files
        self.nbytes = 16 * len(rows) + sum(len(f) + 50 for f in files) + 200

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0 or self.files_of[i] == NO_FILE:
            return None
        return self.files[self.files_of[i]], self.lines[i]


def line_table(elf) -> LineTable | None:
    """The rows of every compilation unit's line program; None without .debug_line (or past the bound)."""
    section = section_named(elf, ".debug_line")
    if section is None or section.size > MAX_LINE_BYTES or not elf.has_dwarf_info():
        return None
    dwarf = elf.get_dwarf_info()
    rows: list[tuple[int, bool, int, int]] = []
    files: list[str] = []
    index: dict[str, int] = {}
    for cu in dwarf.iter_CUs():
        program = dwarf.line_program_for_CU(cu)
        if program is None:
            continue
        entries = program.header.file_entry
        first = 0 if program.header.version >= 5 else 1      # DWARF 5 numbers files from 0
        local: dict[int, int] = {}
        for entry in program.get_entries():
            state = entry.state
            if state is None:
                continue
            if state.end_sequence:
                rows.append((state.address, False, 0, 0))
                continue
            at = local.get(state.file)
            if at is None:
                k = state.file - first
                raw = entries[k].name if 0 <= k < len(entries) else b"?"
                name = os.path.basename(raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw))
                at = local[state.file] = index.setdefault(name, len(index))
                if at == len(files):
                    files.append(name)
            rows.append((state.address, True, at, state.line))
    return LineTable(rows, files) if rows else None
