#!/usr/bin/python3
"""floor: attach bench/floor.c (two empty raw-tracepoint programs; with --clock each reads the clock
once; with --store as well, the entry time is kept per thread in task storage and read back at exit),
print "ready", wait for SIGINT or SIGTERM. With --stub-kallsyms the compile runs as the metrics'
does (bcctool.ksymstub: BCC does not read the kernel's whole symbol table).

The benchmark's lower bounds for any syscall tracer, and for any syscall latency tracer, on this kernel,
and for any BCC tool's start.
"""

import contextlib
import os
import sys

from bcc import BPF
from hold import hold

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cflags = ["-DCLOCK"] if "--clock" in sys.argv[1:] else []
if "--store" in sys.argv[1:]:
    cflags = ["-DCLOCK", "-DSTORE"]
compiling = contextlib.nullcontext()
if "--stub-kallsyms" in sys.argv[1:]:
    sys.path.insert(0, ROOT)
    from bcctool import ksymstub

    compiling = ksymstub.stub_kallsyms()
with compiling:
    b = BPF(src_file=os.path.join(ROOT, "bench", "floor.c").encode(), cflags=cflags)
hold(b)
