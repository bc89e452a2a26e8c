"""What the stack libraries need from one ELF file: its load segments, build-id, separate debug file.

Both symbolization (symbols.py) and unwinding (unwind.py) turn a file offset from /proc/PID/maps into
the ELF's own virtual address (the address `nm`, .eh_frame and addr2line speak) through the PT_LOAD
segments, and both look for the separate debug file a distro installs under /usr/lib/debug, found by
build-id (.build-id/xx/yyyy.debug) or by .gnu_debuglink (next to the file, in .debug/, or under
/usr/lib/debug/<dir>). Parsing is pyelftools'; every failure is None, never an exception.
"""

from __future__ import annotations

import io
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

DEBUG_ROOT = "/usr/lib/debug"
VDSO = "[vdso]"
_vdso: list[bytes | None] = []
T = TypeVar("T")
# what a malformed file can make pyelftools raise; anything of these is "not a usable ELF"
ELF_ERRORS = (ELFError, OSError, ValueError, KeyError, IndexError, AssertionError, EOFError, TypeError)


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD segment: file bytes [offset, offset+filesz) are loaded at vaddr."""

    offset: int
    vaddr: int
    filesz: int
    memsz: int


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
    segments = []
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_LOAD":
            segments.append(Segment(seg["p_offset"], seg["p_vaddr"], seg["p_filesz"], seg["p_memsz"]))
    return ElfInfo(tuple(segments), _build_id(elf), _debuglink(elf))


def _build_id(elf: ELFFile) -> str | None:
    try:
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_NOTE":
                continue
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return str(note["n_desc"])
    except ELF_ERRORS:
        return None
    return None


def _debuglink(elf: ELFFile) -> tuple[str, int] | None:
    try:
        sec = elf.get_section_by_name(".gnu_debuglink")
        if sec is None:
            return None
        data = sec.data()
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
            if os.path.realpath(path) == os.path.realpath(root + original_path):
                continue  # a debuglink naming the object itself
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
