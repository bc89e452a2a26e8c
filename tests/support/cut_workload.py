"""A C workload whose threads' events end at random moments across hundreds of interval cuts, with each
thread's own books (kernel schedstat and context-switch counts) bracketing its work.

Three threads start when a line arrives on stdin: a sleeper (naps of 1-5 ms), a burner (bursts of
0.5-4.5 ms of CPU, then a 0.2 ms nap) and a spinner (CPU only, preempted now and then). Each reads its
own /proc/thread-self/schedstat before its first event and after its last (wall, run and wait times over
that bracket, for the off-CPU time), then parks in a block that does not end while the tracer runs. Its
switch counts and run time are read by the main thread from outside once it is parked (blocked in the
park's read(2)): they cover its whole life, every block and every run the tracer can see, the park's
switch out included. A thread's own last read cannot: it can be preempted between that read and its park
(1 thread in 60 one-second runs here, untraced), a switch and a run no book of its own would hold.
One JSON line per thread goes to stdout once all three have parked; the process then waits for stdin to
close."""

import os
import subprocess

CUT_WORKLOAD_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static int never[2];   /* a pipe nothing is written to: where a thread parks after its last books */

struct books { long long wall, run, wait; };
struct life { long long run, vol, invol; };
struct report { const char *role; int tid; int done; long long nap_switches; struct books before, after; };


static long long now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* read with read(2) into a stack buffer: no stdio allocation between the brackets */
static int read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, 0); ssize_t n = read(fd, buf, size - 1); close(fd); buf[n > 0 ? n : 0] = 0;
    return n > 0;
}

static void own_books(struct books *b) {
    char buf[256];
    read_file("/proc/thread-self/schedstat", buf, sizeof buf);
    sscanf(buf, "%lld %lld", &b->run, &b->wait);
    b->wall = now_ns();
}

static void nap_ns(long ns) {
    struct timespec ts = {0, ns}; nanosleep(&ts, NULL);
}

/* a nap, and the voluntary switches it took (getrusage: no /proc read between the brackets) */
static void nap_counted(struct report *r, long ns) {
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before); nap_ns(ns); getrusage(RUSAGE_THREAD, &after);
    r->nap_switches += after.ru_nvcsw - before.ru_nvcsw;
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
        if (r->role[0] == 's' && r->role[1] == 'l') nap_counted(r, 1000000 + rand_r(&seed) % 4000000);
        else if (r->role[0] == 'b') { burn_ns(500000 + rand_r(&seed) % 4000000); nap_counted(r, 200000); }
        else burn_ns(10000000);
    }
    own_books(&r->after);
    /* parked, not exited: a block that does not end while the tracer runs, where an exit would block
       unseen by the books (the stack's unmapping contends for the address space's lock) */
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);   /* no wakeup: a woken main could preempt this */
    char byte;
    read(never[0], &byte, 1);
    return NULL;
}

/* a parked thread's books from outside: /proc/PID/task/TID/syscall names the syscall only once the thread
   is off its CPU in it, and blocked in read(2) it is in its park, whose switch out is counted */
static void parked_books(int tid, struct life *l) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    while (!read_file(path, buf, sizeof buf) || buf[0] < '0' || buf[0] > '9' || atoi(buf) != SYS_read)
        nap_ns(1000000);
    snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
    read_file(path, buf, sizeof buf);
    l->vol = atoll(strstr(buf, "\nvoluntary_ctxt_switches:") + 25);
    l->invol = atoll(strstr(buf, "nonvoluntary_ctxt_switches:") + 27);
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
    read_file(path, buf, sizeof buf);
    sscanf(buf, "%lld", &l->run);
}

int main(int argc, char **argv) {
    seconds = atof(argv[1]);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    struct report reports[3] = {{"sleeper"}, {"burner"}, {"spinner"}};
    pthread_t threads[3];
    if (pipe(never) != 0) return 1;
    for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, work, &reports[i]);
    for (int i = 0; i < 3; i++)
        while (!__atomic_load_n(&reports[i].done, __ATOMIC_ACQUIRE)) nap_ns(10000000);
    for (int i = 0; i < 3; i++) {
        struct report *r = &reports[i];
        struct life life;
        parked_books(r->tid, &life);
        /* times over the bracket (the thread's birth has no clock); switch counts and run time over its
           whole life to its park: a thread starts at zero, and a block or a preemption before its first
           books (its stack's first faults can wait on the address space's lock) is one too */
        printf("{\"role\": \"%s\", \"tid\": %d, \"wall_ns\": %lld, \"run_ns\": %lld, \"wait_ns\": %lld, "
               "\"voluntary\": %lld, \"involuntary\": %lld, \"life_run_ns\": %lld, \"nap_switches\": %lld}\n", r->role, r->tid,
               r->after.wall - r->before.wall, r->after.run - r->before.run, r->after.wait - r->before.wait,
               life.vol, life.invol, life.run, r->nap_switches);
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
