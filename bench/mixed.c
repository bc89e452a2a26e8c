/* mixed: a workload that touches every subsystem the ten metrics watch, timed.
 *
 * Each round: 2,000 getppid syscalls; a 4 KB write and fsync to a file in DIR (block I/O, page cache);
 * a loopback TCP connect, 4 KB sent and received, close (connect latency, packet transmit); a fork
 * whose child exits at once and is reaped (scheduling, process lifetime); 2 MB of anonymous memory
 * touched page by page and unmapped (page faults, kernel memory); a 100 us sleep (off-CPU time).
 * Prints the elapsed seconds of ROUNDS rounds. With ROUNDS 0 it runs until killed, napping 10 ms
 * instead of 100 us each round: a light background load that gives every metric something to see.
 * usage: mixed ROUNDS DIR */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SYSCALLS 2000
#define IO_BYTES 4096
#define TOUCH_BYTES (2 << 20)

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int listener(struct sockaddr_in *addr)
{
    socklen_t len = sizeof(*addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)addr, &len))
        die("listener");
    return fd;
}

static void tcp_round(int lfd, const struct sockaddr_in *addr, char *buf)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (const struct sockaddr *)addr, sizeof(*addr)))
        die("connect");
    int s = accept(lfd, NULL, NULL);
    if (s < 0 || write(c, buf, IO_BYTES) != IO_BYTES)
        die("accept/write");
    for (int got = 0; got < IO_BYTES;) {
        ssize_t n = read(s, buf, IO_BYTES - got);
        if (n <= 0)
            die("read");
        got += n;
    }
    close(c);
    close(s);
}

static void file_round(int fd, char *buf)
{
    if (pwrite(fd, buf, IO_BYTES, 0) != IO_BYTES || fsync(fd))
        die("write/fsync");
}

static void fork_round(void)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
}

static void fault_round(void)
{
    char *p = mmap(NULL, TOUCH_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    for (long off = 0; off < TOUCH_BYTES; off += 4096)
        p[off] = 1;
    munmap(p, TOUCH_BYTES);
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) < 0) {
        fprintf(stderr, "usage: mixed ROUNDS DIR (ROUNDS 0: until killed)\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    char path[4096], buf[IO_BYTES];
    snprintf(path, sizeof(path), "%s/mixed.%d", argv[2], getpid());
    memset(buf, 'x', sizeof(buf));
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die(path);
    unlink(path);
    struct sockaddr_in addr;
    int lfd = listener(&addr);
    struct timespec nap = {0, rounds ? 100000 : 10000000};

    double start = now_s();
    for (long r = 0; rounds == 0 || r < rounds; r++) {
        for (int i = 0; i < SYSCALLS; i++)
            syscall(SYS_getppid);
        file_round(fd, buf);
        tcp_round(lfd, &addr, buf);
        fork_round();
        fault_round();
        nanosleep(&nap, NULL);
    }
    printf("%.6f\n", now_s() - start);
    return 0;
}
