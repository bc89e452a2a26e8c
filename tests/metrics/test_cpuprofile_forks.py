"""cpuprofile names the stacks of fork children that exit before their maps are read (issue 14): a
parent built -O2 -fomit-frame-pointer forks a child per round, each child burns about 3 ms of CPU in
main -> spawn -> child_work -> child_hot and exits, long before the interval ends. The chain is the one
the workload is written with; the children's CPU time is the parent's own getrusage(RUSAGE_CHILDREN)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter

import pytest
import stack_samples as ss
from helpers import MetricProcess, contains, sampling_started, user_names, whole_machine_beside

pytestmark = [pytest.mark.bpf, pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

FORKER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
volatile unsigned long sink;
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}
__attribute__((noinline)) void child_hot(double until) {
    while (cpu_s() < until)
        for (int i = 0; i < 2000; i++) sink += i;
}
__attribute__((noinline)) void child_work(double ms) { child_hot(cpu_s() + ms / 1e3); sink++; }
__attribute__((noinline)) void spawn(double ms) {
    pid_t pid = fork();
    if (pid == 0) { child_work(ms); _exit(0); }
    waitpid(pid, NULL, 0);
    sink++;
}
int main(int argc, char **argv) {
    long rounds = atol(argv[1]);
    sleep(atoi(argv[2]));   /* the profiler's first interval starts meanwhile */
    for (long r = 0; r < rounds; r++) spawn(3.0);""" + ss.PRINT_RUSAGE.replace("WHO", "RUSAGE_CHILDREN") + """
    return 0;
}
"""
CHAIN = ["main", "spawn", "child_work", "child_hot"]
HZ = 199


@pytest.fixture(scope="module")
def forker(tmp_path_factory) -> str:
    return ss.build(str(tmp_path_factory.mktemp("forker")), "forker", FORKER_C, "-O2", "-fomit-frame-pointer")


@pytest.mark.parametrize("mode", ["dwarf", "kernel", "fp"])
def test_short_lived_fork_children_are_named_from_their_parent(forker, mode):
    # whole machine: -p PID samples the process itself, not its children
    tool = MetricProcess("cpuprofile", "-U", "-F", str(HZ), "--user-stacks", mode, "1")
    try:
        tool.wait_meta()
        parent, out = whole_machine_beside(tool, [forker, "700", "1"])
    finally:
        tool.kill()
    children_cpu = float(out.split()[-1])
    children = [r for r in tool.of_kind("stack") if r["comm"] == "forker" and r["pid"] != parent]
    total = sum(r["count"] for r in children)
    whole = sum(r["count"] for r in children if contains(user_names(r), CHAIN))
    pids = {r["pid"] for r in children}
    print(f"{mode}: {len(pids)} children sampled, {whole}/{total} samples carry {'→'.join(CHAIN)}; "
          f"children's CPU {children_cpu:.3f} s ({HZ * children_cpu:.0f} samples expected)")
    # what the walks met, for a failure's diagnosis: in 3 of 6 full runs (never alone, nor beside a busy
    # Qt painter, a process storm or a wrap of the pid counter) about half the children's samples came
    # unnamed in kernel mode
    for s in tool.of_kind("summary"):
        print("  interval", s["interval"], {k: s[k] for k in ("unwound", "frame_pointers", "kernel_unwind") if k in s})
    unnamed = Counter(tuple(user_names(r)[:4]) for r in children if not contains(user_names(r), CHAIN))
    print("  unnamed stacks, innermost first:", unnamed.most_common(4))
    assert len(pids) >= 100   # the children really were short-lived and many
    # every sample of the children's CPU time is there (a CPU-clock sample per 1/HZ s of it)...
    assert abs(total - HZ * children_cpu) <= 0.15 * HZ * children_cpu
    if mode != "fp":
        # ...and named: the children were gone when the interval ended, their parent's maps named them
        # (kernel: walked in BPF with their parent's mappings, which they still ran in)
        assert whole >= 0.9 * total
    else:
        # frame pointers stop early in a -fomit-frame-pointer build, but the function running is named
        # (child_hot, or the vDSO clock read it calls)
        named = sum(r["count"] for r in children if "child_hot" in user_names(r) or "vdso" in str(user_names(r)))
        print(f"fp: {named}/{total} samples name child_hot or its clock read")
        assert named >= 0.9 * total


