"""User-stack samples taken without BPF, as ground truth for the unwinder (tests) and its benchmark.

`stack_snap` (C, ptrace) stops a thread now and then, as a perf event would, and writes what the
BPF side hands user space: ip, sp, bp and a copy of up to 16 KiB of the stack from sp (read page by
page with process_vm_readv, so it ends where the stack mapping ends). The workloads are C programs
compiled here (-O2 -fomit-frame-pointer: nothing for a frame-pointer walk to follow) and Debian's own
/usr/bin/python3, built without frame pointers.
"""

from __future__ import annotations

import os
import struct
import subprocess
from dataclasses import dataclass

SNAP_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

/* stack_snap TID COUNT INTERVAL_US OUT [BYTES]: COUNT samples of thread TID into OUT */
static char buf[1 << 20];

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: stack_snap TID COUNT INTERVAL_US OUT [BYTES]\n"); return 2; }
    pid_t tid = atoi(argv[1]);
    int count = atoi(argv[2]), interval = atoi(argv[3]);
    size_t want = argc > 5 ? (size_t)atol(argv[5]) : 16384;
    if (want > sizeof buf) want = sizeof buf;
    FILE *out = fopen(argv[4], "wb");
    if (!out || ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) { perror("stack_snap"); return 1; }
    int taken = 0;
    while (taken < count) {
        usleep(interval);
        int status;
        if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0 || waitpid(tid, &status, __WALL) < 0) break;
        if (!WIFSTOPPED(status)) break;
        int sig = (status >> 16) == PTRACE_EVENT_STOP ? 0 : WSTOPSIG(status);
        struct user_regs_struct r;
        if (ptrace(PTRACE_GETREGS, tid, 0, &r) == 0) {
            size_t got = 0;
            while (got < want) {
                size_t chunk = 4096 - ((r.rsp + got) & 4095);
                if (chunk > want - got) chunk = want - got;
                struct iovec local = {buf + got, chunk}, remote = {(void *)(r.rsp + got), chunk};
                ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
                if (n <= 0) break;
                got += n;
            }
            uint64_t head[4] = {r.rip, r.rsp, r.rbp, got};
            fwrite(head, sizeof head, 1, out);
            fwrite(buf, 1, got, out);
            taken++;
        }
        ptrace(PTRACE_CONT, tid, 0, (void *)(long)sig);
    }
    fclose(out);
    printf("%d\n", taken);
    return 0;
}
"""

CHAIN_C = r"""
#include <stdlib.h>
#include <unistd.h>
volatile unsigned long sink;
int deep_said;
__attribute__((noinline)) unsigned long hot(unsigned long x) {
    for (unsigned long i = 0; i < 200000000UL; i++) sink += i ^ x;
    return sink;
}
__attribute__((noinline)) unsigned long c(unsigned long x) { return hot(x + 1) * 3; }
__attribute__((noinline)) unsigned long b(unsigned long x) { return c(x + 2) * 5; }
__attribute__((noinline)) unsigned long a(unsigned long x) { return b(x + 3) * 7; }
__attribute__((noinline)) unsigned long rec(int n) {
    volatile char pad[32];
    pad[0] = (char)n;
    if (n == 0) {   /* the whole recursion is on the stack: say so, and keep it there until killed */
        deep_said = write(1, "deep\n", 5);
        for (;;) sink += a(1);
    }
    return rec(n - 1) + pad[0];
}
int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 0;
    long rounds = argc > 2 ? atol(argv[2]) : 0;   /* 0: until killed */
    for (long r = 0; !rounds || r < rounds; r++) sink += depth ? rec(depth) : a((unsigned long)argc);
    return 0;
}
"""

CHAIN = ["main", "a", "b", "c", "hot"]  # root first
PYTHON_LOOP = "def f(n):\n    return n * 3 + 1\nwhile True:\n    for i in range(1000):\n        f(i)\n"


# C: print the CPU time getrusage(WHO) gives, user + system, in seconds (the workload's own books)
PRINT_RUSAGE = r"""
    struct rusage ru;
    getrusage(WHO, &ru);
    printf("%.6f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
"""


def python_rounds(rounds: int) -> str:
    """PYTHON_LOOP ending after `rounds` rounds (about 0.05-0.1 ms of CPU each): a fixed amount of work."""
    return PYTHON_LOOP.replace("while True:", f"for _round in range({rounds}):")


def python_for_cpu(seconds: float) -> str:
    """PYTHON_LOOP ending once the process has run `seconds` of CPU (its own clock): a fixed number of
    samples for a CPU-clock profiler, however loaded or fast the machine is. (A fixed count of rounds
    was not: 5,000 rounds took 0.25 s of CPU in one fresh run, 49 samples at 199 Hz where the test
    needs 50, and about twice that in others.)"""
    return PYTHON_LOOP.replace("while True:", f"import time\nwhile time.process_time() < {seconds}:")


@dataclass
class Sample:
    ip: int
    sp: int
    bp: int
    stack: bytes


def build(directory: str, name: str, source: str, *flags: str) -> str:
    src = os.path.join(directory, f"{name}.c")
    out = os.path.join(directory, name)
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["gcc", *flags, "-o", out, src], check=True)
    return out


def build_tools(directory: str) -> dict[str, str]:
    """The sampler and the chain workload, built into `directory`."""
    return {
        "snap": build(directory, "stack_snap", SNAP_C, "-O2"),
        "chain": build(directory, "chain", CHAIN_C, "-O2", "-fomit-frame-pointer"),
    }


def capture(snap: str, tid: int, count: int, out: str, interval_us: int = 5000, size: int = 16384) -> list[Sample]:
    subprocess.run([snap, str(tid), str(count), str(interval_us), out, str(size)], check=True, capture_output=True)
    return read_samples(out)


def read_samples(path: str) -> list[Sample]:
    samples = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at + 32 <= len(data):
        ip, sp, bp, n = struct.unpack_from("<4Q", data, at)
        at += 32
        samples.append(Sample(ip, sp, bp, data[at : at + n]))
        at += n
    return samples
