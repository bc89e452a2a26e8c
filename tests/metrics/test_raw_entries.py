"""bcctool.maps.RawEntries reads a real BPF hash as BCC's objects would, byte for byte, and deletes just
the entries asked: the per-interval counts of cpuprofile are read so (bcctool.kstacks.KernelCounts)."""

import subprocess
import textwrap

import pytest
from helpers import PYTHON

import config


@pytest.mark.bpf
def test_raw_entries_match_bccs_items_and_delete_only_the_keys_given():
    code = textwrap.dedent("""
        import ctypes, struct
        from bcc import BPF
        from bcctool.maps import RawEntries
        b = BPF(text=b'''
            struct key_t { u32 slot; u32 tgid; u64 cgid; u64 k; u64 u; u64 p; char comm[16]; };
            BPF_HASH(counts, struct key_t, u64, 4096);
            int x(void *ctx) { return 0; }''')
        counts = b["counts"]
        for i in range(3000):   # more than one batch's bucket walk
            key = counts.Key(i % 2, 1000 + i, i * 7, i << 40, i, 0, b"comm%d" % i)
            counts[key] = counts.Leaf(i * 3)
        raw = RawEntries(counts)
        keys, values = raw.read()
        assert len(keys) == 3000 * ctypes.sizeof(counts.Key) and len(values) == 3000 * 8
        width = ctypes.sizeof(counts.Key)
        got = {keys[i * width:(i + 1) * width]: struct.unpack_from("<Q", values, i * 8)[0] for i in range(3000)}
        assert got == {bytes(k): v.value for k, v in counts.items()}
        odd = b"".join(k for k in got if struct.unpack_from("<I", k)[0] == 1)
        raw.delete(odd)
        left = {(k.slot, k.tgid) for k in counts.keys()}
        assert len(left) == 1500 and all(slot == 0 for slot, _ in left)
        raw.delete(odd)   # gone already: nothing else goes
        assert len(counts) == 1500
        counts.clear()
        assert raw.read() == (b"", b"")
        print("ok")
    """)
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, cwd=config.ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
