"""bcctool.demangle, and the symbolizer naming C++ code as its source spells it: a C++ program compiled
here, each of its functions' addresses named as binutils' own c++filt demangles nm's name for it. Rust
names, legacy and v0, as rustc-demangle prints them; anything else comes back untouched. No BPF needed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from bcctool.demangle import demangle
from bcctool.symbols import Symbolizer
from profile_data import stack_of

PROGRAM = r"""
#include <cstdio>
#include <unistd.h>
namespace lab {
struct Widget {
    int n;
    __attribute__((noinline)) int spin(int x) const { return x * n + 1; }
};
template <typename T> __attribute__((noinline)) T twice(T x) { return x + x; }
}
int main() {
    lab::Widget w{3};
    std::printf("%p %p\n", (void *)&lab::twice<long>, (void *)&main);
    std::fflush(stdout);
    char c = 0;
    if (read(0, &c, 1) < 0) return 1;
    return w.spin(c) + (int)lab::twice<long>(c);
}
"""


@pytest.mark.parametrize(("mangled", "readable"), [
    ("_ZN7QThread7startedENS_14QPrivateSignalE", "QThread::started(QThread::QPrivateSignal)"),
    ("_ZNK3lab6Widget4spinEi", "lab::Widget::spin(int) const"),
    ("_ZN3foo3barEv.cold", "foo::bar() [clone .cold]"),
    ("_ZN3foo3barEv.llvm.4711", "foo::bar() [clone .llvm.4711]"),
    ("_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"),
    ("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h168e94e611939a97E",
     "std::rt::lang_start::{{closure}}"),
    ("_RNvCs1234_4test4main", "test::main"),
    ("_RNvNtCs1234_7mycrate5inner3hot", "mycrate::inner::hot"),
])
def test_cxx_and_rust_names_demangle(mangled, readable):
    assert demangle(mangled) == readable


@pytest.mark.parametrize("name", ["main", "hot_a", "__schedule", "_Zgarbage", "_R", "_Rgarbage!", "python3.11+0x65176f",
                                  "[unknown]", "<module> (hot.py:13)", ""])
def test_other_names_come_back_as_they_are(name):
    assert demangle(name) == name


def test_a_recorded_stack_is_read_demangled():
    """A session recorded before the symbolizer demangled still reads demangled (offcpu's text frames and
    cpuprofile's frame objects alike)."""
    offcpu = {"kind": "row", "level": "stack", "comm": "qt", "total_ms": 2.0, "kernel_frames": ["do_poll"],
              "user_frames": ["_ZN7QThread7startedENS_14QPrivateSignalE [libQt6Core.so.6]"]}
    cpu = {"kind": "stack", "comm": "qt", "count": 3,
           "frames": [{"name": "_ZN7QThread7startedENS_14QPrivateSignalE", "module": "libQt6Core.so.6", "kind": "user"}]}
    for record in (offcpu, cpu):
        names = [f.name for f in stack_of(record)]
        assert "QThread::started(QThread::QPrivateSignal)" in names


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_the_symbolizer_names_cxx_functions_as_cxxfilt_does(tmp_path):
    src, exe = tmp_path / "prog.cc", tmp_path / "prog"
    src.write_text(PROGRAM)
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True)
    nm = subprocess.run(["nm", "--defined-only", str(exe)], capture_output=True, text=True, check=True).stdout
    mangled = {line.split()[2]: int(line.split()[0], 16) for line in nm.splitlines()
               if len(line.split()) == 3 and line.split()[2] in ("_ZN3lab5twiceIlEET_S1_", "main")}
    truth = {m: subprocess.run(["c++filt", m], capture_output=True, text=True, check=True).stdout.strip()
             for m in mangled}
    assert truth["_ZN3lab5twiceIlEET_S1_"] == "long lab::twice<long>(long)"
    child = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        twice_at, main_at = (int(p, 16) for p in child.stdout.readline().split())
        bias = main_at - mangled["main"]
        sym = Symbolizer()
        for name, addr in mangled.items():
            frame = sym.user(child.pid, addr + bias)
            assert (frame.name, frame.module) == (truth[name], "prog")
        assert twice_at - bias == mangled["_ZN3lab5twiceIlEET_S1_"]
    finally:
        child.stdin.write("x")
        child.stdin.close()
        child.wait(timeout=10)
