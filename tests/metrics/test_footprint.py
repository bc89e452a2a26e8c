"""bcctool.footprint against the kernel's own account of a metric process's memory (/proc/PID/smaps)."""

import subprocess
import textwrap

import pytest
from helpers import PYTHON, MetricProcess

import config
from bcctool import footprint

SMAPS = """\
7f0000000000-7f0000100000 r--p 00000000 fe:01 11 /made-up/libLLVM-14.so.1
Rss:                1024 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 r-xp 00100000 fe:01 11 /made-up/libLLVM-14.so.1
Anonymous:             0 kB
7f0000200000-7f0000300000 r--p 00200000 fe:01 11 /made-up/libLLVM-14.so.1
Anonymous:           640 kB
7f0000300000-7f0000310000 rw-p 00300000 fe:01 11 /made-up/libLLVM-14.so.1
Anonymous:             0 kB
7f0000400000-7f0000500000 r-xp 00000000 fe:01 12 /made-up/libclang-cpp.so.14
Anonymous:             0 kB
7f0000600000-7f0000700000 r-xp 00000000 fe:01 13 /usr/lib/x86_64-linux-gnu/libbcc.so.0.26.0
Anonymous:             0 kB
7f0000800000-7f0000900000 rw-p 00000000 00:00 0
Anonymous:          1024 kB
"""


def test_only_the_compilers_clean_read_only_mappings_are_chosen(tmp_path):
    smaps = tmp_path / "smaps"
    smaps.write_text(SMAPS)
    # not the relocated (copied-on-write) read-only data, not a writable mapping, not libbcc itself,
    # whose code reads the maps all run long
    assert footprint.compiler_mappings(str(smaps)) == [
        (0x7F0000000000, 0x7F0000100000, "r--p"), (0x7F0000100000, 0x7F0000200000, "r-xp"),
        (0x7F0000400000, 0x7F0000500000, "r-xp")]
    # the relocated data (private pages) is only chosen where the library's dynamic section can be
    # found and kept out: not in these made-up files
    assert footprint.compiler_mappings(str(smaps), private=True) == []


@pytest.mark.bpf
def test_stashed_compiler_data_leaves_dlopen_working_and_comes_back_whole():
    code = textwrap.dedent("""
        import ctypes, sys
        from bcc import BPF
        from bcctool import footprint
        b = BPF(text=b"int x(void *ctx) { return 0; }")
        before = {m: ctypes.string_at(m[0], m[1] - m[0]) for m in footprint.compiler_mappings(private=True)}
        assert before and footprint.stash_compiler_data() > 5_000_000
        import _bz2, _lzma, getpass  # extension modules: the loader reads the compiler's dynamic sections
        ctypes.CDLL("libm.so.6")
        footprint.restore_compiler_data()
        assert all(ctypes.string_at(m[0], m[1] - m[0]) == data for m, data in before.items())
        BPF(text=b"int y(void *ctx) { return 0; }")  # the compiler runs again
        print("ok")
    """)
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, cwd=config.ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def _memory_after_load(monkeypatch, keep: bool) -> tuple[int, int]:
    """(Private_Dirty kB of the whole process, Rss kB of its compiler mappings) once tcpconnlat has
    printed its first interval; it must then stop cleanly (exit 0: the compiler's data was put back
    before BCC's cleanup ran the compiler's destructors)."""
    if keep:
        monkeypatch.setenv("BCCTOOL_KEEP_COMPILER_MEMORY", "1")
    else:
        monkeypatch.delenv("BCCTOOL_KEEP_COMPILER_MEMORY", raising=False)
    tool = MetricProcess("tcpconnlat", "0.2")
    try:
        tool.wait_meta()
        tool.read_until(lambda r: r["kind"] == "summary" and r["interval"] >= 2)
        private_dirty = compiler_rss = 0
        in_compiler = False
        with open(f"/proc/{tool.proc.pid}/smaps") as f:
            for line in f:
                fields = line.split()
                if "-" in fields[0] and not fields[0].endswith(":"):
                    in_compiler = any(lib in line for lib in footprint.COMPILER_LIBS)
                elif fields[0] == "Private_Dirty:":
                    private_dirty += int(fields[1])
                elif fields[0] == "Rss:" and in_compiler:
                    compiler_rss += int(fields[1])
    finally:
        tool.stop()
    assert tool.proc.returncode == 0, tool.stderr
    return private_dirty, compiler_rss


@pytest.mark.bpf
def test_a_loaded_metric_gives_the_compilers_memory_back(monkeypatch):
    kept_dirty, kept_compiler = _memory_after_load(monkeypatch, keep=True)
    dirty, compiler = _memory_after_load(monkeypatch, keep=False)
    print({"kept": (kept_dirty, kept_compiler), "released": (dirty, compiler)})
    # the compiler's freed heap (about 20 MB since its compile no longer reads kallsyms, bcctool.ksymstub;
    # 30 MB before) and its relocated data (10 MB, 1.5 MB compressed) go back; what stays private is
    # Python, the harness, libbcc's own and the tool's
    assert kept_dirty - dirty > 20_000
    assert dirty < 25_000
    # of the compiler's mappings nothing much stays resident
    assert kept_compiler - compiler > 30_000
    assert compiler < 2_000
