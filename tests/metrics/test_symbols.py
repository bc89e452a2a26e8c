"""bcctool.symbols against `nm`: a C program compiled here prints where its functions landed; every
address inside a function must come back as that function's name, whatever way its symbols are kept
(.symtab, -g, stripped with a debuglink file, stripped with a build-id debug file, deleted), and as
`module+0xoff` (nm's own address) where nothing names it. No BPF needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from bcctool.procmaps import ProcessMaps
from bcctool.symbols import Symbolizer

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("objcopy") is None, reason="needs gcc, binutils"
)

PROGRAM = r"""
#include <stdio.h>
#include <unistd.h>
#include <sys/mman.h>
static __attribute__((noinline)) int alpha(int x) { return x * 3 + 1; }
__attribute__((noinline)) int beta(int x) { return alpha(x) + 2; }
__attribute__((noinline)) int gamma_fn(int x) { return beta(x) * 5; }
int main(void) {
    void *jit = mmap(0, 65536, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("alpha=%p beta=%p gamma_fn=%p main=%p jit=%p\n", (void *)alpha, (void *)beta, (void *)gamma_fn,
           (void *)main, jit);
    fflush(stdout);
    char c = 0;
    if (read(0, &c, 1) < 0) return 1;  /* wait until the test is done */
    return gamma_fn(c) & 1;
}
"""
FUNCS = ("alpha", "beta", "gamma_fn", "main")


def nm_table(path: str) -> dict[str, tuple[int, int]]:
    """name -> (address, size) from `nm -S`, the truth the symbolizer is judged against."""
    out = subprocess.run(["nm", "-S", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            table[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return table


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("symbols")
    src = d / "prog.c"
    src.write_text(PROGRAM)
    out = {}
    for name, flags in (("plain", ["-O2"]), ("debug", ["-O2", "-g"])):
        out[name] = str(d / name)
        subprocess.run(["gcc", *flags, "-Wl,--build-id", "-o", out[name], str(src)], check=True)
    # stripped, with its symbols in a .debug file beside it named by .gnu_debuglink
    linked = d / "linked"
    linked.mkdir()
    out["linked"] = str(linked / "prog")
    shutil.copy(out["debug"], out["linked"])
    subprocess.run(["objcopy", "--only-keep-debug", out["linked"], out["linked"] + ".dbg"], check=True)
    subprocess.run(["objcopy", "--strip-all", f"--add-gnu-debuglink={out['linked']}.dbg", out["linked"]], check=True)
    # stripped, with its symbols under <debug root>/.build-id/xx/yyyy.debug
    out["buildid"] = str(d / "buildid")
    subprocess.run(["objcopy", "--strip-all", out["debug"], out["buildid"]], check=True)
    build_id = subprocess.run(["readelf", "-n", out["buildid"]], capture_output=True, text=True).stdout
    build_id = build_id.split("Build ID:")[1].split()[0]
    debug_root = d / "debugroot"
    (debug_root / ".build-id" / build_id[:2]).mkdir(parents=True)
    subprocess.run(
        [
            "objcopy",
            "--only-keep-debug",
            out["debug"],
            str(debug_root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"),
        ],
        check=True,
    )
    out["debug_root"] = str(debug_root)
    out["stripped"] = str(d / "stripped")  # nothing left to name its functions
    subprocess.run(["objcopy", "--strip-all", out["plain"], out["stripped"]], check=True)
    return out


class Running:
    """The program running, waiting on stdin; `where[name]` is the function's run-time address."""

    def __init__(self, path: str) -> None:
        self.child = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.child.stdout.readline()
        self.where = {k: int(v, 16) for k, v in (item.split("=") for item in line.split())}
        self.pid = self.child.pid

    def end(self) -> None:
        self.child.stdin.write("x")
        self.child.stdin.close()
        self.child.wait(timeout=10)


@pytest.fixture
def running(request):
    procs = []

    def start(path: str) -> Running:
        procs.append(Running(path))
        return procs[-1]

    yield start
    for p in procs:
        if p.child.poll() is None:
            p.end()


def assert_named(sym: Symbolizer, proc: Running, truth: dict[str, tuple[int, int]], module: str) -> None:
    for name in FUNCS:
        addr, size = truth[name]
        bias = proc.where[name] - addr
        for off in sorted({0, size // 2, size - 1}):
            frame = sym.user(proc.pid, addr + bias + off)
            assert (frame.name, frame.module, frame.offset) == (name, module, off)


@pytest.mark.parametrize("build", ["plain", "debug"])
def test_symtab_names_match_nm(builds, running, build):
    proc = running(builds[build])
    assert_named(Symbolizer(), proc, nm_table(builds[build]), build)


def test_stripped_binary_found_through_debuglink(builds, running):
    proc = running(builds["linked"])
    assert nm_table(builds["linked"]) == {}  # really stripped
    assert_named(Symbolizer(), proc, nm_table(builds["debug"]), "prog")


def test_stripped_binary_found_through_build_id(builds, running):
    proc = running(builds["buildid"])
    assert_named(Symbolizer(debug_root=builds["debug_root"]), proc, nm_table(builds["debug"]), "buildid")


def addr2line(path: str, addrs: list[int]) -> list[str | None]:
    """binutils' answer for each ELF address: "file.c:LINE" (base name, no discriminator), None for ??."""
    out = subprocess.run(["addr2line", "-e", path, *map(hex, addrs)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    found = []
    for line in out:
        where = line.split(" (discriminator")[0]
        file, _, number = where.rpartition(":")
        found.append(None if file.startswith("??") or not number.isdigit() or number == "0"
                     else f"{os.path.basename(file)}:{number}")
    return found


@pytest.mark.parametrize("build", ["debug", "linked", "buildid"])
def test_source_lines_match_addr2line_wherever_the_debug_info_is(builds, running, build):
    """Symbolizer(lines=True): every address of every function named "function (prog.c:LINE)" as
    addr2line names it in the -g build, whether the line tables are in the binary, in its debuglink
    file or in a build-id debug file."""
    proc = running(builds[build])
    truth = nm_table(builds["debug"])
    sym = Symbolizer(lines=True, debug_root=builds["debug_root"])
    with_lines = 0
    for name in FUNCS:
        addr, size = truth[name]
        bias = proc.where[name] - addr
        expected = addr2line(builds["debug"], [addr + off for off in range(size)])
        for off, where in enumerate(expected):
            frame = sym.user(proc.pid, addr + bias + off)
            assert frame.name == (f"{name} ({where})" if where else name), hex(addr + off)
            with_lines += where is not None
    assert with_lines > 20


def test_source_lines_without_aranges_read_the_small_table_whole(builds, running, tmp_path):
    """No .debug_aranges to find a unit by (clang leaves it out): a small .debug_line is read whole."""
    bare = str(tmp_path / "bare")
    subprocess.run(["objcopy", "--remove-section=.debug_aranges", builds["debug"], bare], check=True)
    assert ".debug_aranges" not in subprocess.run(["readelf", "-S", bare], capture_output=True, text=True).stdout
    proc = running(bare)
    truth = nm_table(builds["debug"])
    sym = Symbolizer(lines=True)
    addr, size = truth["gamma_fn"]
    (where,) = addr2line(builds["debug"], [addr])
    assert where and sym.user(proc.pid, proc.where["gamma_fn"]).name == f"gamma_fn ({where})"


def test_no_line_tables_give_plain_names(builds, running):
    proc = running(builds["plain"])
    assert_named(Symbolizer(lines=True), proc, nm_table(builds["plain"]), "plain")


def test_no_symbols_gives_module_plus_elf_address(builds, running):
    proc = running(builds["stripped"])
    truth = nm_table(builds["plain"])
    sym = Symbolizer()
    for name in ("alpha", "beta"):
        addr, size = truth[name]
        frame = sym.user(proc.pid, proc.where[name] + 1)
        assert frame.name == f"stripped+0x{addr + 1:x}"  # addr2line -e stripped 0x... names this spot
        assert frame.module == "stripped"


def test_deleted_binary_and_exited_process(builds, running, tmp_path):
    copy = str(tmp_path / "gone")
    shutil.copy(builds["plain"], copy)
    proc = running(copy)
    os.unlink(copy)
    sym = Symbolizer()
    snap = sym.snapshot(proc.pid)
    assert any(m.deleted and m.module == "gone" for m in snap.mappings)
    proc.end()  # the process has gone; its snapshot still names its code
    assert not os.path.exists(f"/proc/{proc.pid}")
    assert_named(sym, proc, nm_table(builds["plain"]), "gone")


def test_a_path_that_is_not_utf8_still_names_its_code(builds, running, tmp_path):
    # a process run from such a path raised UnicodeDecodeError out of every metric that reads maps
    directory = os.path.join(os.fsencode(tmp_path), b"bin\xff")
    os.mkdir(directory)
    copy = os.path.join(directory, b"prog\xfe")
    shutil.copy(builds["plain"], copy)
    proc = running(os.fsdecode(copy))
    sym = Symbolizer()
    snap = sym.snapshot(proc.pid)
    assert any(os.fsencode(m.path) == copy for m in snap.mappings)   # the path as it opens
    assert_named(sym, proc, nm_table(builds["plain"]), "prog\ufffd")  # the name as it is shown
    json.dumps(sym.user(proc.pid, proc.where["alpha"]).module, ensure_ascii=False).encode()


def test_exited_process_resolves_from_early_snapshot(builds, running):
    proc = running(builds["plain"])
    sym = Symbolizer()
    sym.snapshot(proc.pid)
    proc.end()
    assert_named(sym, proc, nm_table(builds["plain"]), "plain")


def test_perf_map_names_jit_code_and_counts_garbage(builds, running):
    proc = running(builds["plain"])
    jit = proc.where["jit"]
    path = f"/tmp/perf-{proc.pid}.map"
    lines = [
        f"{jit:x} 40 LazyCompile:~fib /app/fib.js:1",
        "this is not a map line",
        f"{jit + 0x40:x} zz bad_size",
        "",
        f"{jit + 0x100:x} 100 py::work:/app/work.py",
        f"{jit + 0x300:x} 0 empty_size",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        sym = Symbolizer()
        fib = sym.user(proc.pid, jit + 0x10)
        assert (fib.name, fib.offset) == ("LazyCompile:~fib /app/fib.js:1", 0x10)
        assert sym.user(proc.pid, jit + 0x1FF).name == "py::work:/app/work.py"
        hole = sym.user(proc.pid, jit + 0x80)  # inside the anonymous mapping, named by no line
        assert hole.name.endswith("+0x80") and hole.module == "[anon]"
        assert sym.stats()["perf_map_garbage"] == 4
    finally:
        os.unlink(path)


def test_cache_bounded_by_count_and_bytes(builds, running):
    procs = [running(builds[b]) for b in ("plain", "debug", "linked")]
    truths = [nm_table(builds["plain"]), nm_table(builds["debug"]), nm_table(builds["debug"])]
    sym = Symbolizer(max_objects=2)
    for _ in range(2):  # round two finds each table evicted by the others and loads it again
        for proc, truth, module in zip(procs, truths, ("plain", "debug", "prog"), strict=True):
            sym.forget(proc.pid)  # and its snapshot, which remembers the frames it has named
            assert_named(sym, proc, truth, module)
            assert sym.stats()["cached_objects"] <= 2
    assert sym.stats()["cache_evictions"] >= 4
    tiny = Symbolizer(max_bytes=1)  # only the table in use stays
    for proc, truth, module in zip(procs, truths, ("plain", "debug", "prog"), strict=True):
        assert_named(tiny, proc, truth, module)
        assert tiny.stats()["cached_objects"] == 1


def test_unreadable_and_non_elf_files_give_module_offsets(tmp_path):
    not_elf = tmp_path / "blob.so"
    not_elf.write_bytes(b"\x7fELF garbage" * 100)
    lines = [
        f"7f0000000000-7f0000010000 r-xp 00002000 08:01 12345 {not_elf}",
        "7f0000020000-7f0000030000 r-xp 00000000 08:01 777 /nonexistent/lib.so",
        "garbage line",
    ]
    snap = ProcessMaps.parse(999999999, lines, root="")
    sym = Symbolizer()
    f1 = sym.frame_in(snap.find(0x7F0000000010), 0x7F0000000010)
    assert (f1.name, f1.module) == ("blob.so+0x2010", "blob.so")
    f2 = sym.frame_in(snap.find(0x7F0000020010), 0x7F0000020010)
    assert f2.name == "lib.so+0x10"
    assert sym.user(999999999, 0x1234).name == "[unknown]"  # no such process


def test_kernel_names_from_kallsyms(tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_text(
        "ffffffff81000000 T _stext\nffffffff81000100 t do_thing\nffffffff81000200 D some_data\n"
        "ffffffffc0000000 t mod_fn\t[mymod]\n"
    )
    sym = Symbolizer(kallsyms=str(ks))
    assert sym.kernel(0xFFFFFFFF81000150) == "do_thing"
    assert sym.kernel(0xFFFFFFFF81000250) == "do_thing"  # data symbols do not end a function
    assert sym.kernel_frame(0xFFFFFFFFC0000004).module == "[mymod]"
    assert sym.kernel(0x1000) == "[unknown]"
    real = Symbolizer()
    if len(real.kernel_symbols):  # addresses shown (root): a real function maps back to its name
        name = real.kernel_symbols.name(len(real.kernel_symbols) // 2)
        addr = real.kernel_symbols.starts[len(real.kernel_symbols) // 2]
        assert real.kernel(addr) == name or real.kernel_symbols.starts.count(addr) > 1
