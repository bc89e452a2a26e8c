"""Where the client keeps what must outlive it: the transport's outbox and the pids of running metrics.

XDG_STATE_HOME/ebpf-profiler, else ~/.local/state/ebpf-profiler (the XDG base-directory default).
"""

from __future__ import annotations

import os

APP_DIR = "ebpf-profiler"


def state_dir(override: str | None = None) -> str:
    """The state directory (created if missing); `override` wins over the environment."""
    if override:
        path = override
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        path = os.path.join(base, APP_DIR)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path
