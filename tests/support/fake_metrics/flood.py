"""Synthetic metric for the pipeline tests: prints --lines NDJSON event records (i = 0, 1, ...) as fast
as it can, then exits 0. --noise adds non-record lines on stdout and stderr between the records."""

import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser(prog="flood")
parser.add_argument("--lines", type=int, default=100_000)
parser.add_argument("--noise", action="store_true")
parser.add_argument("--linger", type=float, default=0.0, help="seconds to stay alive after the records")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()

out = sys.stdout.buffer
out.write(json.dumps({"metric": "flood", "ts": time.time(), "kind": "meta", "interval": 0,
                      "pid": os.getpid()}).encode() + b"\n")
chunk = []
for i in range(args.lines):
    chunk.append(b'{"metric":"flood","ts":%f,"kind":"event","interval":1,"i":%d}\n' % (time.time(), i))
    if args.noise and i % 1000 == 0:
        chunk.append(b"not a record: BCC chatter %d\n" % i)
        sys.stderr.write(f"warning {i}\n")
    if len(chunk) >= 2000:
        out.write(b"".join(chunk))
        chunk = []
out.write(b"".join(chunk))
out.flush()
time.sleep(args.linger)
