"""cacheraw against reads and writes with known page counts. A 64 MiB file on disk, dropped from the
page cache: a child's first full read must be misses (the file's 16,384 pages), the second hits. Then
the child writes a new 16 MiB file: the pages it dirties are what its own /proc/self/io write_bytes
counts (the kernel adds a dirtied folio's size there); rewriting it once clean must be write hits, one
per folio the kernel holds of it (counted just before and after, from /proc/self/pagemap and
/proc/kpageflags: folios split but never merge here), but for any of its pages the kernel dropped from
the cache meanwhile (mincore): those are write misses again."""

import os
import tempfile

import pytest
from helpers import MetricProcess, block_device_dir, headings, human_output, next_line, run_workload

MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
FILE_PAGES = 64 * MIB // PAGE          # 16,384 with 4 KiB pages
WRITE_PAGES = 16 * MIB // PAGE
SMALL_READS = 100
CHILD = f"""
import ctypes, mmap, os, struct, sys
path, out, small = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
def cached_folios(path):
    # (pages, folios) of the file in the page cache: mincore on a shared mapping, then only the cached
    # pages are touched (mapped, never read from disk) and each one's frame flags say whether it is
    # the tail of a larger folio
    size = os.path.getsize(path)
    # O_NOATIME: an access time update would dirty the inode's block now and then, a write hit of this
    # task that no write made (mmap counts as an access on ext4)
    fd = os.open(path, os.O_RDONLY | os.O_NOATIME)
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    os.close(fd)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    pages = -(-size // {PAGE})
    vec = ctypes.create_string_buffer(pages)
    try:
        if libc.mincore(addr, size, vec):
            raise OSError(ctypes.get_errno(), "mincore")
        cached = [i for i in range(pages) if vec.raw[i] & 1]
        for i in cached:
            ctypes.c_char.from_address(addr + i * {PAGE}).value
        with open("/proc/self/pagemap", "rb") as pagemap:
            pagemap.seek(addr // {PAGE} * 8)
            entries = struct.unpack(f"<{{pages}}Q", pagemap.read(pages * 8))
        folios = 0
        with open("/proc/kpageflags", "rb") as kpageflags:
            for i in cached:
                pfn = entries[i] & ((1 << 55) - 1)
                if not entries[i] >> 63 or not pfn:
                    raise OSError(f"page {{i}}: no frame in /proc/self/pagemap (root is needed)")
                kpageflags.seek(pfn * 8)
                folios += not struct.unpack("<Q", kpageflags.read(8))[0] >> 16 & 1    # KPF_COMPOUND_TAIL
    finally:
        libc.munmap(addr, size)
    return len(cached), folios
def write_bytes():
    return int(dict(l.split(": ") for l in open("/proc/self/io").read().splitlines())["write_bytes"])
def read_all(path=path):
    fd = os.open(path, os.O_RDONLY)
    total = 0
    while (chunk := os.read(fd, {MIB})):
        total += len(chunk)
    os.close(fd)
    return total
def write_all(flags):
    before = write_bytes()
    fd = os.open(out, os.O_WRONLY | flags)
    for _ in range(16):
        os.write(fd, b"w" * {MIB})
    os.fsync(fd)                     # clean, still cached: the rewrite dirties cached folios; and the
    os.close(fd)                     # metadata blocks block allocation dirties are counted here too
    return write_bytes() - before
sys.stdin.readline()
print("cold", read_all(), flush=True)
sys.stdin.readline()
print("warm", read_all(), flush=True)
sys.stdin.readline()
print("written", write_all(os.O_CREAT | os.O_TRUNC), flush=True)
sys.stdin.readline()
before = cached_folios(out)
written = write_all(0)
print("rewritten", written, *before, cached_folios(out)[1], flush=True)
sys.stdin.readline()
print("small", sum(-(-read_all(small) // 4096) for _ in range({SMALL_READS})), flush=True)
sys.stdin.readline()
"""

pytestmark = pytest.mark.bpf


@pytest.fixture(scope="module")
def phases():
    """{phase: (child's own figure, [its rows in that phase], *its other figures)} from one traced run
    of CHILD."""
    directory, _ = block_device_dir()
    with tempfile.TemporaryDirectory(dir=directory, prefix="cacheraw-test-") as tmp:
        path, out, small = (os.path.join(tmp, name) for name in ("read.bin", "write.bin", "small.bin"))
        with open(small, "wb") as f:
            f.write(os.urandom(10 * 1024))      # 3 pages, read with 1 MiB reads
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        for _ in range(64):
            os.write(fd, os.urandom(MIB))
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)    # clean pages: dropped from the cache
        os.close(fd)
        child = run_workload(CHILD, path, out, small)
        tool = MetricProcess("cacheraw", "0.5", "-p", str(child.pid))
        results = {}
        try:
            tool.wait_meta()
            start = 0
            for _ in range(5):
                name, figure, *more = next_line(child).split()
                # the phase ended in interval `now` + 1 at the latest; two more keep late events and
                # the read-hit carry inside it
                now = tool.drain()
                end = tool.read_until(lambda r, n=now: r["kind"] == "summary" and r["interval"] >= n + 3)["interval"]
                rows = [r for r in tool.of_kind("row") if start < r["interval"] <= end and r["pid"] == child.pid]
                results[name] = (int(figure), rows, *map(int, more))
                start = end
            status, _ = tool.stop()
            assert status == 0, tool.stderr
        finally:
            tool.kill()
            child.stdin.close()
            child.wait()
        results["records"] = tool.records
    return results


