"""elfimage's struct reader of section and program headers against pyelftools' own parse of the same
files (ELF64 and ELF32), and the build-id against readelf: the stack libraries read ELF files only
through it."""

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from elftools.elf.elffile import ELFFile  # noqa: E402
from elftools.elf.sections import SymbolTableSection  # noqa: E402

from bcctool.elfimage import read_info, sections, with_elf  # noqa: E402
from bcctool.symbols import SymbolTable  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> list[str]:
    """Debian's python3 (ELF64, stripped, .dynsym only), a -g program with a .symtab (ELF64), and an
    ELF32 shared object when gcc can build one (-m32 without a 32-bit libc: -nostdlib)."""
    d = tmp_path_factory.mktemp("elf")
    src = d / "prog.c"
    src.write_text("int leaf(int x) { return x * 3; }\nint main(int c, char **v) { return leaf(c); }\n")
    out = [os.path.realpath("/usr/bin/python3"), str(d / "prog")]
    subprocess.run(["gcc", "-g", "-O1", "-Wl,--build-id", "-o", out[1], str(src)], check=True)
    built = subprocess.run(["gcc", "-m32", "-nostdlib", "-shared", "-fPIC", "-Wl,--build-id", "-o",
                            str(d / "lib32.so"), str(src)], capture_output=True)
    if built.returncode == 0:
        out.append(str(d / "lib32.so"))
    return out


def test_sections_segments_and_symbols_match_pyelftools(objects):
    for path in objects:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            theirs = [(s.name, s.header["sh_type"], s["sh_addr"], s["sh_offset"], s["sh_size"], s["sh_link"])
                      for s in elf.iter_sections()]
            ours = [(s.name, s.type, s.addr, s.offset, s.size, s.link) for s in sections(elf)]
            assert [t[0] for t in ours] == [t[0] for t in theirs], path
            assert [t[2:] for t in ours] == [t[2:] for t in theirs], path
            segments = [(p["p_offset"], p["p_vaddr"], p["p_filesz"], p["p_memsz"])
                        for p in elf.iter_segments() if p["p_type"] == "PT_LOAD"]
            assert [(s.offset, s.vaddr, s.filesz, s.memsz) for s in read_info(elf).segments] == segments
            symbols = sorted(
                (s["st_value"], s["st_size"], s.name)
                for sec in elf.iter_sections() if isinstance(sec, SymbolTableSection)
                for s in sec.iter_symbols()
                if s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and s["st_value"]
                and s["st_shndx"] != "SHN_UNDEF")
            ours = sorted((v, z, n.decode()) for v, z, n in SymbolTable.from_elf(elf))
            assert symbols and ours == symbols, path


def test_build_id_as_readelf_prints_it(objects):
    for path in objects:
        notes = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
        assert with_elf(path, read_info).build_id == notes.split("Build ID:")[1].split()[0], path


def test_truncated_file_is_none_not_a_traceback(objects, tmp_path):
    data = open(objects[1], "rb").read()
    for cut in (64, 200, len(data) // 2, len(data) - 100):
        path = tmp_path / f"cut{cut}"
        path.write_bytes(data[:cut])
        info = with_elf(str(path), read_info)   # None, or what the part read holds
        assert info is None or isinstance(info.segments, tuple)
        assert isinstance(with_elf(str(path), SymbolTable.from_elf), (list, type(None)))
