"""User-stack unwinding with DWARF CFI (x86-64), from registers and a copy of the top of the stack.

API (nothing here raises on bad input; every loop is bounded):

    unwinder = Unwinder(cache_dir=None, max_objects=64, max_bytes=16 << 20, max_frames=127, use_cfi=True,
                        max_disk_bytes=256 << 20, lazy=True)
    unwinder = Unwinder(cache_dir=default_cache_dir())   # tables kept under the state directory
    result = unwinder.unwind(maps, ip, sp, bp, stack, base=None)
        # maps: procmaps.ProcessMaps (snapshot it early: Symbolizer.snapshot(pid));
        # stack: bytes of user memory from `base` (default sp) upward, e.g. BPF's page-aligned copy
    result = unwinder.unwind_ustack(maps, raw)          # raw: a struct ustack_t (bpf/ustack.h) as bytes
    result.pcs        # [ip, return address, return address, ...] innermost first
    result.outcome    # "complete" | "truncated" | "failed"
    result.reason     # why it stopped, e.g. "outermost frame", "stack copy ended", "no CFI, no frame pointer"
    unwinder.outcomes # Counter of outcomes; unwinder.reasons: Counter of (outcome, reason)

Every pc after the first is a return address: symbolize `pc - 1` to name the call site's function
(symbols.Symbolizer.user(pid, pc - 1)).

Each step finds the mapping of the pc in the snapshot, the object's CFI row for it (cfi.py; kept in
a bounded cache per object: a table saved per build-id under `cache_dir` if there is one, else with
`lazy` each FDE parsed when first needed through the .eh_frame_hdr search table, else the whole
.eh_frame or .debug_frame parsed once and saved under `cache_dir`), and
computes the caller's sp (the CFA), return address and bp from the stack copy. Where no CFI covers a
pc, the frame pointer chain is followed if bp points into the copy. It ends:
  complete   the return-address rule is undefined (_start, clone), or the return address is 0 (the
             end of a frame-pointer chain);
  truncated  a value the next step needs lies beyond the end of the copy, or max_frames was reached;
  failed     no mapping, no CFI and no usable frame pointer, a CFA expression it cannot evaluate,
             or a step that does not move up the stack (garbage).
"""

from __future__ import annotations

import os
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

from .cfi import (
    CFA_BP,
    CFA_PLT,
    CFA_SP,
    SAME,
    UNDEFINED,
    UNKNOWN,
    CfiTable,
    LazyCfiTable,
    cache_name,
    read_lazy_table,
    read_table,
)
from .elfimage import ELFFile, ElfInfo, debug_file_for, load_per_file, read_info, with_elf
from .lrucache import BoundedCache
from .procmaps import Mapping, ProcessMaps

__all__ = ["COMPLETE", "FAILED", "TRUNCATED", "Unwinder", "Unwound", "default_cache_dir"]

COMPLETE, TRUNCATED, FAILED = "complete", "truncated", "failed"
_U64 = struct.Struct("<Q")
# bpf/ustack.h's struct ustack_t: ip, sp, bp, base (the user address of stack[0]), size, err, stack[]
USTACK_HEADER = struct.Struct("<QQQQIi")
_UNSET = object()
_MISSING, _NO_MAPPING, _NO_CFI = object(), object(), object()
_NOT_SAVED = frozenset((SAME, UNDEFINED, UNKNOWN))  # return-address rules that give no place to read it from
_MAX_FRAME_SPAN = 8 << 20  # a frame pointer further above sp than a default stack is garbage


@dataclass
class Unwound:
    pcs: list[int] = field(default_factory=list)
    outcome: str = FAILED
    reason: str = ""


class _End(Exception):  # noqa: N818 - not an error: how a step says the walk is over (once per walk)
    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


def _frame_pointer_step(row: object, stack: bytes, base: int, limit: int, sp: int, bp: int,
                        bp_known: bool) -> tuple[int, int, int]:
    """No CFI for this pc: the frame-pointer chain, if bp points into the copy (stack[0] at base, up to
    limit) above sp; (return address, the caller's sp and bp)."""
    if row is _NO_MAPPING:
        raise _End(FAILED, "pc in no executable mapping")
    if not bp_known or not sp <= bp < sp + _MAX_FRAME_SPAN:
        raise _End(FAILED, "no CFI, no frame pointer")
    if bp + 16 > limit:
        raise _End(TRUNCATED, "stack copy ended")
    return _U64.unpack_from(stack, bp + 8 - base)[0], bp + 16, _U64.unpack_from(stack, bp - base)[0]


