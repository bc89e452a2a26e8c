"""Stacks stored once by hash (bpf/kuwalk.h) as user space reads them (bcctool.kstacks.StoredStacks): each
read from the map once; once half the map is known, those nothing used at a read leave the map but stay
known one read more — compmem's thread may take its syscall's stack again after the read that found no
allocation of it (its next allocation of the same syscall), and that allocation is read next."""

import ctypes
import os
import re
import struct

from bcctool.kstacks import (
    FP_WALK,
    KU_EXPR_FRAMES,
    KU_OUTCOMES,
    KU_PENDING_FRAMES,
    KU_REUSED,
    OUTCOMES,
    StoredStacks,
    Walked,
    WalkFigures,
)


class Stack(ctypes.Structure):   # struct ku_stack
    _fields_ = [("depth", ctypes.c_uint32), ("outcome", ctypes.c_int32), ("pcs", ctypes.c_uint64 * 128)]


class FakeHash:
    """The calls StoredStacks makes of a BPF hash of u64 -> struct ku_stack."""

    Key = ctypes.c_uint64
    Leaf = Stack

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.data: dict[int, Stack] = {}
        self.reads = 0

    def store(self, h: int, *pcs: int) -> None:
        self.data[h] = Stack(len(pcs), 0, (ctypes.c_uint64 * 128)(*pcs))

    def __getitem__(self, key):
        self.reads += 1
        return self.data[key.value]

    def __delitem__(self, key) -> None:
        del self.data[key.value]


def test_each_stack_is_read_once_and_its_pcs_are_innermost_first():
    table = FakeHash(8)
    table.store(7, 0x401000, 0x402000, 0x403000)
    stored = StoredStacks(table)
    assert stored.pcs(7) == (0x401000, 0x402000, 0x403000)
    assert stored.get(7)[:2] == (3, 0) and struct.unpack_from("<Q", stored.get(7)[2], 8) == (0x401000,)
    assert table.reads == 1 and stored.stats()["stack_reads"] == 1
    assert stored.get(0) is None and stored.pcs(99) is None   # no stack; one not in the map


def test_unused_stacks_leave_the_map_at_half_full_and_stay_known_one_read():
    table = FakeHash(4)
    table.store(1, 0x1001)
    table.store(2, 0x1002)
    stored = StoredStacks(table)
    stored.get(1)
    stored.get(2)
    stored.retire({1})           # half the map known: 2, used by nothing, leaves it
    assert set(table.data) == {1}
    assert stored.pcs(2) == (0x1002,), "still named at the next read"
    stored.retire({1, 2})        # an allocation made after the last read refers to it: kept
    assert stored.pcs(2) == (0x1002,)
    stored.retire({1})
    stored.retire({1})           # deleted again (gone already), then forgotten a read later
    assert stored.pcs(2) is None and set(table.data) == {1}


def test_below_half_full_nothing_leaves():
    table = FakeHash(8)
    stored = StoredStacks(table)
    for h in (1, 2, 3):
        table.store(h, h)
        stored.get(h)
    stored.retire(set())
    assert set(table.data) == {1, 2, 3}


def test_walked_keys_say_how_the_stack_was_walked():
    table = FakeHash(8)
    table.store(5, 0x401000, 0x402000)
    table.data[6] = Stack(1, FP_WALK, (ctypes.c_uint64 * 128)(0x401000))
    stored = StoredStacks(table)
    assert stored.walked(5) == Walked((0x401000, 0x402000), False)
    assert stored.walked(6) == Walked((0x401000,), True)
    assert stored.walked(99) is None


class FakeCounters:
    """A per-CPU array of u64 (ku_counters) on two CPUs."""

    Key = ctypes.c_uint32

    def __init__(self) -> None:
        self.data = {i: [0, 0] for i in range(KU_OUTCOMES + len(OUTCOMES))}

    def __getitem__(self, key):
        return self.data[key.value]


class FakeTables:
    def stats(self) -> dict:
        return {"files": 2}


def test_walk_figures_are_each_intervals_from_the_counters_slots():
    """ku_counters (bpf/kuwalk.h): [0] expression frames, [2] frames of rows pending, [3] walks reused,
    [4 + outcome] walks by outcome; each interval gets what was added since the last."""
    counters = FakeCounters()
    figures = WalkFigures({"ku_counters": counters}, FakeTables(), StoredStacks(FakeHash(8)))
    counters.data[KU_OUTCOMES + 0] = [3, 2]      # complete: outermost frame
    counters.data[KU_OUTCOMES + 3] = [1, 0]      # failed: pc in no mapping
    counters.data[KU_OUTCOMES + FP_WALK] = [0, 1]
    counters.data[3] = [30, 10]
    counters.data[2] = [4, 0]
    user, unwind = figures.take(not_stored=2)
    assert user == {"walks": 7, "complete": 5, "truncated": 0, "failed": 1, "frame_pointers": 1,
                    "not_stored": 2, "reused": 40}
    assert unwind["failed"] == {"pc in no executable mapping": 1} and unwind["rows_pending_frames"] == 4
    assert unwind["files"] == 2 and unwind["stacks"] == 0
    counters.data[KU_OUTCOMES + 2] = [0, 1]      # truncated
    counters.data[3] = [31, 10]
    user, unwind = figures.take(not_stored=2)
    assert user == {"walks": 1, "complete": 0, "truncated": 1, "failed": 0, "frame_pointers": 0,
                    "not_stored": 0, "reused": 1}
    assert unwind["failed"] == {} and unwind["rows_pending_frames"] == 0


def test_the_counters_slots_are_kuwalk_hs():
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "bpf", "kuwalk.h")).read()
    slots = {name: int(n) for name, n in re.findall(r"#define (KU_[A-Z_]+) (\d+)\b", header)}
    assert (slots["KU_EXPR_FRAMES"], slots["KU_PENDING_FRAMES"], slots["KU_REUSED"], slots["KU_OUTCOMES"]) == (
        KU_EXPR_FRAMES, KU_PENDING_FRAMES, KU_REUSED, KU_OUTCOMES)
