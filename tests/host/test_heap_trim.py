"""heap_trim against the kernel's count of the process's resident memory (/proc/self/status VmRSS)."""

import json
import subprocess
import sys
import textwrap
import threading

import pytest

from host import heap_trim

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

FRAGMENTED_THEN_TRIMMED = textwrap.dedent("""
    import json
    from host import heap_trim
    def rss_kb():
        return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
    # 200 MB in 2 KB blocks (glibc's heap, not mmap, not pymalloc); every 64th stays alive, so no
    # heap can shrink from its top and the free memory stays resident
    blocks = [bytearray(2048) for _ in range(100_000)]
    kept = blocks[::64]
    del blocks
    freed = rss_kb()
    assert heap_trim.trim_now()
    print(json.dumps({"freed": freed, "trimmed": rss_kb(), "kept": len(kept)}))
""")


def test_trim_gives_freed_heap_memory_back():
    out = subprocess.run([sys.executable, "-c", FRAGMENTED_THEN_TRIMMED], capture_output=True, text=True,
                         timeout=60, cwd=heap_trim.__file__.rsplit("/", 2)[0])
    assert out.returncode == 0, out.stderr
    rss = json.loads(out.stdout)
    print(rss)
    # about 200 MB were freed but kept resident; the trim returns almost all of it
    assert rss["freed"] - rss["trimmed"] > 150_000


def test_start_is_one_thread_per_process_and_stops():
    first = heap_trim.start(period_s=0.05)
    assert first is not None and heap_trim.start() is first
    assert sum(t.name == "heap-trim" for t in threading.enumerate()) == 1
    first.set()
    second = heap_trim.start(period_s=0.05)
    assert second is not first
    second.set()
