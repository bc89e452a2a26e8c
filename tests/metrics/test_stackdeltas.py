"""bcctool.stackdeltas: CFI rows (cfi.py's) turned into the kernel unwinder's 8-byte rows (bpf/kunwind.h's
struct ku_row), each rule as the BPF walk reads it; the whole-table reader through .eh_frame_hdr against
pyelftools' on a real object; the disk cache. No BPF needed."""

from __future__ import annotations

import os
from array import array

import pytest

from bcctool import cfi, stackdeltas
from bcctool.stackdeltas import BP_UNKNOWN, KU_BP, KU_END, KU_EXPR, KU_NONE, KU_PLT, KU_SP, ROW, SCALED


def table(*rows: tuple[int, int, int, int, int]) -> cfi.CfiTable:
    pcs, kind, off, ra, bp = (array(code, values) for code, values in zip("Qbiii", zip(*rows, strict=True),
                                                                         strict=True))
    return cfi.CfiTable(pcs, array("B", kind), off, ra, bp)


def rows_of(deltas: stackdeltas.StackDeltas) -> list[tuple[int, int, int, int]]:
    return [ROW.unpack_from(deltas.rows, i * ROW.size) for i in range(len(deltas))]


def test_each_rule_becomes_the_row_the_kernel_reads():
    deltas = stackdeltas.from_table(table(
        (0x1000, cfi.CFA_SP, 8, -8, cfi.SAME),           # at entry: CFA = rsp + 8
        (0x1001, cfi.CFA_SP, 16, -8, -16),               # after push rbp: rbp saved at CFA - 16
        (0x1004, cfi.CFA_BP, 16, -8, -16),               # rbp-based
        (0x1010, cfi.CFA_SP, 65600, -8, cfi.SAME),       # python3's largest frame: in units of 8
        (0x1020, cfi.CFA_PLT, 11, -8, cfi.SAME),         # the PLT's expression: its threshold
        (0x1030, cfi.CFA_SP, 8, cfi.UNDEFINED, cfi.SAME),  # _start: the outermost frame
        (0x1040, cfi.CFA_EXPR, 0, -8, cfi.SAME),         # a DWARF expression: frame pointers, counted
        (0x1050, cfi.CFA_SP, 8, -16, cfi.SAME),          # a return address elsewhere than CFA - 8: likewise
        (0x1060, cfi.CFA_SP, 24, -8, cfi.UNKNOWN),       # rbp's rule not followed
        (0x1070, cfi.CFA_NONE, 0, cfi.UNKNOWN, cfi.UNKNOWN),  # no FDE here
    ))
    assert rows_of(deltas) == [
        (0x1000, 8, KU_SP, 0),
        (0x1001, 16, KU_SP, -2),
        (0x1004, 16, KU_BP, -2),
        (0x1010, 8200, KU_SP | SCALED, 0),
        (0x1020, 11, KU_PLT, 0),
        (0x1030, 0, KU_END, 0),
        (0x1040, 0, KU_EXPR, 0),
        (0x1060, 24, KU_SP, BP_UNKNOWN),   # 0x1050's row is 0x1040's again: merged
        (0x1070, 0, KU_NONE, 0),
    ]
    assert deltas.expression_rows == 1   # rows, as loaded: the merged one is not a row of its own


def test_an_offset_beyond_the_rows_range_needs_an_expression_and_vaddrs_past_4_gib_have_no_table():
    deltas = stackdeltas.from_table(table((0x1000, cfi.CFA_SP, (1 << 18) + 4, -8, cfi.SAME)))
    assert rows_of(deltas) == [(0x1000, 0, KU_EXPR, 0)] and deltas.expression_rows == 1
    assert stackdeltas.from_table(table((1 << 32, cfi.CFA_SP, 8, -8, cfi.SAME))) is None


@pytest.mark.parametrize("path", ["/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libm.so.6"])
def test_the_whole_table_through_the_header_is_pyelftools_table(path):
    if not os.path.exists(path):
        pytest.skip(f"no {path}")
    fast, slow = cfi.read_table_fast(path), cfi.read_table(path)
    assert len(fast) > 100
    assert [list(a) for a in (fast.pcs, fast.kind, fast.cfa_off, fast.ra, fast.bp)] == \
        [list(a) for a in (slow.pcs, slow.kind, slow.cfa_off, slow.ra, slow.bp)]


def test_rows_are_saved_per_build_id_and_a_damaged_file_is_not_read(tmp_path):
    path = "/lib64/ld-linux-x86-64.so.2"
    if not os.path.exists(path):
        pytest.skip(f"no {path}")
    from bcctool.elfimage import file_key, read_info, with_elf

    info = with_elf(path, read_info)
    built = stackdeltas.stack_deltas(path, info, file_key(path), cache_dir=str(tmp_path))
    saved = [p for p in os.listdir(tmp_path) if p.endswith(".sdt")]
    assert built is not None and saved == [f"{info.build_id}.sdt"]
    assert stackdeltas.load(str(tmp_path / saved[0])) == built
    with open(tmp_path / saved[0], "r+b") as f:
        f.truncate(100)
    assert stackdeltas.load(str(tmp_path / saved[0])) is None
