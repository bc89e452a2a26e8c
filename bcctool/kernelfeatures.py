"""What this kernel and this process can do for BPF tracing, found without ever raising.

Everything here reads files (tracefs, /proc, /sys) rather than asking BCC, because some of BCC's own
probes raise on kernels without kprobes (get_kprobe_functions reads the kprobe blacklist from debugfs,
which does not exist when kprobes are compiled out). Safe to import without root and without bcc.
"""

from __future__ import annotations

import os
import platform

from .proctext import read_text

TRACEFS_ROOTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
CAP_PERFMON = 38
CAP_BPF = 39
CAP_SYS_ADMIN = 21


def tracefs_root() -> str | None:
    """The mounted tracefs directory, or None when tracefs is not mounted."""
    for root in TRACEFS_ROOTS:
        try:
            if os.path.isdir(os.path.join(root, "events")):
                return root
        except OSError:
            pass
    return None


def tracefs_hidden() -> str | None:
    """A tracefs mount this process cannot read (it is mode 0700 on many systems), from the mount
    table: the metric, run as root, will see it. None when there is none."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if "-" in fields and fields[fields.index("-") + 1] == "tracefs" and not os.access(fields[4], os.R_OK):
                    return fields[4]
    except OSError:
        pass
    return None


def tracepoint_exists(category: str, event: str) -> bool:
    """True when tracepoint category:event exists on this kernel (needs tracefs mounted)."""
    root = tracefs_root()
    return bool(root) and os.path.isdir(os.path.join(root, "events", category, event))


def kprobes_available() -> bool:
    """True when the kernel can attach kprobes (CONFIG_KPROBES and the perf kprobe PMU)."""
    if os.path.isdir("/sys/bus/event_source/devices/kprobe"):
        return True
    root = tracefs_root()
    return bool(root) and os.path.exists(os.path.join(root, "kprobe_events"))


def btf_available() -> bool:
    """Kernel BTF, needed for task-local storage and bpf_get_current_task_btf()."""
    return os.path.exists("/sys/kernel/btf/vmlinux")


def kernel_version() -> tuple[int, int]:
    parts = platform.release().split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return (0, 0)


def task_storage_available() -> bool:
    """BPF task-local storage from tracing programs: kernel >= 5.19 with BTF."""
    return btf_available() and kernel_version() >= (5, 19)


def task_storage_variants() -> list[list[str]]:
    """Tool.load's variants for a program that keeps per-thread state in task storage (-DUSE_TASK_STORAGE)
    where the kernel has it, else (refused at load, or lacking) in the map the program keeps instead."""
    return [["-DUSE_TASK_STORAGE"], []] if task_storage_available() else [[]]


def _effective_caps() -> int:
    for line in (read_text("/proc/self/status") or "").splitlines():   # its Name: line is our comm
        if line.startswith("CapEff:"):
            try:
                return int(line.split()[1], 16)
            except (IndexError, ValueError):
                return 0
    return 0


def privileges() -> tuple[bool, str]:
    """(enough to load tracing BPF, how): root, or CAP_BPF with CAP_PERFMON, or CAP_SYS_ADMIN."""
    if os.geteuid() == 0:
        return True, "root"
    caps = _effective_caps()
    if caps & (1 << CAP_BPF) and caps & (1 << CAP_PERFMON):
        return True, "CAP_BPF+CAP_PERFMON"
    if caps & (1 << CAP_SYS_ADMIN):
        return True, "CAP_SYS_ADMIN"
    return False, "not root and lacking CAP_BPF+CAP_PERFMON"


def kernel_headers() -> tuple[str, str]:
    """(state, path): state is 'matching', 'fallback' (other version linked) or 'missing'."""
    build = f"/lib/modules/{platform.release()}/build"
    if not os.path.exists(os.path.join(build, "Makefile")):
        return "missing", build
    target = os.path.realpath(build)
    if os.path.basename(target) == f"linux-headers-{platform.release()}" or target.startswith(
        f"/lib/modules/{platform.release()}"
    ):
        return "matching", target
    return "fallback", target


def bcc_version() -> str | None:
    """BCC's version when the distro's bcc imports, else None."""
    try:
        import bcc  # noqa: PLC0415 - optional, heavy import
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return None
    return getattr(bcc, "__version__", "unknown")


def bpf_stats_enabled() -> bool | None:
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def missing_probes(probes: list[str]) -> list[str]:
    """Of probe names like 'sched:sched_switch' (tracepoints) or 'kprobe:fn', those not available."""
    missing = []
    for probe in probes:
        category, _, event = probe.partition(":")
        if category == "kprobe":
            if not kprobes_available():
                missing.append(probe)
        elif category == "perf":
            continue  # software perf events exist wherever perf_event_open does
        elif not tracepoint_exists(category, event):
            missing.append(probe)
    return missing