def test_fork_children_are_named_when_counted_in_the_kernel(forker):
    """--folded by frame pointers counts in a kernel map and names everything at the end, when the
    children are long gone: the BPF side kept each one's parent as it was first sampled, and the
    parent's maps name them."""
    tool = MetricProcess("cpuprofile", "-U", "-F", str(HZ), "--folded", "--user-stacks", "fp", json_output=False)
    try:
        sampling_started(tool.proc.pid)
        run = subprocess.run([forker, "700", "1"], capture_output=True, text=True, check=True)
        tool.proc.send_signal(signal.SIGINT)
        out, err = tool.proc.communicate(timeout=120)
    finally:
        tool.kill()
    assert tool.proc.returncode == 0, err
    children_cpu = float(run.stdout.split()[-1])
    lines = [line.rsplit(" ", 1) for line in out.splitlines() if line.startswith("forker;")]
    # the children's samples: child_hot, or the vDSO clock read it calls (the parent runs neither)
    named = sum(int(n) for stack, n in lines if "child_hot" in stack or "vdso" in stack)
    print(f"{named} samples name child_hot or its clock read; children's CPU {children_cpu:.3f} s "
          f"({HZ * children_cpu:.0f} samples expected)")
    # for a failure's diagnosis (once, 191 of 426, in a loaded run of 3511119; never reproduced since):
    # what the other forker samples were named, and what the tool said of lost samples
    others = Counter()
    for stack, n in lines:
        if "child_hot" not in stack and "vdso" not in stack:
            others[";".join(stack.split(";")[-3:])] += int(n)
    print("  other forker stacks, their innermost three frames:", others.most_common(5))
    print("  stderr:", err.strip()[-600:])
    assert abs(named - HZ * children_cpu) <= 0.15 * HZ * children_cpu


LIBHOT_C = r"""
volatile unsigned long lib_sink;
__attribute__((noinline)) void lib_hot(double (*cpu_s)(void), double until) {
    while (cpu_s() < until)
        for (int i = 0; i < 2000; i++) lib_sink += i;
}
"""
DLOPENER_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    sleep(1);   /* the parent is met (its first sample) before the child maps the library */
    pid_t pid = fork();
    if (pid == 0) {
        void *lib = dlopen(argv[1], RTLD_NOW);
        void (*hot)(double (*)(void), double) = lib ? dlsym(lib, "lib_hot") : NULL;
        if (!hot)
            _exit(2);
        hot(cpu_s, cpu_s() + atof(argv[2]));
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return 1;""" + ss.PRINT_RUSAGE.replace("WHO", "RUSAGE_CHILDREN") + """
    return 0;
}
"""


def test_a_fork_child_that_maps_new_code_is_walked_with_its_own_mappings(tmp_path):
    """A fork child that has not exec'd is walked with its parent's mappings; one that dlopens a library
    after the fork has its samples' pc in none of them, so its own mappings are asked for and read, and
    from then on its samples are named in the library."""
    lib = str(tmp_path / "libhot.so")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", lib, "-x", "c", "-"], input=LIBHOT_C, text=True, check=True)
    dlopener = ss.build(str(tmp_path), "dlopener", DLOPENER_C, "-O2", "-ldl")
    tool = MetricProcess("cpuprofile", "-U", "-F", str(HZ), "--user-stacks", "kernel", "1")
    try:
        tool.wait_meta()
        parent, out = whole_machine_beside(tool, [dlopener, lib, "1.5"])
    finally:
        tool.kill()
    children_cpu = float(out.split()[-1])
    # named "dlopener (libhot.so)" beside its parent, by its command line
    child = [r for r in tool.of_kind("stack") if r["comm"].startswith("dlopener") and r["pid"] != parent]
    total = sum(r["count"] for r in child)
    in_lib = sum(r["count"] for r in child if contains(user_names(r), ["main", "lib_hot"])
                 and any(f["module"] == "libhot.so" for f in r["frames"]))
    print(f"child: {in_lib}/{total} samples walked main -> lib_hot (libhot.so); its CPU {children_cpu:.3f} s "
          f"({HZ * children_cpu:.0f} samples expected)")
    for s in tool.of_kind("summary"):
        print("  interval", s["interval"], s.get("kernel_unwind", {}).get("failed"))
    assert abs(total - HZ * children_cpu) <= 0.15 * HZ * children_cpu
    # whole: walked with its own mappings once read (a walk with its parent's fails at the pc, which
    # alone is still named from the child's snapshot: lib_hot without its caller)
    assert in_lib >= 0.9 * total
