/* getppid: N raw getppid system calls, timed; prints the nanoseconds per call.
 *
 * syscall(SYS_getppid) is used rather than getppid() so no libc caching can skip the kernel. The
 * loop is timed by itself (CLOCK_MONOTONIC), so process start-up and a tracer's attach are not in it.
 * usage: getppid N */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: getppid N (N > 0)\n");
        return 2;
    }
    for (long i = 0; i < n / 100 + 1; i++)   /* warm up: page in, settle the CPU frequency */
        syscall(SYS_getppid);
    double start = now_ns();
    for (long i = 0; i < n; i++)
        syscall(SYS_getppid);
    double elapsed = now_ns() - start;
    printf("%.2f\n", elapsed / n);
    return 0;
}