def _cfa_otherwise(kind: int, off: int, ip: int, sp: int, bp: int, bp_known: bool) -> int:
    """A CFA not at an offset from sp: from bp, or a PLT entry's expression."""
    if kind == CFA_BP:
        if not bp_known:
            raise _End(FAILED, "CFA from a frame pointer not recovered")
        return bp + off
    if kind == CFA_PLT:
        return sp + 8 + (8 if (ip & 15) >= off else 0)
    raise _End(FAILED, "CFA expression")


def _no_return_address(pcs: list[int], rule: int) -> Unwound:
    """The walk's end where the return address has no saved place: the outermost frame, or a rule it
    cannot follow."""
    if rule == UNDEFINED:
        return Unwound(pcs, COMPLETE, "outermost frame")
    return Unwound(pcs, FAILED, "return address rule")


@dataclass
class _Object:
    info: ElfInfo
    table: CfiTable | LazyCfiTable
    # per mapping start: (start - offset_of_segment + vaddr_of_segment) makes pc -> vaddr one subtraction
    biases: dict[tuple[int, int], int | None] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return self.table.nbytes


def default_cache_dir() -> str | None:
    """Where parsed CFI tables are kept between runs: <state directory>/cfi (client/statedir.py), or None
    (memory only) when the state directory cannot be had."""
    try:
        from client.statedir import state_dir  # noqa: PLC0415 - the project root is on a metric's sys.path

        path = os.path.join(state_dir(), "cfi")
        os.makedirs(path, exist_ok=True)
        return path
    except (ImportError, OSError):
        return None


def prune_cache(directory: str, max_bytes: int) -> None:
    """Delete the least recently written tables until the directory holds at most max_bytes."""
    try:
        entries = []
        for name in os.listdir(directory):
            if name.endswith((".cfi", ".sdt")):  # unwind.py's tables, stackdeltas.py's rows
                st = os.stat(os.path.join(directory, name))
                entries.append((st.st_mtime, st.st_size, name))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= max_bytes:
            break
        try:
            os.unlink(os.path.join(directory, name))
            total -= size
        except OSError:
            pass


