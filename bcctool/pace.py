"""User space's side of bpf/pace.h: how many events (offcpu: blocks; compmem: bytes) one stack walk
stands for on the CPUs now."""

from typing import Any


def largest_divisor(table: Any, base: int) -> int:
    """The largest divisor any CPU draws with (struct pace_t's `every`, per CPU; 0 where no window has
    closed yet, which draws with the base); the base where nothing is paced (table None)."""
    return max([p.every for p in table[table.Key(0)]] + [base]) if table is not None else base
