"""A C workload whose threads' events end at random moments across hundreds of interval cuts, with each
thread's own books (kernel schedstat and context-switch counts) bracketing its work.

Three threads start when a line arrives on stdin: a sleeper (naps of 0.3-2.3 ms), a burner (bursts of
0.5-4.5 ms of CPU, then a 0.2 ms nap) and a spinner (CPU only, preempted now and then). Each reads its
own /proc/thread-self/schedstat and status before its first event and after its last, with nothing
between those reads and its birth or exit that blocks, so its books cover every block and every run
the tracer can see: blocks = voluntary switches in the bracket; runs = all switches in it plus the one
at exit. One JSON line per thread goes to stdout once all three are done; the process then waits for
stdin to close."""

import os
import subprocess

CUT_WORKLOAD_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds;

struct books { long long wall, run, wait, vol, invol; };
struct report { const char *role; int tid; struct books before, after; };

static long long now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* read with read(2) into a stack buffer: no stdio allocation between the brackets */
static void own_books(struct books *b) {
    char buf[4096]; int fd; ssize_t n;
    fd = open("/proc/thread-self/schedstat", 0); n = read(fd, buf, sizeof buf - 1); close(fd); buf[n > 0 ? n : 0] = 0;
    sscanf(buf, "%lld %lld", &b->run, &b->wait);
    fd = open("/proc/thread-self/status", 0); n = read(fd, buf, sizeof buf - 1); close(fd); buf[n > 0 ? n : 0] = 0;
    b->vol = atoll(strstr(buf, "\nvoluntary_ctxt_switches:") + 25);
    b->invol = atoll(strstr(buf, "nonvoluntary_ctxt_switches:") + 27);
    b->wall = now_ns();
}

static void nap_ns(long ns) {
    struct timespec ts = {0, ns}; nanosleep(&ts, NULL);
}

static void burn_ns(long long ns) {
    long long end = now_ns() + ns; volatile unsigned x = 0;
    while (now_ns() < end) for (int i = 0; i < 1000; i++) x += i;
}

static void *work(void *arg) {
    struct report *r = arg;
    unsigned seed = (unsigned)(size_t)arg;
    r->tid = gettid();
    own_books(&r->before);
    long long end = r->before.wall + (long long)(seconds * 1e9);
    while (now_ns() < end) {
        if (r->role[0] == 's' && r->role[1] == 'l') nap_ns(1000000 + rand_r(&seed) % 4000000);
        else if (r->role[0] == 'b') { burn_ns(500000 + rand_r(&seed) % 4000000); nap_ns(200000); }
        else burn_ns(10000000);
    }
    own_books(&r->after);
    return NULL;
}

int main(int argc, char **argv) {
    seconds = atof(argv[1]);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    struct report reports[3] = {{"sleeper"}, {"burner"}, {"spinner"}};
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, work, &reports[i]);
    for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < 3; i++) {
        struct report *r = &reports[i];
        printf("{\"role\": \"%s\", \"tid\": %d, \"wall_ns\": %lld, \"run_ns\": %lld, \"wait_ns\": %lld, "
               "\"voluntary\": %lld, \"involuntary\": %lld}\n", r->role, r->tid, r->after.wall - r->before.wall,
               r->after.run - r->before.run, r->after.wait - r->before.wait, r->after.vol - r->before.vol,
               r->after.invol - r->before.invol);
    }
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {}
    return 0;
}
"""


def build_cut_workload(directory: str) -> str:
    src, out = os.path.join(directory, "cut_workload.c"), os.path.join(directory, "cut_workload")
    with open(src, "w") as f:
        f.write(CUT_WORKLOAD_C)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", out, src], check=True)
    return out
