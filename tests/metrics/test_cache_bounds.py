"""The stack libraries' per-object caches stay within their bounds (entries and accounted bytes) while
every library this process maps goes through them, and the accounted bytes are near what Python really
holds (tracemalloc), so a bound in bytes is a bound on memory. No BPF needed."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from bcctool.procmaps import ProcessMaps
from bcctool.symbols import Symbolizer, SymbolTable
from bcctool.unwind import Unwinder


def _file_mappings() -> list:
    snap = ProcessMaps.snapshot(os.getpid())
    assert snap is not None
    seen, out = set(), []
    for m in snap.mappings:
        if m.path.startswith("/") and m.path not in seen:
            seen.add(m.path)
            out.append(m)
    assert len(out) >= 8, "this process maps too few files to exercise eviction"
    return out[:12]  # enough to evict; bigger CFI parses only slow the test


@pytest.mark.parametrize("make, load", [
    (lambda: Symbolizer(max_objects=3, max_bytes=300_000), "object_symbols"),
    (lambda: Unwinder(cache_dir=None, max_objects=3, max_bytes=300_000), "object_for"),
], ids=["symbolizer", "unwinder"])
def test_the_cache_of_objects_honours_its_bounds(make, load) -> None:
    reader = make()
    for m in _file_mappings():
        getattr(reader, load)(m)
        cache = reader.objects
        assert len(cache) <= 3
        assert len(cache) == 1 or cache.bytes <= 300_000
    assert cache.evictions > 0


def test_symbol_table_bytes_are_honest() -> None:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    # the names are made while traced: a table read from an ELF file owns its decoded names
    table = SymbolTable([(0x1000 + 64 * i, 32, f"function_number_{i}") for i in range(20000)])
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert 0.7 * held <= table.nbytes <= 1.5 * held, (held, table.nbytes)


def test_lazy_cfi_table_leaves_eh_frame_in_the_file() -> None:
    """A lazy table holds the search table (8 bytes per FDE) and the FDEs parsed, not a copy of the
    object's .eh_frame (an FDE takes 24 bytes or more there; libLLVM's .eh_frame is 5 MB, which every
    profiling process held); its lookups still find rows, and it counts what it holds."""
    from elftools.elf.elffile import ELFFile

    mapping = max((m for m in _file_mappings() if m.path.endswith(".so") or "python" in m.path),
                  key=lambda m: os.path.getsize(m.path))
    with open(mapping.path, "rb") as f:
        elf = ELFFile(f)
        eh_frame = elf.get_section_by_name(".eh_frame").data_size
        text = elf.get_section_by_name(".text")
        lo, hi = text["sh_addr"], text["sh_addr"] + text["sh_size"]
    unwinder = Unwinder(cache_dir=None)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    table = unwinder.object_for(mapping).table
    loaded = tracemalloc.get_traced_memory()[0] - before
    found = sum(table.find(lo + (hi - lo) * i // 200) is not None for i in range(200))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert found >= 150, found  # most of .text has CFI
    # (+ pyelftools' structs for the parse and the file's read buffer)
    assert loaded <= 8 * len(table) + (128 << 10) and loaded < eh_frame / 2, (loaded, len(table), eh_frame)
    assert held <= table.nbytes, (held, table.nbytes)
