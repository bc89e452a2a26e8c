"""A cache bounded by entry count and by bytes, least recently used evicted first.

The stack libraries keep one parsed table per object file (symbols, CFI rows); a long profiling run
over many processes would otherwise keep every library it ever saw.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class BoundedCache:
    def __init__(self, max_items: int = 256, max_bytes: int = 256 << 20) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._entries[key] = (value, nbytes)
        self.bytes += nbytes
        # the newest entry stays even when it alone exceeds max_bytes: the caller is using it now
        while len(self._entries) > 1 and (len(self._entries) > self.max_items or self.bytes > self.max_bytes):
            _, (_, size) = self._entries.popitem(last=False)
            self.bytes -= size
            self.evictions += 1
