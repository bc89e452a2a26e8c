"""Synthetic metric for the pipeline tests: ignores SIGINT and SIGTERM, so only SIGKILL stops it."""

import json
import signal
import sys
import time

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
n = 0
while True:
    print(json.dumps({"metric": "stubborn", "ts": time.time(), "kind": "row", "interval": n, "n": n}), flush=True)
    n += 1
    time.sleep(0.05)
    if "--json" not in sys.argv:
        break
