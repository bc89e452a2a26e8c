"""A process's open fds as /proc/PID/fdinfo shows them: the one reader both the process bookkeeping
(host/procs.py: the BPF programs a metric holds) and bpf_stats (host/bpf_stats.py: their counters) use.
A leaf: it imports nothing of the project, so the privilege helper's `overhead` (host/bpf_stats.py)
does not pull in host/procs.py, which imports the helper.
"""

from __future__ import annotations

import os


def fd_infos(pid: int) -> list[dict[str, str]] | None:
    """Each open fd's /proc/PID/fdinfo as {field: value} (a bpf-prog fd has prog_id, run_time_ns,
    run_cnt; a BPF link names its prog_id too); None when the process's fdinfo is unreadable."""
    fd_dir = f"/proc/{pid}/fdinfo"
    try:
        entries = os.listdir(fd_dir)
    except OSError:
        return None
    infos = []
    for fd in entries:
        try:
            with open(os.path.join(fd_dir, fd)) as f:
                text = f.read()
        except OSError:
            continue        # closed meanwhile
        infos.append({key.strip(): value.strip() for key, _, value in
                      (line.partition(":") for line in text.splitlines()) if _})
    return infos
