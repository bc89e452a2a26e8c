#!/usr/bin/python3
"""floor: attach bench/floor.c (two empty raw-tracepoint programs; with --clock each reads the clock
once), print "ready", wait for SIGINT or SIGTERM.

The benchmark's lower bounds for any syscall tracer, and for any syscall latency tracer, on this kernel.
"""

import os
import signal
import sys

from bcc import BPF

cflags = ["-DCLOCK"] if "--clock" in sys.argv[1:] else []
b = BPF(src_file=os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.c").encode(), cflags=cflags)
signal.signal(signal.SIGTERM, signal.default_int_handler)
print("ready", flush=True)
try:
    signal.pause()
except KeyboardInterrupt:
    pass
b.cleanup()
