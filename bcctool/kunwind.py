"""User space's side of the kernel's unwinder (bpf/kunwind.h): each met process's executable mappings in
ku_maps (tgid -> its mappings sorted by address, each a file id and load bias), and each file's
stack-delta rows (stackdeltas.py) in ku_rows / ku_files, loaded when BPF asks for them on ku_events.

    tables = KernelTables(bpf, cache_dir=None, say=print, program_type=None)
                               # program_type: ku_walk_more's (a tail call keeps its caller's type):
                               # None for a perf event's (cpuprofile), BPF.TRACEPOINT for compmem's
    tables.meet(tgid, rows=False)   # read /proc/PID/maps, put its mappings in ku_maps (rows=True: and load
                                    # every file's rows now); True when done
    tables.on_event(raw)       # a struct ku_event_t from ku_events (RingReader's callback): meet a process,
                               # or load the rows of a file a walk met
    tables.close()             # the run is ending: events are ignored from now on
    tables.forget_gone(alive)  # the mappings of processes that have exited out of ku_maps (alive:
                               # the processes now, taskinfo.processes())
    tables.stats()             # files loaded, rows (used, capacity), processes, bytes of BPF map memory

    tables, reader = tracepoint_tables(bpf, cache_dir, say, pid=None)   # compmem's and offcpu's: the
                               # tables of tracepoint programs, a pid's loaded now, events read on a thread
    stop_tables(tables, reader)   # at the end of the run

A file gets its id when a process that maps it is met; its rows are built (or read from the disk cache)
only when a walk meets one of its pcs, so only the files on sampled stacks take rows (a python process
that imported bcc maps libLLVM: a million rows, never on a sampled stack). Rows are appended to one
array mmap'ed from the BPF map (BPF_F_MMAPABLE): no syscall per row. A file with no CFI, vaddrs past
4 GiB, or rows that do not fit what is left is marked NONE: the kernel walks it by frame pointers (said
once through `say` when the rows run out). Rows stay until the end of the run; mappings go with their
process (KU_PROC_MAPPINGS at most: the rest, by address, are walked as unmapped). Events run on a
reader thread while the main thread calls forget_gone(): a lock guards the bookkeeping of processes.
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .elfimage import ElfInfo, debug_file_for, file_key, read_info, with_elf
from .procmaps import Mapping, ProcessMaps
from .stackdeltas import ROW, stack_deltas

KU_PENDING, KU_READY, KU_STALE = range(3)  # ku_procs' states (bpf/kunwind.h)
FILE_NEW, FILE_ASKED, FILE_LOADED, FILE_NONE = range(4)  # ku_files' states
EVENT = struct.Struct("<IIII")  # struct ku_event_t: tgid, state, file, pad
MAX_FILE_ROWS = (1 << 20) - 1  # the kernel's binary search takes 20 steps (KU_SEARCH)


@dataclass
class _File:
    id: int
    path: str              # where it was readable when first met
    mapping_path: str      # as the process named it (where its debug file is looked for)
    key: tuple
    info: ElfInfo
    state: int = FILE_NEW


class KernelTables:
    def __init__(self, bpf: Any, cache_dir: str | None = None, say: Callable[[str], None] = print,
                 program_type: int | None = None) -> None:
        from bcc import BPF  # noqa: PLC0415 - importable once bpf is loaded

        # the walk goes on in a tail call to ku_walk_more, which must be in place before the first walk
        program_type = BPF.PERF_EVENT if program_type is None else program_type
        bpf["ku_progs"][0] = bpf.load_func("ku_walk_more", program_type).fd
        self.maps, self.files, self.procs = bpf["ku_maps"], bpf["ku_files"], bpf["ku_procs"]
        rows = bpf["ku_rows"]
        self.capacity = rows.max_entries
        self.file_capacity = self.files.max_entries
        self._rows = mmap.mmap(rows.map_fd, (self.capacity * ROW.size + mmap.PAGESIZE - 1) & -mmap.PAGESIZE,
                               mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.cache_dir = cache_dir
        self.say = say
        self.used = 0                           # rows taken
        self.loaded_files = 0
        self.expression_rows = 0                # rows walked by frame pointers, of those loaded
        self.by_key: dict[tuple, _File | None] = {}   # file key -> its file (None: not an ELF)
        self.by_id: dict[int, _File] = {}
        self.loaded: set[int] = set()           # processes whose mappings are in ku_maps
        self.truncated_said = False
        self.full_said = False
        self.closing = False
        self._lock = threading.Lock()

    # --- events -------------------------------------------------------------------------------
    def on_event(self, raw: bytes) -> None:
        tgid, _state, file_id, _ = EVENT.unpack_from(raw)
        if self.closing:
            return
        if file_id:
            self.load_rows(file_id)
        else:
            self.meet(tgid)

    def close(self) -> None:
        """Meet no more processes: the run is ending (a reader stopped drains its ring through on_event)."""
        self.closing = True

    # --- processes ----------------------------------------------------------------------------
    def meet(self, tgid: int, rows: bool = False) -> bool:
        """Put the executable mappings of tgid in ku_maps (again, after an exec or a dlopen: the old ones
        out first); with `rows`, load its files' rows now. False when it is gone or unreadable."""
        snap = ProcessMaps.snapshot(tgid)
        if snap is None:
            return False
        leaf = self.maps.Leaf()
        kept = snap.mappings[: len(leaf.m)]   # sorted by start
        if len(snap.mappings) > len(kept) and not self.truncated_said:
            self.truncated_said = True
            self.say(f"process {tgid} has {len(snap.mappings)} executable mappings: the kernel's "
                     f"unwinder keeps {len(kept)} (frames above them are counted failed)")
        leaf.count = len(kept)
        for i, mapping in enumerate(kept):   # files met for the first time are read here
            leaf.m[i].start, leaf.m[i].end, leaf.m[i].bias, leaf.m[i].file = self._mapping_fields(mapping, rows)
        snap.close()
        with self._lock:
            try:
                self.maps[self.maps.Key(tgid)] = leaf
            except Exception:  # noqa: BLE001 - BCC raises bare Exception: the map is full
                return False
            self.loaded.add(tgid)
            self.procs[self.procs.Key(tgid)] = self.procs.Leaf(KU_READY)
        return True

    def forget_gone(self, alive: set[int]) -> None:
        """The mappings of every process that has exited out of ku_maps (alive: the processes now,
        taskinfo.processes())."""
        with self._lock:
            for tgid in self.loaded - alive:
                self.loaded.discard(tgid)
                try:
                    del self.maps[self.maps.Key(tgid)]
                except KeyError:
                    pass

    def _mapping_fields(self, mapping: Mapping, rows: bool) -> tuple[int, int, int, int]:
        """(start, end, load bias, file id) of a mapping; file 0: none (frame pointers)."""
        file = self._file(mapping)
        vaddr = file.info.vaddr_of(mapping.offset) if file is not None else None
        if file is None or vaddr is None:
            return mapping.start, mapping.end, 0, 0
        if rows:
            self.load_rows(file.id)
        return mapping.start, mapping.end, (mapping.start - vaddr) & 0xFFFFFFFFFFFFFFFF, file.id

    # --- files --------------------------------------------------------------------------------
    def _file(self, mapping: Mapping) -> _File | None:
        """The mapped file, given an id (its rows not loaded) the first time it is met."""
        for path in mapping.readable_paths():
            key = file_key(path)
            if key is None:
                continue
            if key in self.by_key:
                return self.by_key[key]
            info = with_elf(path, read_info)
            file = None
            if info is not None and len(self.by_id) + 1 < self.file_capacity:
                file = _File(len(self.by_id) + 1, path, mapping.path, key, info)
                self.by_id[file.id] = file
                self.files[self.files.Key(file.id)] = self.files.Leaf(0, 0, FILE_NEW, 0)
            self.by_key[key] = file
            return file
        return None

    def load_rows(self, file_id: int) -> None:
        """The rows of a file into ku_rows (built, or read from the disk cache), once; NONE where it has
        none or they do not fit."""
        file = self.by_id.get(file_id)
        if file is None or file.state in (FILE_LOADED, FILE_NONE):
            return
        deltas = stack_deltas(file.path, file.info, file.key, debug_file_for(file.info, file.mapping_path, file.path),
                              self.cache_dir)
        count = len(deltas) if deltas is not None else 0
        if count and (count > MAX_FILE_ROWS or self.used + count > self.capacity):
            if not self.full_said:
                self.full_said = True
                self.say(f"the kernel's unwind tables are full ({self.used} of {self.capacity} rows): "
                         f"{file.mapping_path} and the files met after it are walked by frame pointers")
            count = 0
        first = self.used
        if count:
            self._rows[first * ROW.size : (first + count) * ROW.size] = deltas.rows
            self.used += count
            self.loaded_files += 1
            self.expression_rows += deltas.expression_rows
        file.state = FILE_LOADED if count else FILE_NONE
        self.files[self.files.Key(file_id)] = self.files.Leaf(first, count, file.state, 0)

    # --- what it costs ------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """Files with rows loaded, rows used of the capacity, processes with mappings, and the BPF memory
        they take: the rows array and the files array whole (preallocated), a value per process."""
        processes = len(self.loaded)
        return {"files": self.loaded_files, "rows": self.used, "rows_capacity": self.capacity,
                "expression_rows": self.expression_rows, "processes": processes,
                "table_bytes": self.capacity * ROW.size + self.file_capacity * 16
                + processes * ctypes.sizeof(self.maps.Leaf)}


def tracepoint_tables(bpf: Any, cache_dir: str | None, say: Callable[[str], None],
                      pid: int | None = None) -> tuple[KernelTables, Any]:
    """The tables of a metric whose tracepoint programs walk user stacks (compmem, offcpu: ku_walk_more is
    one too), with the process traced (-p) met and its rows loaded before its first walk, so that none is
    walked by frame pointers; and the ring reader (started) that meets the processes met for the first
    time, or with a pc in no mapping, on its own thread (a file's rows take up to half a second the first
    time) while BPF walks them by frame pointers."""
    from bcc import BPF  # noqa: PLC0415 - importable once bpf is loaded

    from .ringreader import RingReader  # noqa: PLC0415 - as bcc: only once BPF is loaded

    tables = KernelTables(bpf, cache_dir=cache_dir, say=say, program_type=BPF.TRACEPOINT)
    if pid:
        tables.meet(pid, rows=True)
    reader = RingReader(bpf["ku_events"], tables.on_event, poll_ms=1000)
    reader.start()
    return tables, reader


def stop_tables(tables: KernelTables, reader: Any) -> None:
    """The run is ending: the processes met while stopping would be loaded for nothing."""
    tables.close()
    reader.stop()
