"""User space's side of the kernel's unwinder (bpf/kunwind.h): each executable file's stack-delta rows
(stackdeltas.py) loaded into ku_rows / ku_files once, and each process's executable mappings into the
ku_maps LPM trie (tgid, address prefix -> file, load bias), when BPF asks for them on ku_events.

    tables = KernelTables(bpf, cache_dir=None, say=print)
    tables.meet(tgid)          # read /proc/PID/maps, load the files' rows and the mappings; True when done
    tables.on_event(raw)       # a struct ku_event_t from ku_events: meet(tgid) (RingReader's callback)
    tables.forget(tgid)        # a process gone: its mappings out of the trie
    tables.forget_gone()       # every process gone
    tables.stats()             # files, rows (used, capacity), mapping entries, bytes of BPF map memory

Rows are appended to one array mmap'ed from the BPF map (BPF_F_MMAPABLE): no syscall per row. A file
whose rows do not fit what is left, or has no CFI, or vaddrs past 4 GiB, gets file id 0: the kernel
walks it by frame pointers (said once on stderr when the rows run out). Rows stay until the end of the
run (a file met once is likely met again); mappings go with their process. Methods may run on a reader
thread while the main thread calls forget(): one lock guards the bookkeeping.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Callable
from typing import Any

from .elfimage import debug_file_for, file_key, read_info, with_elf
from .procmaps import Mapping, ProcessMaps
from .stackdeltas import ROW, StackDeltas, stack_deltas

KU_PENDING, KU_READY, KU_STALE = range(3)  # ku_procs' states (bpf/kunwind.h)
EVENT = struct.Struct("<II")  # struct ku_event_t: tgid, state
MAX_FILE_ROWS = (1 << 20) - 1  # the kernel's binary search takes 20 steps (KU_SEARCH)
LPM_ENTRY_BYTES = 120  # what the kernel allocates per trie entry (a node of 40 bytes + key + value), about
STACK_ENTRY_BYTES = 1100  # a stored stack: 1,032 bytes of value, key and the hash table's element


def prefixes(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) as the fewest aligned blocks: (block start, prefix length in bits of 64)."""
    out = []
    while start < end:
        size = start & -start if start else 1 << 64
        while start + size > end:
            size >>= 1
        out.append((start, 65 - size.bit_length()))
        start += size
    return out


def _big_endian(addr: int) -> int:
    return int.from_bytes(addr.to_bytes(8, "big"), "little")


class KernelTables:
    def __init__(self, bpf: Any, cache_dir: str | None = None, say: Callable[[str], None] = print) -> None:
        self.maps, self.files, self.procs = bpf["ku_maps"], bpf["ku_files"], bpf["ku_procs"]
        rows = bpf["ku_rows"]
        self.capacity = rows.max_entries
        self.file_capacity = self.files.max_entries
        self._rows = mmap.mmap(rows.map_fd, (self.capacity * ROW.size + mmap.PAGESIZE - 1) & -mmap.PAGESIZE,
                               mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.cache_dir = cache_dir
        self.say = say
        self.used = 0                          # rows taken
        self.expression_rows = 0               # of them, rows walked by frame pointers
        self.file_ids: dict[tuple, int] = {}   # file key -> file id (0: no table)
        self.next_file = 1
        self.loaded: dict[int, list] = {}      # tgid -> its trie keys
        self.entries = 0
        self.full_said = False
        self._lock = threading.Lock()

    # --- processes ----------------------------------------------------------------------------
    def on_event(self, raw: bytes) -> None:
        tgid, _state = EVENT.unpack_from(raw)
        self.meet(tgid)

    def meet(self, tgid: int) -> bool:
        """Load the executable mappings of tgid now (again, after an exec or a dlopen: the old ones
        out first). False when it is gone or its maps cannot be read."""
        snap = ProcessMaps.snapshot(tgid)
        if snap is None:
            return False
        leaves = [(mapping, self._mapping_leaf(mapping)) for mapping in snap.mappings]   # files read here
        snap.close()
        with self._lock:
            self._drop(tgid)
            keys = []
            for mapping, leaf in leaves:
                for start, bits in prefixes(mapping.start, mapping.end):
                    key = self.maps.Key(32 + bits, tgid, _big_endian(start))
                    try:
                        self.maps[key] = leaf
                    except Exception:  # noqa: BLE001 - BCC raises bare Exception: the trie is full
                        self._drop_keys(keys)
                        self.say(f"cpuprofile: the mappings of {tgid} do not fit the kernel's table: "
                                 "its stacks are walked by frame pointers")
                        return False
                    keys.append(key)
            self.loaded[tgid] = keys
            self.entries += len(keys)
            self.procs[self.procs.Key(tgid)] = self.procs.Leaf(KU_READY)
        return True

    def forget(self, tgid: int) -> None:
        with self._lock:
            self._drop(tgid)

    def forget_gone(self) -> None:
        """The mappings of every process that has exited out of the trie."""
        with self._lock:
            for tgid in [t for t in self.loaded if not os.path.exists(f"/proc/{t}")]:
                self._drop(tgid)

    def _drop(self, tgid: int) -> None:
        self._drop_keys(self.loaded.pop(tgid, []))

    def _drop_keys(self, keys: list) -> None:
        for key in keys:
            try:
                del self.maps[key]
            except KeyError:
                pass
        self.entries -= len(keys)

    def _mapping_leaf(self, mapping: Mapping) -> Any:
        file_id, bias = self._file(mapping)
        return self.maps.Leaf(mapping.start, mapping.end, bias & 0xFFFFFFFFFFFFFFFF, file_id, 0)

    # --- files --------------------------------------------------------------------------------
    def _file(self, mapping: Mapping) -> tuple[int, int]:
        """(file id, load bias) of a mapping; (0, 0) where it has no table (frame pointers)."""
        for path in mapping.readable_paths():
            key = file_key(path)
            if key is None:
                continue
            info = with_elf(path, read_info)
            vaddr = info.vaddr_of(mapping.offset) if info is not None else None
            if vaddr is None:
                return 0, 0
            file_id = self.file_ids.get(key)
            if file_id is None:
                deltas = stack_deltas(path, info, key, debug_file_for(info, mapping.path, path), self.cache_dir)
                file_id = self.file_ids[key] = self._load(deltas) if deltas is not None else 0
            return file_id, mapping.start - vaddr
        return 0, 0

    def _load(self, deltas: StackDeltas) -> int:
        count = len(deltas)
        file_id = self.next_file
        if count > MAX_FILE_ROWS or self.used + count > self.capacity or file_id >= self.file_capacity:
            if not self.full_said:
                self.full_said = True
                self.say(f"cpuprofile: the kernel's unwind tables are full ({self.used} of {self.capacity} "
                         "rows): files met from now on are walked by frame pointers")
            return 0
        first = self.used
        self._rows[first * ROW.size : (first + count) * ROW.size] = deltas.rows
        self.used += count
        self.next_file += 1
        self.expression_rows += deltas.expression_rows
        self.files[self.files.Key(file_id)] = self.files.Leaf(first, count)
        return file_id

    # --- what it costs ------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """Files with rows, rows used of the capacity, trie entries, and the BPF memory they take: the
        rows array whole (preallocated), the trie's entries as allocated."""
        with self._lock:
            return {"files": self.next_file - 1, "rows": self.used, "rows_capacity": self.capacity,
                    "expression_rows": self.expression_rows, "mapping_entries": self.entries,
                    "table_bytes": self.capacity * ROW.size + self.file_capacity * 8
                    + self.entries * LPM_ENTRY_BYTES}
