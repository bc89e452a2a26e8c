"""What /proc says about memory: the system overview (/proc/meminfo) and a process's resident and
virtual size (/proc/PID/status). Sizes in bytes; None (or {}) when the file cannot be read."""

from __future__ import annotations

from .proctext import read_text

# /proc/meminfo keys of the system overview, and the JSON names they get
MEMINFO_FIELDS = {
    "MemTotal": "mem_total_bytes",
    "MemFree": "mem_free_bytes",
    "MemAvailable": "mem_available_bytes",
    "Buffers": "buffers_bytes",
    "Cached": "cached_bytes",
    "Slab": "slab_bytes",
    "SReclaimable": "slab_reclaimable_bytes",
    "SUnreclaim": "slab_unreclaimable_bytes",
    "KernelStack": "kernel_stack_bytes",
    "PageTables": "page_tables_bytes",
    "VmallocUsed": "vmalloc_used_bytes",
}


def _kb_lines(path: str) -> dict[str, int]:
    """'Key:   123 kB' lines as {Key: bytes} (lines without a number are left out)."""
    values = {}
    for line in (read_text(path) or "").splitlines():     # status: its Name: line is the comm
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return values


def meminfo() -> dict[str, int]:
    """The system overview: {json name: bytes} for MEMINFO_FIELDS that this kernel has."""
    raw = _kb_lines("/proc/meminfo")
    return {name: raw[key] for key, name in MEMINFO_FIELDS.items() if key in raw}


def process_memory(pid: int) -> dict[str, int] | None:
    """{'rss_bytes', 'vm_size_bytes'} of a process, from /proc/PID/status; None when it has gone.
    A kernel thread has neither and gets zeros."""
    raw = _kb_lines(f"/proc/{pid}/status")
    if not raw:
        return None
    return {"rss_bytes": raw.get("VmRSS", 0), "vm_size_bytes": raw.get("VmSize", 0)}
