"""Synthetic metric for the overhead budget's tests: spins --duty of every 0.1 s (a CPU cost the overhead
sampler measures, with no BPF), printing its meta record (its pid and arguments) and then a summary
record every --interval seconds until SIGINT or SIGTERM, which end it with status 0."""

import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser(prog="burner")
parser.add_argument("--duty", type=float, default=0.3, help="share of each 0.1 s spent spinning")
parser.add_argument("--interval", type=float, default=0.5)
parser.add_argument("--json", action="store_true")
args = parser.parse_args()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def emit(kind: str, interval: int, **fields) -> None:
    print(json.dumps({"metric": "burner", "ts": time.time(), "kind": kind, "interval": interval, **fields}), flush=True)


emit("meta", 0, pid=os.getpid(), args={"duty": args.duty, "interval": args.interval})
interval, next_summary = 1, time.monotonic() + args.interval
try:
    while True:
        start = time.monotonic()
        while time.monotonic() - start < 0.1 * args.duty:
            pass
        time.sleep(max(0.0, 0.1 * (1 - args.duty)))
        if time.monotonic() >= next_summary:
            emit("summary", interval, duty=args.duty)
            interval, next_summary = interval + 1, next_summary + args.interval
except KeyboardInterrupt:
    pass
