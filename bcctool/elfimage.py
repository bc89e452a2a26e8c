"""What the stack libraries need from one ELF file: its load segments, build-id, separate debug file.

Both symbolization (symbols.py) and unwinding (unwind.py) turn a file offset from /proc/PID/maps into
the ELF's own virtual address (the address `nm`, .eh_frame and addr2line speak) through the PT_LOAD
segments, and both look for the separate debug file a distro installs under /usr/lib/debug, found by
build-id (.build-id/xx/yyyy.debug) or by .gnu_debuglink (next to the file, in .debug/, or under
/usr/lib/debug/<dir>). pyelftools parses the ELF header; the section and program header tables are
read here with struct (`sections(elf)`, `read_info`): pyelftools makes an object of every section to
find one by name, parsing each hash table whole on the way (libLLVM: 100 ms per lookup, where the
tables themselves take under a millisecond). Every failure is None, never an exception.
"""

from __future__ import annotations

import io
import os
import struct
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

DEBUG_ROOT = "/usr/lib/debug"
VDSO = "[vdso]"
_vdso: list[bytes | None] = []
T = TypeVar("T")
# what a malformed file can make pyelftools raise; anything of these is "not a usable ELF"
ELF_ERRORS = (ELFError, OSError, ValueError, KeyError, IndexError, AssertionError, EOFError, TypeError, struct.error)


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD segment: file bytes [offset, offset+filesz) are loaded at vaddr."""

    offset: int
    vaddr: int
    filesz: int
    memsz: int


@dataclass(frozen=True)
class Section:
    """One section header, as the struct reader below found it."""

    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


SHT_SYMTAB, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM = 2, 7, 8, 11
PT_LOAD = 1
NT_GNU_BUILD_ID = 3
# (section header, program header) layouts of ELF32 and ELF64, in the file's byte order
_SHDR = {32: "IIIIIIIIII", 64: "IIQQQQIIQQ"}  # name type flags addr offset size link info align entsize
_PHDR = {32: "IIIIIIII", 64: "IIQQQQQQ"}  # 32: type offset vaddr paddr filesz memsz flags align; 64: flags 2nd
_sections: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ELFFile -> its sections, read once


def sections(elf: ELFFile) -> list[Section]:
    """The file's section headers in index order (names from .shstrtab), read once per open file."""
    known = _sections.get(elf)
    if known is not None:
        return known
    order = "<" if elf.little_endian else ">"
    shdr = struct.Struct(order + _SHDR[elf.elfclass])
    count, names_at = elf["e_shnum"], elf["e_shstrndx"]
    raw = _read(elf, elf["e_shoff"], shdr.size) if elf["e_shoff"] else b""
    if len(raw) == shdr.size and (count == 0 or names_at == 0xFFFF):  # > 0xff00 sections: counts in entry 0
        first = shdr.unpack(raw)
        count, names_at = count or first[5], first[6] if names_at == 0xFFFF else names_at
    if not elf["e_shoff"] or elf["e_shentsize"] < shdr.size:
        count = 0
    table = _read(elf, elf["e_shoff"], count * elf["e_shentsize"]) if count else b""
    headers = [shdr.unpack_from(table, i * elf["e_shentsize"]) for i in range(len(table) // elf["e_shentsize"])]
    names = b""
    if 0 < names_at < len(headers):
        names = _read(elf, headers[names_at][4], headers[names_at][5])
    out = []
    for h in headers:
        end = names.find(b"\0", h[0])
        name = names[h[0] : end if end >= 0 else None].decode(errors="replace") if h[0] < len(names) else ""
        out.append(Section(name, h[1], h[3], h[4], h[5], h[6]))
    _sections[elf] = out
    return out


_SYM64 = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size
_SYM64_BE = struct.Struct(">IBBHQQ")
_SYM32, _SYM32_BE = struct.Struct("<IIIBBH"), struct.Struct(">IIIBBH")  # Elf32_Sym: name, value, size, info, other, shndx


def symbol_rows(elf: ELFFile, data: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(name offset, value, size, info, shndx) of each entry of a raw .symtab/.dynsym: struct over the
    table, as pyelftools' per-symbol objects cost ~30x more on a big one."""
    if elf.elfclass == 64:
        sym = _SYM64 if elf.little_endian else _SYM64_BE
        return ((n, v, z, i, x) for n, i, _o, x, v, z in sym.iter_unpack(data[: len(data) - len(data) % 24]))
    sym = _SYM32 if elf.little_endian else _SYM32_BE
    return ((n, v, z, i, x) for n, v, z, i, _o, x in sym.iter_unpack(data[: len(data) - len(data) % 16]))


def section_named(elf: ELFFile, name: str) -> Section | None:
    return next((sec for sec in sections(elf) if sec.name == name), None)


def section_data(elf: ELFFile, sec: Section) -> bytes:
    """A section's bytes (b"" for NOBITS: they are not in the file)."""
    return b"" if sec.type == SHT_NOBITS else _read(elf, sec.offset, sec.size)


def _read(elf: ELFFile, offset: int, size: int) -> bytes:
    elf.stream.seek(offset)
    data = elf.stream.read(size)
    if len(data) != size:
        raise EOFError(f"ELF truncated: {size} bytes at {offset}")
    return data


@dataclass(frozen=True)
class ElfInfo:
    segments: tuple[Segment, ...]
    build_id: str | None
    debuglink: tuple[str, int] | None  # (file name, CRC32 of the debug file)

    def vaddr_of(self, file_offset: int) -> int | None:
        """The ELF virtual address of a file offset, through the PT_LOAD segment holding it."""
        for seg in self.segments:
            if seg.offset <= file_offset < seg.offset + max(seg.memsz, seg.filesz):
                return file_offset - seg.offset + seg.vaddr
        return None


def open_elf(path: str) -> tuple[ELFFile, object] | None:
    """(ELFFile, its open stream) or None when the file is unreadable or not an ELF. VDSO names the
    kernel's vDSO, read from this process's own memory."""
    try:
        if path == VDSO:
            image = vdso_image()
            if image is None:
                return None
            stream = io.BytesIO(image)
        else:
            stream = open(path, "rb")
    except OSError:
        return None
    try:
        return ELFFile(stream), stream
    except ELF_ERRORS:
        stream.close()
        return None


def with_elf(path: str, read: Callable[[ELFFile], T]) -> T | None:
    """`read(elf)` on the file opened as an ELF, closed after; None when unreadable or malformed."""
    opened = open_elf(path)
    if opened is None:
        return None
    elf, stream = opened
    try:
        return read(elf)
    except ELF_ERRORS:
        return None
    finally:
        stream.close()


def read_info(elf: ELFFile) -> ElfInfo:
    order = "<" if elf.little_endian else ">"
    phdr = struct.Struct(order + _PHDR[elf.elfclass])
    segments = []
    if elf["e_phoff"] and elf["e_phentsize"] >= phdr.size:
        table = _read(elf, elf["e_phoff"], elf["e_phnum"] * elf["e_phentsize"])
        for i in range(elf["e_phnum"]):
            fields = phdr.unpack_from(table, i * elf["e_phentsize"])
            if fields[0] == PT_LOAD:
                at = (2, 3, 5, 6) if elf.elfclass == 64 else (1, 2, 4, 5)  # offset, vaddr, filesz, memsz
                segments.append(Segment(*(fields[i] for i in at)))
    return ElfInfo(tuple(segments), _build_id(elf), _debuglink(elf))


def _build_id(elf: ELFFile) -> str | None:
    order = "<" if elf.little_endian else ">"
    try:
        for sec in sections(elf):
            if sec.type != SHT_NOTE:
                continue
            data, pos = section_data(elf, sec), 0
            while pos + 12 <= len(data):  # namesz, descsz, type; the name and desc each padded to 4 bytes
                namesz, descsz, kind = struct.unpack_from(order + "III", data, pos)
                name_at = pos + 12
                desc_at = name_at + ((namesz + 3) & ~3)
                if kind == NT_GNU_BUILD_ID and data[name_at : name_at + namesz] == b"GNU\0" and descsz:
                    return data[desc_at : desc_at + descsz].hex()
                pos = desc_at + ((descsz + 3) & ~3)
    except ELF_ERRORS:
        return None
    return None


def _debuglink(elf: ELFFile) -> tuple[str, int] | None:
    try:
        sec = section_named(elf, ".gnu_debuglink")
        if sec is None:
            return None
        data = section_data(elf, sec)
    except ELF_ERRORS:
        return None
    name, _, rest = data.partition(b"\0")
    if not name:
        return None
    crc_at = (len(name) + 1 + 3) & ~3  # the CRC follows the name, 4-byte aligned
    if len(data) < crc_at + 4:
        return None
    crc = int.from_bytes(data[crc_at : crc_at + 4], "little" if elf.little_endian else "big")
    return name.decode(errors="replace"), crc


def _file_crc(path: str) -> int | None:
    try:
        crc = 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
        return crc
    except OSError:
        return None


def find_debug_file(info: ElfInfo, original_path: str, root: str = "", debug_root: str = DEBUG_ROOT) -> str | None:
    """The separate debug file of an object: by build-id first, then by .gnu_debuglink (CRC checked).

    `original_path` is the object's path as the process sees it (its directory is where a debuglink
    is looked for); `root` prefixes every candidate (a process's /proc/PID/root); `debug_root` is
    where the distro installs debug files.
    """
    if info.build_id and len(info.build_id) > 2:
        path = f"{root}{debug_root}/.build-id/{info.build_id[:2]}/{info.build_id[2:]}.debug"
        if os.path.isfile(path):
            return path
    if info.debuglink:
        name, crc = info.debuglink
        directory = os.path.dirname(original_path)
        for candidate in (
            os.path.join(directory, name),
            os.path.join(directory, ".debug", name),
            debug_root + os.path.join(directory, name),
        ):
            path = root + candidate
            try:
                if os.path.realpath(path) == os.path.realpath(root + original_path):
                    continue  # a debuglink naming the object itself
            except OSError:  # /proc/PID/root of a process exiting meanwhile: readlink fails (ENOENT)
                return None
            if os.path.isfile(path) and _file_crc(path) == crc:
                return path
    return None


# path -> (when, key): every CFI row or symbol a stack library has not yet memoized asks for its
# object, many times a second; a stat through /proc/PID/root costs more than the lookup itself
_KEY_TTL_S = 1.0
_MAX_KEYS = 4096
_keys: dict[str, tuple[float, tuple | None]] = {}


def file_key(path: str) -> tuple | None:
    """What identifies a file's contents for caching: (device, inode, size, mtime); None if unreadable.
    Remembered for a second per path."""
    now = time.monotonic()
    known = _keys.get(path)
    if known is not None and now - known[0] < _KEY_TTL_S:
        return known[1]
    if len(_keys) >= _MAX_KEYS:
        _keys.clear()
    key = _stat_key(path)
    _keys[path] = (now, key)
    return key


def _stat_key(path: str) -> tuple | None:
    if path == VDSO:
        return (VDSO,) if vdso_image() is not None else None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def debug_file_for(info: ElfInfo, mapping_path: str, opened_as: str, debug_root: str = DEBUG_ROOT) -> str | None:
    """The debug file of a mapped object opened as `opened_as` (maybe through /proc/PID/root): looked
    for in the process's root first, then in ours."""
    root = opened_as[: -len(mapping_path)] if opened_as.endswith(mapping_path) and opened_as != mapping_path else ""
    found = find_debug_file(info, mapping_path, root, debug_root)
    if found is None and root:
        found = find_debug_file(info, mapping_path, "", debug_root)
    return found


def load_per_file(cache: Any, paths: list[str], load: Callable[[str, tuple], Any]) -> Any | None:
    """What `load(path, key)` makes of the first readable of `paths`, cached under the file's key.

    `cache` is a lrucache.BoundedCache; a loaded value has `.nbytes`; a file `load` cannot read (None)
    is cached as such and not tried again.
    """
    for path in paths:
        key = file_key(path)
        if key is None:
            continue
        cached = cache.get(key)
        if cached is not None:
            return cached or None
        value = load(path, key)
        cache.put(key, value if value is not None else False, value.nbytes if value is not None else 100)
        return value
    return None


def vdso_image() -> bytes | None:
    """The vDSO the kernel maps into every 64-bit process, as this process sees it (the same image):
    its .eh_frame and symbols serve the frames of clock_gettime and friends in any process."""
    if not _vdso:
        image = None
        try:
            with open("/proc/self/maps") as f:
                line = next((ln for ln in f if ln.rstrip().endswith(VDSO)), None)
            if line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                with open("/proc/self/mem", "rb") as mem:
                    mem.seek(lo)
                    image = mem.read(hi - lo)
        except (OSError, ValueError):
            image = None
        _vdso.append(image)
    return _vdso[0]
