"""bcctool/ehframe.py's FDE decoder against pyelftools' parse of the same entries: every FDE of
Debian's python3 and libc and of a C program built here gives the same address range and the same
rows; garbage raises the errors LazyCfiTable counts as "no CFI", never anything else."""

import io
import os
import random
import shutil
import subprocess

import pytest
from elftools.dwarf.callframe import FDE, CallFrameInfo
from elftools.dwarf.structs import DWARFStructs

from bcctool.cfi import _decoded_rows, _fde_rows, read_lazy_table
from bcctool.ehframe import read_fde
from bcctool.elfimage import ELF_ERRORS, section_named, with_elf

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CXX = """#include <stdexcept>
#include <cstdio>
static int deep(int n) { if (n > 40) throw std::runtime_error("x"); return n ? deep(n + 1) : 0; }
int main(int argc, char **) { try { return deep(argc); } catch (const std::exception &e) { std::puts(e.what()); } return 0; }
"""


def objects(tmp) -> list[str]:
    out = [os.path.realpath("/usr/bin/python3"), os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6")]
    if shutil.which("g++"):   # a personality routine and LSDA pointers in its CIE and FDE augmentations
        src = tmp / "eh.cc"
        src.write_text(CXX)
        subprocess.run(["g++", "-O2", "-o", str(tmp / "eh"), str(src)], check=True)
        out.append(str(tmp / "eh"))
    return [p for p in out if os.path.exists(p)]


def pyelftools_cfi(path: str) -> tuple[CallFrameInfo, object]:
    f = open(path, "rb")  # noqa: SIM115 - closed by the caller
    eh = with_elf(path, lambda elf: section_named(elf, ".eh_frame"))
    structs = DWARFStructs(little_endian=True, dwarf_format=32, address_size=8)
    return CallFrameInfo(f, 0, eh.addr - eh.offset, structs, for_eh_frame=True), f


def test_every_fde_decodes_as_pyelftools_parses_it(tmp_path):
    paths = objects(tmp_path)
    assert len(paths) >= 2
    for path in paths:
        table = with_elf(path, read_lazy_table)
        cfi, f = pyelftools_cfi(path)
        ours_cies, theirs_cies = {}, {}
        try:
            for i in range(len(table)):
                offset = table.hdr_addr + table.fdes[i] - table.eh_frame_addr
                entry = cfi._parse_entry_at(offset)
                assert isinstance(entry, FDE)
                start, end, rows = _fde_rows(entry, theirs_cies)
                fde = read_fde(table._stream, offset, table.eh_frame_addr, ours_cies)
                assert (fde.start, _decoded_rows(fde, {})) == (start, (end, rows)), (path, i)
        finally:
            f.close()


def test_garbage_raises_only_what_the_table_catches():
    path = os.path.realpath("/usr/bin/python3")
    table = with_elf(path, read_lazy_table)
    rng = random.Random(3)
    good = table.hdr_addr + table.fdes[len(table) // 2] - table.eh_frame_addr
    table._stream.seek(good)
    entry = bytearray(table._stream.read(64))
    for trial in range(2000):
        data = bytearray(entry) if trial % 2 else bytearray(rng.randbytes(64))
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            read_fde(io.BytesIO(bytes(data)), 0, 0x1000, {})
        except (*ELF_ERRORS, ArithmeticError):
            pass