def total(rows: list[dict], field: str) -> int:
    return sum(r[field] for r in rows)


def ratio(rows: list[dict]) -> float:
    hits, misses = total(rows, "read_hit_pages"), total(rows, "read_miss_pages")
    return 100.0 * hits / (hits + misses)


def test_cold_read_is_misses(phases):
    size, rows = phases["cold"]
    assert size == FILE_PAGES * PAGE
    misses, hits = total(rows, "read_miss_pages"), total(rows, "read_hit_pages")
    print(f"cold: misses {misses} hits {hits} of {FILE_PAGES} pages, hit {ratio(rows):.2f}%")
    assert abs(misses - FILE_PAGES) <= 0.05 * FILE_PAGES, misses
    assert ratio(rows) < 10.0


def test_warm_read_is_hits(phases):
    _, rows = phases["warm"]
    misses, hits = total(rows, "read_miss_pages"), total(rows, "read_hit_pages")
    print(f"warm: hits {hits} misses {misses} of {FILE_PAGES} pages, hit {ratio(rows):.2f}%")
    assert abs(hits - FILE_PAGES) <= 0.10 * FILE_PAGES, hits
    assert ratio(rows) > 90.0


def test_new_file_write_dirties_what_proc_io_counts(phases):
    write_bytes, rows = phases["written"]
    io_pages = write_bytes // PAGE      # the kernel adds each folio the task dirties here
    miss_pages, misses, hits = (total(rows, f) for f in ("write_miss_pages", "write_miss_folios", "write_hit_folios"))
    print(f"write: {total(rows, 'dirtied_folios')} folios dirtied ({misses} allocated by the write = {miss_pages} "
          f"pages, {hits} already cached); /proc/self/io {io_pages} pages; {WRITE_PAGES} pages written")
    assert io_pages >= WRITE_PAGES
    assert abs(miss_pages - WRITE_PAGES) <= 0.02 * WRITE_PAGES and miss_pages <= io_pages
    # folios of one page up to 2 MiB: between 8 and 4,096 of them for 16 MiB
    assert WRITE_PAGES // 512 <= misses <= WRITE_PAGES
    # anything else it dirtied (a metadata block now and then) is at least a page that /proc counted too
    assert hits <= io_pages - miss_pages
    assert total(rows, "dirtied_folios") == misses + hits


def test_rewrite_of_clean_cached_file_is_write_hits(phases):
    write_bytes, rows, resident, folios_before, folios_after = phases["rewritten"]
    io_pages = write_bytes // PAGE
    extra = io_pages - WRITE_PAGES      # a metadata block dirtied now and then
    hits, misses = total(rows, "write_hit_folios"), total(rows, "write_miss_folios")
    miss_pages = total(rows, "write_miss_pages")
    print(f"rewrite: {hits} write hits, {misses} write misses = {miss_pages} pages; before it {resident} of "
          f"{WRITE_PAGES} pages cached in {folios_before} folios, after it {folios_after} folios; "
          f"/proc/self/io {io_pages} pages")
    assert io_pages >= WRITE_PAGES and resident <= WRITE_PAGES
    # what the kernel dropped since the first write is allocated again: misses, page for page
    absent = WRITE_PAGES - resident
    assert absent <= miss_pages <= absent + extra
    # every folio cached before it is dirtied again, a hit; each folio dirtied is one of those after it
    # (or a piece of one, had the kernel split it meanwhile) or a metadata block
    assert folios_before <= hits and hits + misses <= folios_after + extra
    if absent == 0:
        assert 100.0 * hits / (hits + misses) > 90.0


def test_reads_past_the_end_of_a_file_count_only_its_pages(phases):
    pages, rows = phases["small"]       # 100 reads of a 3-page file, each asking for 256 pages
    read = total(rows, "read_pages")
    print(f"small: {read} pages read ({total(rows, 'read_hit_pages')} hits), {pages} in the file's reads")
    assert pages == 3 * SMALL_READS
    assert pages <= read <= pages * 1.05


def test_summaries_carry_meminfo(phases):
    summaries = [r for r in phases["records"] if r["kind"] == "summary"]
    assert summaries and all(s["cached_bytes"] > 0 and s["buffers_bytes"] >= 0 for s in summaries)
    with open("/proc/meminfo") as f:
        total_ram = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    assert all(s["cached_bytes"] + s["buffers_bytes"] < total_ram for s in summaries)


def test_human_output_has_columns():
    out = human_output("cacheraw", "0.3", "2")
    assert "Buffers " in out and "Cached " in out
    assert headings(out, "PID") == ["PID", "UID", "Command", "Read hits (pages)", "Read misses (pages)", "Read hit (%)",
                                    "Write hits (folios)", "Write misses (folios)", "Dirtied (folios)", "Write hit (%)"]
