"""Stacks stored once each by 64-bit hash in a BPF hash map (struct ku_stack: depth, outcome, pcs), as
bpf/kuwalk.h stores them, and the samples cpuprofile's -DUSER_KERNEL counts under their hashes.

    stored = StoredStacks(bpf["ustacks"])   # compmem's user stacks
    stored.get(h)              # (depth, outcome, raw bytes of the struct), read from the kernel the first time
    stored.pcs(h)              # its pcs, innermost first (None: no such stack)
    stored.addresses(h)        # the same as the bytes a ring-buffer sample holds
    stored.walked(h)           # as a record's key: Walked(pcs, by_frame_pointers), None for none or gone
    stored.python(h)           # a stored struct pystack_t's bytes (its depth's frames), None for none or gone
    stored.retire(used)        # at a cut: once half the map is known here, those not in `used` deleted
    walk_outcomes(table, first)   # {(outcome, reason): walks} from a per-CPU array counted by outcome
                                  # from index `first` on

    figures = WalkFigures(bpf, tables, stored)   # compmem's and offcpu's user stacks walked in BPF
    user_stacks, kernel_unwind = figures.take(not_stored)   # at a cut: the summary's, for the interval
    walks_line(user_stacks)    # the terminal's line of them

    counted = KernelCounts(bpf, tool.begin_epochs())
    samples = counted.take()   # at a cut: {(tgid, comm, cgid, kernel, user, py): samples} of the interval
                               # just closed: kernel bytes of addresses, user a tuple of pcs, py the raw
                               # struct pystack_t (or None); a stack absent is NO_STACK
    counted.outcomes           # Counter of the user walks' outcomes, per sample (complete, truncated, ...)
    counted.reasons            # Counter of (outcome, reason) per sample

The stacks map is bounded: when half of it holds stacks user space knows, those not used since the last
cut are deleted, and kept here until the next cut has been read (a program that found one just before it
went may still refer to it in what is read next).
"""

from __future__ import annotations

import ctypes
import struct
from collections import Counter
from typing import Any, NamedTuple

from .epochs import Epochs, take_slot
from .maps import RawEntries

NO_STACK = -14   # what the ring-buffer path says for "no stack of that kind" (cpuprofile.py)
LOST = -2        # a stack whose key is in no map any more: counted as lost
# bpf/kunwind.h's outcomes: (outcome, reason)
OUTCOMES = (
    ("complete", "outermost frame"),
    ("complete", "return address 0"),
    ("truncated", "frame limit"),
    ("failed", "pc in no executable mapping"),
    ("failed", "no CFI, no frame pointer"),
    ("failed", "CFA from a frame pointer not recovered"),
    ("failed", "return address below the stack pointer"),
    ("failed", "user memory unreadable"),
    ("failed", "stack pointer did not move up"),
    ("failed", "no user context"),
    ("frame_pointers", "process met for the first time: mappings not loaded yet"),
)
FP_WALK = len(OUTCOMES) - 1   # KU_FP_WALK: the kernel's frame-pointer walk
# bpf/kuwalk.h's ku_counters slots; from KU_OUTCOMES on, walks by outcome
KU_EXPR_FRAMES, KU_PENDING_FRAMES, KU_REUSED, KU_OUTCOMES = 0, 2, 3, 4
HTAB_ELEM_BYTES = 48   # the kernel's struct htab_elem before the key, about


class Walked(NamedTuple):
    """A user stack walked in BPF, as a record's key: its pcs (innermost first; None: lost), and whether
    it was walked by frame pointers (its process's mappings not loaded yet: named as far as the walk stays
    in mapped code, as fp mode names it)."""

    pcs: tuple | None
    by_frame_pointers: bool
    python: bytes | None = None   # the block's CPython frames (a struct pystack_t), offcpu's


