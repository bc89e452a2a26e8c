"""Addresses to function names, for the kernel and for any process, without BCC's resolver.

API (everything a metric script needs; nothing here raises on bad input):

    sym = Symbolizer(max_objects=256, max_bytes=256 << 20)
    sym.snapshot(pid) -> ProcessMaps | None   # take it when a process is first seen, so its stacks
                                              # still resolve after it exits; user() takes one if absent
    sym.user(pid, addr) -> Frame              # Frame(name, module, offset)
    sym.user_stack(pid, pcs) -> list[Frame]   # an unwound stack (unwind.py): return addresses as pc - 1
    sym.kernel(addr) -> str                   # function name, or "[unknown]"
    sym.kernel_frame(addr) -> Frame
    sym.forget(pid)                           # drop a process's snapshot and perf map
    sym.adopt(pid, parent_of) -> list[int]    # a fork child gone before its maps were read, named from
                                              # its parent's (parent_of(pid): 0 for none)
    Symbolizer(lines=True)                    # user frames named "function (file.c:42)" where the object
                                              # or its debug file has DWARF line tables (bcctool.lines)
    sym.stats() -> dict[str, int]             # perf_map_garbage, unreadable_objects, cache figures

Frame.name is the function, a C++ or Rust name demangled (bcctool.demangle); where no symbol covers the
address it is `module+0xoff` (off is the ELF virtual address, what `addr2line -e module` takes; the file
offset for a non-ELF file). Frame.offset is the address's distance from the symbol's start.

Where names come from: the kernel's from /proc/kallsyms (sorted once, bisect). A user address goes
through the process's executable mappings (/proc/PID/maps → file offset → ELF virtual address via
PT_LOAD) to the object's .symtab and .dynsym, plus the .symtab of its separate debug file when one is
installed (build-id under /usr/lib/debug/.build-id, or .gnu_debuglink). Anonymous executable memory is
looked up in the JIT's /tmp/perf-PID.map (`START SIZE name`, hex; lines that do not parse are skipped
and counted). Tables are cached per file (device, inode, size, mtime), bounded by count and bytes.
"""

from __future__ import annotations

import bisect
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .demangle import demangle
from .elfimage import (
    DEBUG_ROOT,
    ELF_ERRORS,
    SHT_DYNSYM,
    SHT_SYMTAB,
    VDSO,
    ELFFile,
    ElfInfo,
    debug_file_for,
    load_per_file,
    read_info,
    section_data,
    sections,
    symbol_rows,
    with_elf,
)
from .lines import line_table
from .lrucache import BoundedCache
from .procmaps import Mapping, ProcessMaps

__all__ = ["Frame", "KernelSymbols", "PerfMap", "ProcessMaps", "SymbolTable", "Symbolizer"]

UNKNOWN = "[unknown]"
KERNEL = "[kernel]"
_FUNC_TYPES = (2, 10)  # STT_FUNC, STT_GNU_IFUNC


@dataclass(frozen=True)
class Frame:
    name: str
    module: str
    offset: int = 0

    def __str__(self) -> str:
        return f"{self.name} {self.module}" if self.module.startswith("[") else f"{self.name} [{self.module}]"


class SymbolTable:
    """Function symbols as sorted parallel arrays: start, end, and the name's place in one bytes object
    (a str per name took 49 bytes besides its characters: 3.5 MB more for libLLVM's 60,000)."""

    def __init__(self, symbols: list[tuple[int, int, str | bytes]]) -> None:
        symbols.sort()
        starts, ends, offsets, names = array("Q"), array("Q"), array("I", [0]), []
        for start, size, name in symbols:
            raw = name.encode() if isinstance(name, str) else name
            if starts and starts[-1] == start:
                if size > ends[-1] - starts[-1]:  # of aliases at one address keep the sized one
                    ends[-1], names[-1] = start + size, raw
                continue
            starts.append(start)
            ends.append(start + size)
            names.append(raw)
        for i, end in enumerate(ends):
            if end == starts[i]:  # a size-0 symbol (hand-written asm) runs to the next one
                ends[i] = starts[i + 1] if i + 1 < len(starts) else starts[i] + 1
        for raw in names:
            offsets.append(offsets[-1] + len(raw))
        self.starts, self.ends, self._offsets = starts, ends, offsets
        self._names = b"".join(names)
        self.nbytes = 20 * len(starts) + len(self._names) + 300

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        # interned: the frames memoized for every process that runs this object share one string
        return sys.intern(self._names[self._offsets[i] : self._offsets[i + 1]].decode(errors="replace"))

    def lookup(self, addr: int) -> tuple[str, int] | None:
        """(name, offset into it) of the symbol covering `addr`, or None."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.name(i), addr - self.starts[i]
        return None

    @classmethod
    def from_elf(cls, elf: ELFFile) -> list[tuple[int, int, str | bytes]]:
        """The function symbols of an open ELFFile's .symtab and .dynsym."""
        out: list[tuple[int, int, str | bytes]] = []
        table = sections(elf)
        for sec in table:
            if sec.type not in (SHT_SYMTAB, SHT_DYNSYM) or not 0 < sec.link < len(table):
                continue
            try:
                out.extend(_symbols(elf, section_data(elf, sec), section_data(elf, table[sec.link])))
            except ELF_ERRORS:
                continue
        return out


