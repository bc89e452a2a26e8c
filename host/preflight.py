"""The kernel preflight (`python main_app.py --doctor`): can this machine run each registered metric?

Reads only files and the registry; never loads BPF and never raises on a kernel without a feature.
The GUI uses metric_verdicts() to disable metrics that cannot run, with the reason.
"""

from __future__ import annotations

import os
import platform

import config
from bcctool import kernelfeatures as kf
from host import elevation
from host.verdict import Verdict


def metric_verdicts() -> list[Verdict]:
    privileged, how = kf.privileges()
    has_bcc = kf.bcc_version() is not None
    verdicts = []
    for spec in config.METRICS:
        missing = kf.missing_probes(list(spec.probes))
        if not os.path.exists(spec.path):
            reason = f"script {spec.file} is missing"
        elif not has_bcc:
            reason = "bcc is not importable"
        elif kf.tracefs_root() is None:
            hidden = kf.tracefs_hidden()
            # judged with the privileges the metric will have: as root it reads tracefs (and checks its
            # tracepoints when it starts)
            reason = (f"needs root: tracefs at {hidden} is readable by root only; the app elevates with sudo -n"
                      if hidden else "tracefs is not mounted")
        elif missing:
            reason = "missing tracepoints: " + ", ".join(missing)
        elif not privileged:
            reason = f"needs root or CAP_BPF+CAP_PERFMON ({how}); the app elevates with sudo -n"
        else:
            reason = ""
        verdicts.append(Verdict(spec.name, not reason, reason, list(spec.probes), missing))
    return verdicts


def report() -> tuple[list[str], int]:
    """Lines of the doctor's report, and its exit status (0 when at least one metric can run)."""
    lines = [f"kernel        {platform.release()} ({platform.machine()})"]
    privileged, how = kf.privileges()
    lines.append(f"privileges    {'ok' if privileged else 'NO'}: {how}")
    version = kf.bcc_version()
    lines.append(f"bcc           {version or 'NOT importable (install python3-bpfcc)'}")
    state, path = kf.kernel_headers()
    note = {"matching": "matching the running kernel",
            "fallback": "FALLBACK (another version): only tracepoint-based probes are trustworthy",
            "missing": "MISSING: BCC cannot compile"}[state]
    lines.append(f"headers       {path}: {note}")
    root, hidden = kf.tracefs_root(), kf.tracefs_hidden()
    lines.append(f"tracefs       {root or (f'{hidden}, readable by root only (as the metrics run)' if hidden else 'NOT mounted (mount -t tracefs tracefs /sys/kernel/tracing)')}")
    lines.append(f"kprobes       {'available' if kf.kprobes_available() else 'unavailable (tracepoint paths only)'}")
    lines.append(f"btf           {'available' if kf.btf_available() else 'unavailable'}")
    lines.append(f"task storage  {'available' if kf.task_storage_available() else 'unavailable'}")
    stats = kf.bpf_stats_enabled()
    lines.append(f"bpf_stats     {'unknown' if stats is None else ('on' if stats else 'off')}")
    lines.append("")
    lines.append(f"{'METRIC':<12} {'VERDICT':<10} PROBES")
    verdicts = metric_verdicts()
    for v in verdicts:
        verdict = "runnable" if v.runnable else "NO"
        lines.append(f"{v.name:<12} {verdict:<10} {', '.join(v.probes)}")
        if v.reason:
            lines.append(f"{'':<12} {'':<10} -> {v.reason}")
    runnable = sum(v.runnable for v in verdicts)
    lines.append("")
    lines.append(f"{runnable} of {len(verdicts)} metrics can run here.")
    return lines, 0 if runnable else 1


def main() -> int:
    """The report with the privileges the metrics will have: root's, through the privilege helper,
    when this user is not root and the helper's rule allows it; else this user's, with what to install."""
    if elevation.needs_elevation():
        said = elevation.doctor_as_root()
        if said is not None:
            print(f"(run as {elevation.user_name()}: the metrics run as root through the privilege helper, so this "
                  "is root's view, from `sudo -n host/privhelper.py doctor`)")
            print(said[0], end="")
            return said[1]
    lines, status = report()
    if elevation.needs_elevation():
        lines += ["", f"Run as {elevation.user_name()}, the metrics start as root through `sudo -n` and the privilege "
                  "helper, which this user may not run. To allow it (and nothing else):",
                  f"  {elevation.install_command()}", "or run the app as root (docs/privileges.md)."]
        status = 1
    print("\n".join(lines))
    return status