class StoredStacks:
    def __init__(self, table: Any) -> None:
        self.stacks = table
        self.capacity = table.max_entries
        self.known: dict[int, tuple] = {}      # hash -> (depth, outcome, raw bytes of the struct)
        self.retired: list[int] = []           # deleted from the map at the last cut, kept until this one's read
        self.stack_reads = 0                   # stacks read from the kernel (each new one once)

    def get(self, h: int) -> tuple | None:
        """(depth, outcome, the struct's bytes) of a stored stack, None for none or one gone."""
        if not h:
            return None
        stack = self.known.get(h)
        if stack is None:
            try:
                leaf = self.stacks[self.stacks.Key(h)]
            except KeyError:
                return None
            self.stack_reads += 1
            stack = self.known[h] = (min(leaf.depth, len(leaf.pcs)), leaf.outcome, bytes(leaf))
        return stack

    def addresses(self, h: int) -> bytes | None:
        """The stack's pcs as the u64 bytes a ring-buffer sample holds them (innermost first); None for
        none or one gone."""
        stack = self.get(h)
        return stack[2][8 : 8 + 8 * stack[0]] if stack is not None else None

    def pcs(self, h: int) -> tuple | None:
        """The stack's pcs, innermost first; None for none or one gone."""
        stack = self.get(h)
        return struct.unpack_from(f"<{stack[0]}Q", stack[2], 8) if stack is not None else None

    def walked(self, h: int) -> Walked | None:
        """The stack as a record's key; None for none or one gone."""
        stack = self.get(h)
        return Walked(self.pcs(h), stack[1] == FP_WALK) if stack is not None else None

    def python(self, h: int) -> bytes | None:
        """A stored Python stack (struct pystack_t, stored as a struct ku_stack): its header and frames."""
        stack = self.get(h)
        return stack[2][: 8 + 16 * stack[0]] if stack is not None else None

    def retire(self, used: set[int]) -> None:
        """Forget what was deleted a cut ago; when half of the map is known here, delete those not used
        in this interval."""
        for h in self.retired:
            if h not in used:
                self.known.pop(h, None)
        self.retired = []
        if len(self.known) < self.capacity // 2:
            return
        self.retired = [h for h in self.known if h not in used]
        for h in self.retired:
            try:
                del self.stacks[self.stacks.Key(h)]
            except KeyError:
                pass

    def stats(self) -> dict[str, int]:
        """Stacks known here (about those in the map), stacks read from the kernel so far, and the bytes
        the map takes for them (allocated as used: a value, its key and the hash table's element)."""
        entry = ctypes.sizeof(self.stacks.Leaf) + 8 + HTAB_ELEM_BYTES
        return {"stacks": len(self.known), "stack_reads": self.stack_reads, "stack_bytes": len(self.known) * entry}


def walk_outcomes(table: Any, first: int = 0) -> Counter[tuple[str, str]]:
    """{(outcome, reason): walks} from a per-CPU array of walks by how they ended (OUTCOMES' order from
    index `first` on)."""
    counts: Counter[tuple[str, str]] = Counter()
    for i, pair in enumerate(OUTCOMES):
        counts[pair] = sum(table[table.Key(first + i)])
    return counts


class WalkFigures:
    """Each interval's figures of the user stacks a metric walks in BPF with kuwalk.h (compmem's and
    offcpu's kernel mode): as the summary's `user_stacks`, walks by how they ended (frame_pointers: a
    process met for the first time, its mappings not loaded yet), the stacks the map had no room for
    (not_stored) and the walks not made because the thread's last one served (reused); as its
    `kernel_unwind`, cpuprofile's: frames walked by frame pointers where the CFI needs a DWARF expression or
    the file's rows were not loaded yet, failed walks by reason, what the tables and the stored stacks
    hold. The BPF side counts since the start; this keeps what it read last."""

    KEYS = ("walks", "complete", "truncated", "failed", "frame_pointers", "not_stored", "reused")

    def __init__(self, bpf: Any, tables: Any, stored: StoredStacks) -> None:
        self.counters = bpf["ku_counters"]
        self.tables, self.stored = tables, stored
        self.seen: dict[str, int] = {}

    def _totals(self, not_stored: int) -> dict[str, int]:
        walks = walk_outcomes(self.counters, KU_OUTCOMES)
        counter = [sum(self.counters[self.counters.Key(i)]) for i in range(KU_REUSED + 1)]
        totals = {"walks": sum(walks.values()), "not_stored": not_stored, "reused": counter[KU_REUSED],
                  "expression_frames": counter[KU_EXPR_FRAMES], "rows_pending_frames": counter[KU_PENDING_FRAMES]}
        for (outcome, reason), n in walks.items():
            totals[outcome] = totals.get(outcome, 0) + n
            if outcome == "failed":
                totals[f"failed: {reason}"] = n
        return totals

    def take(self, not_stored: int) -> tuple[dict[str, int], dict[str, Any]]:
        """The interval's user_stacks and kernel_unwind; not_stored: the stacks the map had no room for
        so far (the metric counts them)."""
        totals = self._totals(not_stored)
        interval = {k: n - self.seen.get(k, 0) for k, n in totals.items()}
        self.seen = totals
        failed = {k.split(": ", 1)[1]: n for k, n in interval.items() if k.startswith("failed: ") and n}
        return ({k: interval.get(k, 0) for k in self.KEYS},
                {"expression_frames": interval["expression_frames"],
                 "rows_pending_frames": interval["rows_pending_frames"],
                 "failed": failed, **self.tables.stats(), **self.stored.stats()})


