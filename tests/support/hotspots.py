"""The hot functions in C that more than one test builds (with frame pointers, -g): hot_a and hot_b (and
whatever follows PRELUDE in a test's own program) each spin in a loop of their own and call keep(), so
each keeps its frame; cpu() reads a CPU clock, so a program times its own calls and knows its own
ground truth. tests/metrics/test_cpuprofile.py writes PRELUDE + its hot_c, work() and main();
SHARES_C is a program that spends a given share of its thread's CPU time in hot_a and the rest in
hot_b (the profile diff's ground truth)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PRELUDE = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double cpu(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

volatile unsigned long sink = 88172645463325252UL;

/* a call makes each hot function a non-leaf: gcc keeps a leaf's frame pointer only with
 * -mno-omit-leaf-frame-pointer, which this gcc ignores at -O1 */
__attribute__((noinline)) void keep(unsigned long x)
{
    sink = x;
}

__attribute__((noinline)) void hot_a(long n)
{
    unsigned long x = sink;
    for (long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    keep(x);
}

__attribute__((noinline)) void hot_b(long n)
{
    unsigned long x = sink | 1;
    for (long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    keep(x);
}

"""

SHARES_C = PRELUDE + r"""/* argv: share of hot_a (0..1), seconds of thread CPU time. Says "ready PID", runs once a line comes
 * on stdin, prints its own report, and stays until the next line (a profiler names its last samples
 * while it lives). Each turn calls whichever of hot_a and hot_b is behind its share of the time so
 * far, with a length that varies at random (+-30 %) so a sampler with a fixed period cannot fall in
 * step; each call is timed on the thread's CPU clock */
int main(int argc, char **argv)
{
    double share = atof(argv[1]), seconds = atof(argv[2]), own[2] = {0, 0}, p0, start, t0, t1;
    char line[64];
    unsigned long r = 12345;
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    p0 = cpu(CLOCK_PROCESS_CPUTIME_ID);
    start = cpu(CLOCK_THREAD_CPUTIME_ID);
    do {
        r = r * 6364136223846793005UL + 1;
        long vary = (long)(r >> 33) % 600 - 300;
        int b = own[0] >= share * (own[0] + own[1]);
        t0 = cpu(CLOCK_THREAD_CPUTIME_ID);
        if (b)
            hot_b(40000 + 40 * vary);
        else
            hot_a(150000 + 150 * vary);
        t1 = cpu(CLOCK_THREAD_CPUTIME_ID);
        own[b] += t1 - t0;
    } while (t1 - start < seconds);
    printf("{\"cpu_s\": %.6f, \"hot_a\": %.6f, \"hot_b\": %.6f}\n", cpu(CLOCK_PROCESS_CPUTIME_ID) - p0,
           own[0], own[1]);
    fflush(stdout);
    fgets(line, sizeof(line), stdin);
    return 0;
}
"""


def build(source: str, directory: str, name: str, *flags: str) -> str:
    """NAME.c written in directory and built there with frame pointers everywhere (leaf functions keep
    theirs, no caller vanishes in a tail call) and -g; the program's path."""
    if not shutil.which("gcc"):
        pytest.fail("gcc is needed to build the workload (scripts/apt-packages.txt)")
    src, exe = os.path.join(directory, f"{name}.c"), os.path.join(directory, name)
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
                    "-fno-optimize-sibling-calls", *flags, "-o", exe, src], check=True)
    return exe
