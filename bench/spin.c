/* spin: a CPU-bound loop through main -> a -> b -> c -> hot (noinline; -O2 keeps no frame pointers on
 * x86-64), timed by itself: prints the calls of hot per second of wall time over SECONDS. Pinned to one
 * CPU with the samplers on the other, what a sampler takes from it is what each sample costs on the
 * sampled CPU (the interrupt, the stack walk or copy, the BPF program), not its process's work.
 * usage: spin SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long hot(unsigned long x)
{
    for (unsigned long i = 0; i < 1000; i++)
        sink += i ^ x;
    return sink;
}
__attribute__((noinline)) unsigned long c(unsigned long x) { return hot(x + 1) * 3; }
__attribute__((noinline)) unsigned long b(unsigned long x) { return c(x + 2) * 5; }
__attribute__((noinline)) unsigned long a(unsigned long x) { return b(x + 3) * 7; }

int main(int argc, char **argv)
{
    if (argc != 2 || atof(argv[1]) <= 0) {
        fprintf(stderr, "usage: spin SECONDS\n");
        return 2;
    }
    double start = now_s(), end = start + atof(argv[1]), t;
    unsigned long calls = 0;
    do {
        for (unsigned long k = 0; k < 1000; k++)
            sink += a(k);
        calls += 1000;
    } while ((t = now_s()) < end);
    printf("%.1f\n", calls / (t - start));
    return 0;
}
