"""Synthetic metric for the pipeline tests: loads a real (empty) BPF program, starts a grandchild in
its process group, prints a few records, then crashes with an exception (exit status 1).
The meta record reports the grandchild's pid so a test can check it was not left behind."""

import argparse
import json
import os
import subprocess
import sys
import time

from bcc import BPF

parser = argparse.ArgumentParser(prog="crasher")
parser.add_argument("--after", type=float, default=1.0, help="seconds before the crash")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()

b = BPF(text="RAW_TRACEPOINT_PROBE(sys_enter) { return 0; }")
grandchild = subprocess.Popen(["sleep", "300"])


def emit(kind: str, **fields) -> None:
    print(json.dumps({"metric": "crasher", "ts": time.time(), "kind": kind, "interval": 0, **fields}), flush=True)


emit("meta", pid=os.getpid(), grandchild=grandchild.pid)
for n in range(3):
    emit("row", n=n)
print("crasher: about to crash", file=sys.stderr, flush=True)
time.sleep(args.after)
raise RuntimeError("synthetic crash")