def _symbols(elf: ELFFile, data: bytes, strtab: bytes) -> Iterator[tuple[int, int, bytes]]:
    for name_at, value, size, info, shndx in symbol_rows(elf, data):
        if (info & 0xF) in _FUNC_TYPES and value and shndx:
            end = strtab.find(b"\0", name_at)
            yield value, size, strtab[name_at : end if end >= 0 else None]


@dataclass
class ObjectSymbols:
    info: ElfInfo
    table: SymbolTable

    @property
    def nbytes(self) -> int:
        return self.table.nbytes


class KernelSymbols:
    """/proc/kallsyms, text symbols only, sorted once. Held compactly (about 4 MB for 120,000 symbols,
    where lists of Python strings took 25 MB in every process that names kernel frames): the starts in
    one array, the names in one bytes object with their offsets, each symbol's module as an index."""

    MAX_OFFSET = 1 << 20  # past the last symbol of a region by more than this: not its code

    def __init__(self, path: str = "/proc/kallsyms") -> None:
        addrs, names, mods = array("Q"), [], array("H")
        module_index: dict[str, int] = {"": 0}
        try:
            with open(path, "rb") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in b"tTwW" and len(parts[1]) == 1:
                        addr = int(parts[0], 16)
                        if addr:
                            module = parts[3].strip(b"[]").decode() if len(parts) > 3 else ""
                            addrs.append(addr)
                            names.append(parts[2])
                            mods.append(module_index.setdefault(module, len(module_index)))
        except (OSError, ValueError):
            addrs, names, mods = array("Q"), [], array("H")
        order = sorted(range(len(addrs)), key=addrs.__getitem__)
        self.starts = array("Q", (addrs[i] for i in order))
        self._module_of = array("H", (mods[i] for i in order))
        self._offsets = array("I", [0])
        for i in order:
            self._offsets.append(self._offsets[-1] + len(names[i]))
        self._names = b"".join(names[i] for i in order)
        self._modules = [m for m, _ in sorted(module_index.items(), key=lambda kv: kv[1])]

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        """The i-th symbol's name, in address order."""
        return sys.intern(self._names[self._offsets[i]:self._offsets[i + 1]].decode(errors="replace"))

    def lookup(self, addr: int) -> Frame | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr - self.starts[i] >= self.MAX_OFFSET:
            return None
        name = demangle(self.name(i))   # Rust in the kernel is mangled too
        module = self._modules[self._module_of[i]]
        return Frame(name, f"[{module}]" if module else KERNEL, addr - self.starts[i])