def walks_line(u: dict[str, int]) -> str:
    """An interval's user_stacks (WalkFigures) as the terminal's line."""
    return (f"(user stacks: {u['walks']} walks, {u['complete']} whole, {u['truncated']} truncated, "
            f"{u['failed']} failed, {u['frame_pointers']} by frame pointers (mappings not loaded yet); "
            f"{u['reused']} reused; {u['not_stored']} not stored, the stack map full)")


class KernelCounts:
    # struct kcount_key_t (bpf/cpuprofile.c): slot, tgid, cgid, the three stacks' hashes, comm
    KEY = struct.Struct("<IIQQQQ16s")
    MAX_MEMO = 16384

    def __init__(self, bpf: Any, epochs: Epochs) -> None:
        self.counts = bpf["kcounts"]
        self.stored = StoredStacks(bpf["stacks"])
        self.epochs = epochs
        self.outcomes: Counter[str] = Counter()
        self.reasons: Counter[tuple[str, str]] = Counter()
        self.raw = RawEntries(self.counts) if self.KEY.size == ctypes.sizeof(self.counts.Key) else None
        # a stack's hash -> what a key holds of it (its content, so the hash always means the same)
        self.kernel_of: dict[int, bytes | int] = {}
        self.user_of: dict[int, tuple] = {}     # -> (the stack as the key holds it, its outcome or None)

    def take(self) -> dict[tuple, int]:
        """The closed interval's counts: {(tgid, comm, cgid, kernel, user, python): samples}."""
        closing, _, _ = self.epochs.flip()
        slot = Epochs.slot(closing)
        raw = self.raw.read() if self.raw is not None else None
        if raw is None:   # no batch ops: BCC's objects, one by one
            entries = [((k.slot, k.tgid, k.cgid, k.kstack, k.ustack, k.pystack, bytes(k.comm)),
                        n if isinstance(n, int) else n.value) for k, n in take_slot(self.counts, slot)]
        else:
            keys, values = raw
            width, entries, closed = self.KEY.size, [], []
            counts = struct.iter_unpack("<Q", values)
            for i, (k, (n,)) in enumerate(zip(self.KEY.iter_unpack(keys), counts, strict=True)):
                if k[0] == slot:   # the other slot's are the open interval's, being counted
                    entries.append((k, n))
                    closed.append(keys[i * width:(i + 1) * width])
            self.raw.delete(b"".join(closed))
        out: dict[tuple, int] = {}
        used: set[int] = set()
        walks: dict[tuple, int] = {}   # (outcome, reason) -> samples
        for (_, tgid, cgid, kh, uh, ph, comm), count in entries:
            used.update((kh, uh, ph))
            user, outcome = self._user(uh)
            if outcome is not None:
                walks[outcome] = walks.get(outcome, 0) + count
            k = (tgid, comm, cgid, self._kernel(kh), user, self.stored.python(ph) if ph else None)
            out[k] = out.get(k, 0) + count
        for outcome, count in walks.items():
            self.outcomes[outcome[0]] += count
            self.reasons[outcome] += count
        self.stored.retire(used)
        return out

    def _kernel(self, h: int) -> bytes | int:
        if not h:
            return NO_STACK
        stack = self.kernel_of.get(h)
        if stack is None:
            stack = self.stored.addresses(h)
            if stack is None:
                return LOST    # not remembered: a later read may find it stored
            self._remember(self.kernel_of, h, stack)
        return stack

    def _user(self, h: int) -> tuple:
        """(the user stack as a key holds it, its walk's (outcome, reason) or None for no walk)."""
        if not h:
            return NO_STACK, None
        known = self.user_of.get(h)
        if known is None:
            found = self.stored.get(h)
            if found is None:
                return LOST, None
            depth, outcome = found[0], found[1]
            stack = struct.unpack_from(f"<{depth}Q", found[2], 8) if depth else 0
            known = (stack, OUTCOMES[outcome] if 0 <= outcome < len(OUTCOMES) else ("failed", "unknown"))
            self._remember(self.user_of, h, known)
        return known

    def _remember(self, memo: dict, h: int, value: Any) -> None:
        if len(memo) >= self.MAX_MEMO:
            memo.clear()
        memo[h] = value

    def stats(self) -> dict[str, int]:
        return self.stored.stats()
