#!/usr/bin/env python3
"""The profiler's entry point: the window by default, `--doctor` for the kernel preflight.

Until the window lands, running without --doctor prints the preflight and a short live sysnest
summary so `make run` shows real data.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import config
import preflight


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="main_app.py", description="eBPF performance profiler")
    parser.add_argument("--doctor", action="store_true", help="check this machine and every metric, then exit")
    args = parser.parse_args(argv)
    if args.doctor:
        return preflight.main()
    status = preflight.main()
    if status != 0:
        return status
    print("\nsysnest, three 1-second intervals:")
    cmd = config.get("sysnest").command({"count": 3, "top": 5, "details_top": 3}, json_output=False)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