class PerfMap:
    """A JIT's /tmp/perf-PID.map: `START SIZE name` per line, hex; re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.garbage = 0
        self._stamp: tuple[int, int] | None = None
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._names: list[str] = []

    def refresh(self) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError:
            return
        self._stamp = stamp
        entries: dict[int, tuple[int, str]] = {}
        garbage = 0
        for raw in data.splitlines():
            parts = raw.decode(errors="replace").strip().split(None, 2)
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
                name = parts[2].strip()
            except (IndexError, ValueError):
                garbage += 1
                continue
            if size <= 0 or not name:
                garbage += 1
                continue
            entries[start] = (size, name)  # a later line for the same start wins (code re-JITed)
        self.garbage = garbage
        order = sorted(entries)
        self._starts = order
        self._ends = [s + entries[s][0] for s in order]
        self._names = [entries[s][1] for s in order]

    def lookup(self, addr: int) -> tuple[str, int] | None:
        found = self._find(addr)
        if found is None:
            self.refresh()
            found = self._find(addr)
        return found

    def _find(self, addr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._ends[i]:
            return self._names[i], addr - self._starts[i]
        return None


class Symbolizer:
    """Kernel and user address → Frame; see the module docstring."""

    MAX_PROCESSES = 4096
    REREAD_S = 1.0  # an address in no mapping re-reads the maps (dlopen since?) at most this often

    def __init__(
        self,
        max_objects: int = 128,
        # cpuprofile, offcpu and compmem each hold one, beside an Unwinder (16 MB): with names in one bytes
        # object libLLVM's table counts 3 MB (34,000 names; 5.2 MB before), so 24 MB holds about what 40 MB held
        max_bytes: int = 24 << 20,
        kallsyms: str = "/proc/kallsyms",
        debug_root: str = DEBUG_ROOT,
        lines: bool = False,
        max_line_bytes: int = 64 << 20,
    ) -> None:
        self.debug_root = debug_root
        self.objects = BoundedCache(max_objects, max_bytes)
        # lines: a user frame's name ends in its source line where DWARF line tables are found (bcctool.lines)
        self.lines = lines
        self.line_tables = BoundedCache(max_objects, max_line_bytes)
        self._kallsyms_path = kallsyms
        self._kernel: KernelSymbols | None = None
        self._maps: dict[int, ProcessMaps] = {}
        self._perf_maps: dict[int, PerfMap] = {}
        self._gone: dict[int, float] = {}  # pid -> when its maps could not be read
        self._inherited: dict[int, int] = {}  # fork child gone before its maps were read -> its parent
        self.unreadable_objects = 0

    # --- kernel -------------------------------------------------------------------------------
    @property
    def kernel_symbols(self) -> KernelSymbols:
        if self._kernel is None:
            self._kernel = KernelSymbols(self._kallsyms_path)
        return self._kernel

    def kernel_frame(self, addr: int) -> Frame:
        return self.kernel_symbols.lookup(addr) or Frame(UNKNOWN, KERNEL, addr)

    def kernel(self, addr: int) -> str:
        return self.kernel_frame(addr).name

    # --- processes ----------------------------------------------------------------------------
    def snapshot(self, pid: int) -> ProcessMaps | None:
        """Take (or retake) the process's maps; later lookups use it, even after the process exits."""
        snap = ProcessMaps.snapshot(pid)
        if snap is None:
            return self._maps.get(pid)
        old = self._maps.pop(pid, None)
        if old is not None:
            old.close()
        while len(self._maps) >= self.MAX_PROCESSES:
            self.forget(next(iter(self._maps)))
        self._maps[pid] = snap
        self._gone.pop(pid, None)
        for m in snap.mappings:
            if m.deleted:  # read it now: its descriptor is the only way in, and it goes with the snapshot
                self.object_symbols(m)
        return snap

    def maps(self, pid: int) -> ProcessMaps | None:
        """The process's snapshot, taken now if there is none; a process found gone is not looked for
        again for REREAD_S (each of its samples asked: a fork child that exited at once)."""
        snap = self._maps.get(pid)
        if snap is not None:
            return snap
        if pid in self._inherited:
            return self.maps(self._inherited[pid])
        gone = self._gone.get(pid)
        if gone is not None and time.monotonic() - gone < self.REREAD_S:
            return None
        snap = self.snapshot(pid)
        if snap is None:
            if len(self._gone) >= self.MAX_PROCESSES:
                self._gone.clear()
            self._gone[pid] = time.monotonic()
        return snap

    def inherit(self, pid: int, parent: int) -> ProcessMaps | None:
        """A fork child that exited before its maps were read, and never exec'd: it ran in a copy of its
        parent's address space, so its addresses are named from the parent's snapshot (shared, with its
        memos: the parent's code). Its own snapshot, if one was read, comes first."""
        if pid in self._maps or pid == parent:
            return self._maps.get(pid)
        if len(self._inherited) >= self.MAX_PROCESSES:
            self._inherited.clear()
        self._inherited[pid] = parent
        self._gone.pop(pid, None)
        return self.maps(parent)

    def adopt(self, pid: int, parent_of: Callable[[int], int]) -> list[int]:
        """A process gone before its maps were read: if it was forked and never exec'd (parent_of gives its
        parent, 0 for none), its addresses are its parent's, named from the parent's maps (a grandparent's
        if the parent is gone too). The ancestors it looked to, whose snapshots inherit() may have taken."""
        ancestors: list[int] = []
        child = pid
        for _ in range(8):
            parent = parent_of(child)
            if not parent:
                break
            ancestors.append(parent)
            if self.inherit(pid, parent) is not None:
                break
            child = parent
        return ancestors

    def forget(self, pid: int) -> None:
        self._inherited.pop(pid, None)
        snap = self._maps.pop(pid, None)
        if snap is not None:
            snap.close()
        self._perf_maps.pop(pid, None)

    def user(self, pid: int, addr: int) -> Frame:
        snap = self.maps(pid)
        memo = snap.memo("frames") if snap is not None else None
        frame = memo.get(addr) if memo is not None else None
        if frame is None:
            frame = self._user(pid, snap, addr, memo)
        return frame

    def user_stack(self, pid: int, pcs: list[int]) -> list[Frame]:
        """The frames of an unwound stack, innermost first: the first pc as it is, every return address
        as its call instruction (pc - 1), so a call that ends a function is not named after the next."""
        return [self.user(pid, pc if i == 0 else pc - 1) for i, pc in enumerate(pcs)]

    def _user(self, pid: int, snap: ProcessMaps | None, addr: int, memo: dict | None) -> Frame:
        mapping = snap.find(addr) if snap else None
        if mapping is None and snap is not None and time.monotonic() - snap.taken > self.REREAD_S:
            if os.path.exists(f"/proc/{pid}"):
                snap = self.snapshot(pid)  # maybe mapped since (dlopen)
                mapping = snap.find(addr) if snap else None
        if mapping is not None and (mapping.is_file or mapping.path == VDSO):
            frame = self.frame_in(mapping, addr)
            if memo is not None:
                memo[addr] = frame  # a file's code keeps its name; JIT code (perf map) may not
            return frame
        jit = self._perf_map(pid).lookup(addr)
        if jit is not None:
            return Frame(jit[0], f"perf-{pid}.map", jit[1])
        if mapping is None:
            return Frame(UNKNOWN, UNKNOWN, addr)
        return Frame(f"{mapping.module}+0x{addr - mapping.start:x}", mapping.module, addr - mapping.start)

    def frame_in(self, mapping: Mapping, addr: int) -> Frame:
        """The frame of `addr` inside a file mapping."""
        file_offset = mapping.file_offset(addr)
        obj = self.object_symbols(mapping)
        if obj is None:
            return Frame(f"{mapping.module}+0x{file_offset:x}", mapping.module, file_offset)
        vaddr = obj.info.vaddr_of(file_offset)
        if vaddr is None:
            return Frame(f"{mapping.module}+0x{file_offset:x}", mapping.module, file_offset)
        found = obj.table.lookup(vaddr)
        if found is None:
            return Frame(f"{mapping.module}+0x{vaddr:x}", mapping.module, vaddr)
        name = demangle(found[0])
        where = self.source_line(mapping, obj, vaddr) if self.lines else None
        if where is not None:
            name = f"{name} ({where[0]}:{where[1]})"
        return Frame(name, mapping.module, found[1])

    def source_line(self, mapping: Mapping, obj: ObjectSymbols, vaddr: int) -> tuple[str, int] | None:
        """(file, line) of an address in a mapping's file, from its line tables or its debug file's."""
        table = load_per_file(self.line_tables, mapping.readable_paths(),
                              lambda path, _key: self._load_lines(path, mapping, obj.info))
        return table.lookup(vaddr) if table is not None else None

    def _load_lines(self, path: str, mapping: Mapping, info: ElfInfo) -> Any:
        table = line_table(path)
        if table is None:
            debug = debug_file_for(info, mapping.path, path, self.debug_root)
            table = line_table(debug) if debug else None
        return table

    def object_symbols(self, mapping: Mapping) -> ObjectSymbols | None:
        """The symbol table of a mapping's file (cached), or None when it cannot be read."""
        return load_per_file(self.objects, mapping.readable_paths(), lambda path, _key: self._load(path, mapping))

    def _load(self, path: str, mapping: Mapping) -> ObjectSymbols | None:
        loaded = with_elf(path, lambda elf: (read_info(elf), SymbolTable.from_elf(elf)))
        if loaded is None:
            self.unreadable_objects += 1
            return None
        info, symbols = loaded
        debug = debug_file_for(info, mapping.path, path, self.debug_root)
        if debug:
            symbols.extend(with_elf(debug, SymbolTable.from_elf) or [])
        return ObjectSymbols(info, SymbolTable(symbols))

    def _perf_map(self, pid: int) -> PerfMap:
        pm = self._perf_maps.get(pid)
        if pm is None:
            pm = self._perf_maps[pid] = PerfMap(f"/tmp/perf-{pid}.map")
            pm.refresh()
        return pm

    def stats(self) -> dict[str, int]:
        return {
            "perf_map_garbage": sum(pm.garbage for pm in self._perf_maps.values()),
            "unreadable_objects": self.unreadable_objects,
            "cached_objects": len(self.objects),
            "cached_bytes": self.objects.bytes,
            "cache_evictions": self.objects.evictions,
            "processes": len(self._maps),
        }
