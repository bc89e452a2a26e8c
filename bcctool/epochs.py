"""Interval epochs (bpf/epoch.h): every event belongs to the interval in which it ends, and an interval is
read only once no BPF program can add to it.

At a cut user space advances `epochs[0]` and waits out an RCU grace period (membarrier): a tracepoint or
perf-event program runs start to end inside an RCU read-side section, so when the grace period is over
every program that read the old epoch has returned, and the old epoch's slot in each map (its parity) is
finished — read and cleared with no writer racing the read. Spans still open at the cut (a block, a
run) are charged up to the cut by the metric from its map of open spans, then `collected` says so; a
span whose program ended it before that read left its part before the cut keyed by (tid, start).

A script begins the first interval with Tool.begin_epochs(), which meta() requires first: an event
that ends once meta is out is the run's."""

import ctypes
import os
import time
from collections.abc import Iterable
from typing import Any

from .maps import all_items, delete_keys, take_all_items

MEMBARRIER_CMD_GLOBAL = 1       # linux/membarrier.h: returns after synchronize_rcu()
SYS_MEMBARRIER = {"x86_64": 324, "aarch64": 283}.get(os.uname().machine, 324)
_libc = ctypes.CDLL(None, use_errno=True)
FALLBACK_WAIT_S = 0.05          # nohz_full kernels refuse the global membarrier: a program runs for us


def grace_period() -> None:
    """Return once every BPF program that was running when this was called has returned."""
    if _libc.syscall(SYS_MEMBARRIER, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0:
        time.sleep(FALLBACK_WAIT_S)


class Epochs:
    """User space's side of `epochs[0]` (struct epoch_t): the epoch being gathered, when it and the one
    before began (bpf_ktime_get_ns, which is CLOCK_MONOTONIC), the last epoch whose open spans are read."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.epoch = 1
        self.began = self.prev_began = time.monotonic_ns()
        self.collected = 0
        self._write()
        grace_period()   # the programs that ran before, with epoch 0 (slot 0), have returned

    def _write(self) -> None:
        self.table[self.table.Key(0)] = self.table.Leaf(self.epoch, self.began, self.prev_began, self.collected)

    def flip(self) -> tuple[int, int, int]:
        """Close the epoch being gathered: (its number, when it began, when it ended). On return no
        program adds to it but those that end a span open at the cut (see collected())."""
        closing, began, now = self.epoch, self.began, time.monotonic_ns()
        self.epoch, self.prev_began, self.began = closing + 1, began, now
        self._write()
        grace_period()
        return closing, began, now

    def collected_open(self, closing: int) -> None:
        """The spans open at the cut that closed `closing` are read: from now on a span that ends charges
        only its part since that cut. On return the closing epoch is finished."""
        self.collected = closing
        self._write()
        grace_period()

    @staticmethod
    def slot(epoch: int) -> int:
        return epoch & 1


def take_slot(table: Any, slot: int) -> list[tuple[Any, Any]]:
    """Read and delete a hash's entries whose key's `slot` is `slot` (a finished epoch's): nothing writes
    them, while the programs add to the other slot's keys meanwhile."""
    items = [(k, v) for k, v in all_items(table) if k.slot == slot]
    delete_keys(table, [k for k, _ in items])
    return items


def take_all(table: Any) -> list[tuple[Any, Any]]:
    """Read and delete every entry of a hash no program writes at the moment (a finished epoch's)."""
    return take_all_items(table)


def take_array_slot(table: Any, slot: int, width: int) -> dict[int, int]:
    """{index: count summed over CPUs} of a per-CPU array's slot-th half (indices slot*width ..), zeros
    left out; the half is zeroed after the read (a finished epoch's: nothing writes it)."""
    out = {}
    zero = table.Leaf()
    for i in range(width):
        key = table.Key(slot * width + i)
        total = sum(table[key])
        if total:
            out[i] = total
            table[key] = zero
    return out


def claim(table: Any, keys: Iterable[Any]) -> list[tuple[Any, Any]]:
    """Take entries atomically (BPF_MAP_LOOKUP_AND_DELETE_ELEM): a program that deletes the same entry
    first owns it instead, so each is handled once, by one side."""
    from bcc.libbcc import lib  # noqa: PLC0415 - only after load(), which needs bcc anyway

    taken = []
    for key in keys:
        leaf = table.Leaf()
        if lib.bpf_lookup_and_delete(table.map_fd, ctypes.byref(key), ctypes.byref(leaf)) == 0:
            taken.append((key, leaf))
    return taken