class Unwinder:
    def __init__(
        self,
        cache_dir: str | None = None,
        max_objects: int = 64,
        max_bytes: int = 16 << 20,  # a lazy table counts 0.3 MB of parsed FDEs plus 8 bytes per function
        max_frames: int = 127,
        use_cfi: bool = True,
        max_disk_bytes: int = 256 << 20,
        lazy: bool = True,
    ) -> None:
        self.cache_dir = cache_dir
        self.lazy = lazy  # objects with an .eh_frame_hdr: parse each FDE when first looked up
        self.max_disk_bytes = max_disk_bytes  # the cache directory's bound: oldest tables go first
        self.use_cfi = use_cfi  # False: frame pointers only, what BPF's own stack walk does
        self.max_frames = max_frames
        self.objects = BoundedCache(max_objects, max_bytes)
        self.outcomes: Counter[str] = Counter()
        self.reasons: Counter[tuple[str, str]] = Counter()
        self.parse_seconds = 0.0

    # --- the walk ---------------------------------------------------------------------------
    def unwind(
        self, maps: ProcessMaps | None, ip: int, sp: int, bp: int, stack: bytes, base: int | None = None
    ) -> Unwound:
        """Walk from the registers; `stack` holds the user memory from `base` (default: sp) up."""
        return self._count(self._walk(maps, ip, sp, bp, stack, sp if base is None else base))

    def unwind_ustack(self, maps: ProcessMaps | None, raw: bytes | memoryview) -> Unwound:
        """Unwind a `struct ustack_t` (bpf/ustack.h) as the ring buffer hands it over."""
        if len(raw) < USTACK_HEADER.size:
            return self._count(Unwound([], FAILED, "short record"))
        ip, sp, bp, base, size, err = USTACK_HEADER.unpack_from(raw)
        if err == 1:
            return self._count(Unwound([], FAILED, "no user context"))
        stack = bytes(raw[USTACK_HEADER.size : USTACK_HEADER.size + size])
        return self.unwind(maps, ip, sp, bp, stack, base)

    def _count(self, result: Unwound) -> Unwound:
        self.outcomes[result.outcome] += 1
        self.reasons[(result.outcome, result.reason)] += 1
        return result

    def _walk(self, maps: ProcessMaps | None, ip: int, sp: int, bp: int, stack: bytes, base: int) -> Unwound:
        if maps is None:
            return Unwound([ip] if ip else [], FAILED, "no maps (process gone before its first snapshot)")
        if not base <= sp:
            return Unwound([ip], FAILED, "stack copy starts above sp")
        limit = base + len(stack)
        rows = maps.memo("cfi" if self.use_cfi else "fp")  # pc -> row, shared by every sample of the process
        pcs = [ip]
        bp_known = True
        # Per frame of every sample: the usual step (a CFA from sp, the return address and bp saved at
        # offsets from it) stays inline, a call costs more than the step; the rest is in functions that
        # raise _End when the walk is over.
        try:
            for depth in range(self.max_frames):
                lookup = ip if depth == 0 else ip - 1  # a return address is just past its call
                row = rows.get(lookup, _MISSING)
                if row is _MISSING:
                    row = rows[lookup] = self._row_of(maps, lookup)
                if row is _NO_MAPPING or row is _NO_CFI:
                    ra, new_sp, new_bp = _frame_pointer_step(row, stack, base, limit, sp, bp, bp_known)
                else:
                    kind, off, ra_rule, bp_rule = row
                    cfa = sp + off if kind == CFA_SP else _cfa_otherwise(kind, off, ip, sp, bp, bp_known)
                    if ra_rule in _NOT_SAVED:
                        return _no_return_address(pcs, ra_rule)
                    at = cfa + ra_rule
                    if at < sp:
                        return Unwound(pcs, FAILED, "return address below the stack pointer")
                    if at + 8 > limit:
                        return Unwound(pcs, TRUNCATED, "stack copy ended")
                    ra, new_sp, new_bp = _U64.unpack_from(stack, at - base)[0], cfa, bp
                    if bp_rule != SAME:
                        at = cfa + bp_rule
                        bp_known = bp_rule != UNKNOWN and base <= at and at + 8 <= limit
                        if bp_known:
                            new_bp = _U64.unpack_from(stack, at - base)[0]
                if ra == 0:
                    return Unwound(pcs, COMPLETE, "return address 0")
                if new_sp <= sp:
                    return Unwound(pcs, FAILED, "stack pointer did not move up")
                pcs.append(ra)
                ip, sp, bp = ra, new_sp, new_bp
        except _End as end:
            return Unwound(pcs, end.outcome, end.reason)
        return Unwound(pcs, TRUNCATED, "frame limit")

    def _row_of(self, maps: ProcessMaps, pc: int) -> object:
        """The CFI row that covers pc, or _NO_MAPPING / _NO_CFI (kept in the process's memo)."""
        mapping = maps.find(pc)
        if mapping is None:
            return _NO_MAPPING
        return (self._row(mapping, pc) if self.use_cfi else None) or _NO_CFI

    # --- CFI per object -----------------------------------------------------------------------
    def _row(self, mapping: Mapping, pc: int) -> tuple[int, int, int, int] | None:
        obj = self.object_for(mapping)
        if obj is None:
            return None
        bias = obj.biases.get((mapping.start, mapping.offset), _UNSET)
        if bias is _UNSET:
            vaddr = obj.info.vaddr_of(mapping.offset)
            bias = obj.biases[(mapping.start, mapping.offset)] = None if vaddr is None else mapping.start - vaddr
        if bias is None:
            return None
        return obj.table.find(pc - bias)

    def object_for(self, mapping: Mapping) -> _Object | None:
        """The object's CFI table (memory cache, then disk cache, then parsed); None if unreadable."""
        return load_per_file(self.objects, mapping.readable_paths(), lambda path, key: self._load(path, mapping, key))

    def _load(self, path: str, mapping: Mapping, key: tuple) -> _Object | None:
        def read(elf: ELFFile) -> tuple:  # the file opened once: its segments and build-id, then a table
            info = read_info(elf)
            disk = os.path.join(self.cache_dir, cache_name(info, key)) if self.cache_dir else None
            # lazy first: a whole table read back from disk holds every row in memory (libLLVM's: 3 MB)
            table = read_lazy_table(elf) if self.lazy else None  # None: no .eh_frame_hdr
            if table is None and disk:
                table = CfiTable.load(disk)
            return info, disk, table

        opened = with_elf(path, read)
        if opened is None:
            return None
        info, disk, table = opened
        if table is None:
            started = time.perf_counter()
            table = read_table(path, debug_file_for(info, mapping.path, path))
            self.parse_seconds += time.perf_counter() - started
            if table is None:
                return None
            if disk:
                os.makedirs(self.cache_dir, exist_ok=True)
                table.save(disk)
                prune_cache(self.cache_dir, self.max_disk_bytes)
        return _Object(info, table)
