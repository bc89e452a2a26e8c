"""What bench/floor.py and bench/probe_floor.py do once attached: say "ready", hold the programs until
SIGINT or SIGTERM, then detach. Imports nothing of the project: floor.py is the start-up bound of a BCC
tool."""

from __future__ import annotations

import signal
from typing import Any


def hold(b: Any) -> None:
    """b: a loaded and attached bcc.BPF."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print("ready", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    b.cleanup()
