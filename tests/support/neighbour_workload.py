"""A workload that raises every tracepoint a metric attaches to, each at least FLOORS[name] times in its
own tasks (the floor is what this code does, counted by hand below), so `perf stat` beside a metric
has something known to count. Run as a script in a directory on a block device: `python3
neighbour_workload.py DIR`."""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import subprocess
import sys
import threading

N = 2000        # syscalls, pipe round trips, datagrams, pages
SPAWNS = 20     # fork + exec + exit
THREADS = 20
CONNECTS = 20
PAGE = mmap.PAGESIZE
SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}[os.uname().machine]


class SchedAttr(ctypes.Structure):
    """struct sched_attr as of Linux 3.14 (SCHED_ATTR_SIZE_VER0, 48 bytes)."""
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64)]

# The least each tracepoint fires in the workload's own tasks (the threads, the spawned children, the
# kernel work they do in their own context). block_rq_complete runs in the disk's interrupt, where the
# current task is anyone's, so it has a floor only in a system-wide (-a) count.
FLOORS = {
    "syscalls:sys_enter_read": N, "syscalls:sys_exit_read": N,
    "syscalls:sys_enter_pread64": N, "syscalls:sys_exit_pread64": N,
    "syscalls:sys_enter_setpriority": N, "syscalls:sys_exit_setpriority": N,
    "syscalls:sys_enter_sched_setscheduler": N, "syscalls:sys_exit_sched_setscheduler": N,
    "syscalls:sys_enter_sched_setparam": N, "syscalls:sys_exit_sched_setparam": N,
    "syscalls:sys_enter_sched_setattr": N, "syscalls:sys_exit_sched_setattr": N,
    # each side of the ping-pong usually blocks and is woken N times (about 2N of each); half of that
    # even when the other side often answers before it has gone to sleep
    "sched:sched_switch": N // 2, "sched:sched_wakeup": N // 2,
    "sched:sched_process_exec": SPAWNS, "sched:sched_process_exit": SPAWNS + THREADS,
    "sched:sched_process_fork": SPAWNS + THREADS, "sched:sched_wakeup_new": SPAWNS + THREADS,
    "task:task_newtask": SPAWNS + THREADS,
    "kmem:kmalloc": N, "kmem:kfree": N, "kmem:kmem_cache_alloc": N, "kmem:kmem_cache_free": N,
    "net:net_dev_queue": N, "net:net_dev_xmit": N,
    # the N loopback packets are received through the NET_RX softirq (run at the sender's bh enable or in
    # ksoftirqd, several packets a run): at least one run, in a system-wide count only
    "irq:softirq_entry": 1, "irq:softirq_exit": 1,
    "sock:inet_sock_set_state": 3 * CONNECTS,
    "exceptions:page_fault_user": N, "minor-faults": N, "major-faults": 0,
    "raw_syscalls:sys_enter": 10 * N, "raw_syscalls:sys_exit": 10 * N,
    "filemap:mm_filemap_add_to_page_cache": N, "filemap:mm_filemap_get_pages": N,
    "writeback:writeback_dirty_folio": N,
    "block:block_io_start": 1, "block:block_rq_issue": 1, "block:block_rq_complete": 1, "block:block_io_done": 1,
    # this process moved into a cgroup v2 group of its own and back: one attach each
    "cgroup:cgroup_attach_task": 2,
}


def syscalls() -> None:
    fd = os.open("/dev/zero", os.O_RDONLY)
    for _ in range(N):
        os.read(fd, 1)
        os.pread(fd, 1, 0)
    os.close(fd)
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    param = os.sched_param(0)
    attr = SchedAttr(size=ctypes.sizeof(SchedAttr), sched_policy=os.SCHED_OTHER, sched_nice=nice)
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(N):   # each sets what is already set: the calls, not a change, are what counts
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        os.sched_setscheduler(0, os.SCHED_OTHER, param)
        os.sched_setparam(0, param)
        if libc.syscall(SYS_SCHED_SETATTR, 0, ctypes.byref(attr), 0) != 0:
            raise OSError(ctypes.get_errno(), "sched_setattr")


def ping_pong() -> None:
    """N round trips with a thread: each side blocks (a switch) and wakes the other (a wakeup) N times."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()

    def echo() -> None:
        for _ in range(N):
            os.read(a_r, 1)
            os.write(b_w, b"x")

    t = threading.Thread(target=echo)
    t.start()
    for _ in range(N):
        os.write(a_w, b"x")
        os.read(b_r, 1)
    t.join()
    for fd in (a_r, a_w, b_r, b_w):
        os.close(fd)


def tasks() -> None:
    for _ in range(SPAWNS):
        subprocess.run(["/bin/true"], check=True)
    threads = [threading.Thread(target=lambda: None) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def allocations() -> None:
    """A pipe's buffer array is kmalloc'ed and each pipe's two files come from a slab cache (filp)."""
    for _ in range(N):
        r, w = os.pipe()
        os.close(r)
        os.close(w)


def network() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(N):
        tx.sendto(b"x", rx.getsockname())
        rx.recv(1)
    listener = socket.create_server(("127.0.0.1", 0))
    for _ in range(CONNECTS):   # CLOSE->SYN_SENT->ESTABLISHED, then the close: >= 3 state changes
        c = socket.create_connection(listener.getsockname())
        s, _ = listener.accept()
        c.close()
        s.close()
    for sock in (rx, tx, listener):
        sock.close()


def memory() -> None:
    area = mmap.mmap(-1, N * PAGE)
    for page in range(N):
        area[page * PAGE] = 1
    area.close()


def files(directory: str) -> None:
    """N pages written through the page cache (each added and dirtied once), written back to the disk
    (block I/O), dropped from the cache and read back page by page."""
    path = os.path.join(directory, "neighbour.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        for page in range(N):
            os.pwrite(fd, b"n" * PAGE, page * PAGE)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        for page in range(N):
            os.pread(fd, PAGE, page * PAGE)
    finally:
        os.close(fd)
        os.unlink(path)


def cgroup_moves() -> None:
    """Into a new cgroup v2 group and back to where it was (needs root and a cgroup2 mount)."""
    with open("/proc/self/mountinfo") as f:   # "... mount-point opts - fstype source ..."
        mounts = [(line.split()[4], line.split(" - ")[1].split()[0]) for line in f]
    mount = next((point for point, fstype in mounts if fstype == "cgroup2"), None)
    with open("/proc/self/cgroup") as f:
        home = next((line[3:].strip() for line in f if line.startswith("0::")), None)
    if mount is None or home is None:
        raise SystemExit("neighbour_workload: no cgroup v2 hierarchy to move in")
    group = os.path.join(mount, f"neighbour-{os.getpid()}")
    os.mkdir(group)
    try:
        for target in (group, os.path.join(mount, home.lstrip("/"))):
            with open(os.path.join(target, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    finally:
        os.rmdir(group)


def main(directory: str) -> None:
    syscalls()
    ping_pong()
    tasks()
    allocations()
    network()
    memory()
    files(directory)
    cgroup_moves()


if __name__ == "__main__":
    main(sys.argv[1])
