#!/usr/bin/python3
"""floor: attach bench/floor.c (two empty raw-tracepoint programs), print "ready", wait for SIGINT.

The benchmark's lower bound for any syscall tracer on this kernel.
"""

import os
import signal

from bcc import BPF

b = BPF(src_file=os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.c").encode())
signal.signal(signal.SIGTERM, signal.default_int_handler)
print("ready", flush=True)
try:
    signal.pause()
except KeyboardInterrupt:
    pass
b.cleanup()
