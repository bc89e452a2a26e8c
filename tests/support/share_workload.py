"""A workload whose two hot functions split its CPU time in a share given on its command line (70/30, then
30/70: a run that changed), each call timed on the thread's own CPU clock, so the change of each
function's share between two runs is known from the workload itself. Built here with frame pointers.
Run: `shares PERMILLE_A SECONDS`; it prints "ready PID", waits for a line on stdin, works, prints
{"cpu_s", "hot_a", "hot_b"} (seconds of process CPU, and of each function's calls), waits for a last line."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

# the thread's CPU clock, a call's length drawn at random, and hot_a: a hot loop calling keep()
# (test_cpuprofile's workload has them too)
HOT_A_C = r"""
static double cpu(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

volatile unsigned long sink = 88172645463325252UL;

/* A call's length: `mean` iterations times 0.4 .. 1.6, drawn at random for each call. */
static long drawn(unsigned long *r, long mean)
{
    *r = *r * 6364136223846793005UL + 1;
    return mean / 1000 * (400 + (long)(*r >> 33) % 1200);
}

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
"""

# test_cpuprofile's workload: hot_a, hot_b and hot_c in turn (70/22/8 % or so), and modes that spin in a
# read(2) of /dev/zero or in code a JIT wrote (test_kunwind_equal builds it without frame pointers)
HOTSPOTS_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
""" + HOT_A_C + r"""
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

__attribute__((noinline)) void hot_c(long n)
{
    unsigned long x = sink;
    for (long i = 0; i < n; i++)
        x = x * 3 + (unsigned long)i;
    keep(x);
}

/* one thread: hot_a, hot_b, hot_c in turn, each call timed on the thread's own CPU clock. Each call's
 * length is drawn on its own, and a turn of the loop (~3.7 ms) varies by about a sampler's period at
 * 1 kHz (sd ~1 ms), so the samples fall at random places in the turn: with one draw for all three calls
 * and a ~1 ms turn beside the sampler's 1.003 ms, a phase stayed for dozens of samples and a 3-s run's
 * shares strayed from the clock's by up to 3 points (sd ~2). */
__attribute__((noinline)) void work(double seconds, double own[3])
{
    double start = cpu(CLOCK_THREAD_CPUTIME_ID), t0, t1, t2, t3;
    unsigned long r = 12345;
    do {
        long a = drawn(&r, 2400000), b = drawn(&r, 600000), c = drawn(&r, 400000);
        t0 = cpu(CLOCK_THREAD_CPUTIME_ID);
        hot_a(a);
        t1 = cpu(CLOCK_THREAD_CPUTIME_ID);
        hot_b(b);
        t2 = cpu(CLOCK_THREAD_CPUTIME_ID);
        hot_c(c);
        t3 = cpu(CLOCK_THREAD_CPUTIME_ID);
        own[0] += t1 - t0;
        own[1] += t2 - t1;
        own[2] += t3 - t2;
    } while (t3 - start < seconds);
}

/* "paths": 4,096 distinct stacks. Each call of turn() takes the path's next bit and goes on through
 * left() or right(), 12 levels deep, to a short spin: main;paths;turn;left;turn;right;...;spin_leaf.
 * Every path in turn, each a fixed spin (~0.5 ms), until the thread's clock says `seconds`. */
#define PATH_BITS 12
__attribute__((noinline)) void spin_leaf(void)
{
    unsigned long x = sink;
    for (long i = 0; i < 150000; i++)
        x = x * 5 + (unsigned long)i;
    keep(x);
}

__attribute__((noinline)) void turn(unsigned path, int level);

__attribute__((noinline)) void left(unsigned path, int level) { turn(path, level + 1); keep(level); }
__attribute__((noinline)) void right(unsigned path, int level) { turn(path, level + 1); keep(level); }

__attribute__((noinline)) void turn(unsigned path, int level)
{
    if (level == PATH_BITS)
        spin_leaf();
    else if (path >> level & 1)
        right(path, level);
    else
        left(path, level);
}

__attribute__((noinline)) void paths(double seconds)
{
    double start = cpu(CLOCK_THREAD_CPUTIME_ID);
    do {
        for (unsigned path = 0; path < 1u << PATH_BITS; path++)
            turn(path, 0);
    } while (cpu(CLOCK_THREAD_CPUTIME_ID) - start < seconds);
}

/* "unlinked": a function whose every instruction but one runs while its frame is not linked into the
 * frame-pointer chain (endbr64, push %rbp, mov %rsp,%rbp, then pop %rbp, ret), called in a loop: a
 * frame-pointer walk from any of those skips unlinked_loop, unless the profiler puts it back. Its CFI
 * says where the return address is at each instruction, for the CFI unwinders. */
__asm__(".text\n.globl unlinked\n.type unlinked, @function\nunlinked:\n.cfi_startproc\n"
        "endbr64\npush %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset %rbp, -16\nmov %rsp, %rbp\n"
        ".cfi_def_cfa_register %rbp\npop %rbp\n.cfi_def_cfa %rsp, 8\nret\n.cfi_endproc\n"
        ".size unlinked, .-unlinked\n");
void unlinked(void);

__attribute__((noinline)) void unlinked_loop(double seconds)
{
    double start = cpu(CLOCK_THREAD_CPUTIME_ID);
    do {
        for (int i = 0; i < 100000; i++)
            unlinked();
    } while (cpu(CLOCK_THREAD_CPUTIME_ID) - start < seconds);
}

__attribute__((noinline)) void spin_read(int fd, char *buf)
{
    if (read(fd, buf, 1 << 20) < 0)
        exit(1);
}

int main(int argc, char **argv)
{
    const char *mode = argv[1];
    double seconds = atof(argv[2]), own[3] = {0, 0, 0};
    char line[64], *buf = malloc(1 << 20);
    void (*jit)(void) = 0;
    if (!strcmp(mode, "jit")) {
        /* mov ecx, 2000000; 1: dec ecx; jnz 1b; ret */
        static const unsigned char code[] = {0xb9, 0x80, 0x84, 0x1e, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3};
        unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memcpy(page, code, sizeof(code));
        jit = (void (*)(void))page;
        char path[64];
        snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
        FILE *map = fopen(path, "w");
        fprintf(map, "this is not a map line\n%lx zz broken\n\n%lx %zx jit_spin_loop\nffff\n",
                (unsigned long)page, (unsigned long)page, sizeof(code));
        fclose(map);
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    double p0 = cpu(CLOCK_PROCESS_CPUTIME_ID);
    if (!strcmp(mode, "hot")) {
        work(seconds, own);
    } else if (!strcmp(mode, "paths")) {
        paths(seconds);
    } else if (!strcmp(mode, "unlinked")) {
        unlinked_loop(seconds);
    } else if (!strcmp(mode, "zero")) {
        int fd = open("/dev/zero", O_RDONLY);
        while (cpu(CLOCK_THREAD_CPUTIME_ID) - p0 < seconds)
            spin_read(fd, buf);
    } else {
        while (cpu(CLOCK_THREAD_CPUTIME_ID) - p0 < seconds)
            jit();
    }
    double p1 = cpu(CLOCK_PROCESS_CPUTIME_ID);
    printf("{\"cpu_s\": %.6f, \"hot_a\": %.6f, \"hot_b\": %.6f, \"hot_c\": %.6f}\n", p1 - p0, own[0], own[1], own[2]);
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 0;
    return 0;
}
"""

SHARES_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>""" + HOT_A_C + r"""
/* the same loop as hot_a: their times follow the iterations asked for */
__attribute__((noinline)) void hot_b(long n)
{
    unsigned long x = sink;
    for (long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    keep(x);
}

__attribute__((noinline)) void work(long a_permille, double seconds, double own[2])
{
    double start = cpu(CLOCK_THREAD_CPUTIME_ID), t0, t1, t2;
    unsigned long r = 12345;
    do {
        long n = drawn(&r, 4000000);   /* a turn ~4.3 ms, sd ~1.5: no lockstep with a 1 kHz sampler */
        t0 = cpu(CLOCK_THREAD_CPUTIME_ID);
        hot_a(n * a_permille / 1000);
        t1 = cpu(CLOCK_THREAD_CPUTIME_ID);
        hot_b(n * (1000 - a_permille) / 1000);
        t2 = cpu(CLOCK_THREAD_CPUTIME_ID);
        own[0] += t1 - t0;
        own[1] += t2 - t1;
    } while (t2 - start < seconds);
}

int main(int argc, char **argv)
{
    double own[2] = {0, 0};
    char line[64];
    if (argc != 3)
        return 2;
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    double p0 = cpu(CLOCK_PROCESS_CPUTIME_ID);
    work(atol(argv[1]), atof(argv[2]), own);
    double p1 = cpu(CLOCK_PROCESS_CPUTIME_ID);
    printf("{\"cpu_s\": %.6f, \"hot_a\": %.6f, \"hot_b\": %.6f}\n", p1 - p0, own[0], own[1]);
    fflush(stdout);
    fgets(line, sizeof(line), stdin);
    return 0;
}
"""


def build_c(source: str, directory, name: str) -> str:
    """`source` built as directory/name with frame pointers everywhere: leaf functions keep theirs, and
    no caller vanishes in a tail call (gcc from the distro)."""
    if not shutil.which("gcc"):
        pytest.fail("gcc is needed to build the workload (scripts/apt-packages.txt)")
    src, exe = directory / f"{name}.c", directory / name
    src.write_text(source)
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
                    "-fno-optimize-sibling-calls", "-o", str(exe), str(src)], check=True)
    return str(exe)


def build_shares(directory) -> str:
    return build_c(SHARES_C, directory, "shares")


def own_shares(report: dict) -> dict[str, float]:
    """Percent of the process's CPU time in each hot function, by its own clock."""
    return {f: 100.0 * report[f] / report["cpu_s"] for f in ("hot_a", "hot_b")}


class Waiting:
    """A workload program that prints "ready PID" and waits on stdin until tracing has started."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        word, pid = self.proc.stdout.readline().split()
        assert word == "ready"
        self.pid = int(pid)

    def release(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def report(self) -> dict:
        """Its own report, a JSON line (blocks until the work is done)."""
        return json.loads(self.proc.stdout.readline())

    def end(self) -> None:
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=30)


def shares(exe: str, a_permille: int, seconds: float) -> Waiting:
    """The shares workload, hot_a's part of each round given in permille."""
    return Waiting([exe, str(a_permille), str(seconds)])
