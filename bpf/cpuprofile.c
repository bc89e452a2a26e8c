/* cpuprofile: sampled on-CPU stacks. A CPU-clock perf event fires HZ times a second on every CPU; each
 * firing sends one sample of the task it interrupted to a ring buffer: process, thread, command, cgroup, its
 * kernel stack (the kernel's frame walk, bpf_get_stack) and its user stack — with -DUSER_FP the frame
 * pointer walk, with -DUSER_DWARF the user registers and a copy of the top of the user stack
 * (ustack.h), unwound in user space with CFI.
 *
 * Samples are not counted by stack id in a map: a stack map's ids collide (a few per cent of stacks at
 * a few thousand buckets, each bucket preallocated at 1 KiB), and a ring buffer of whole stacks costs
 * memory only for the samples in flight. The user side aggregates.
 *
 * User frames are named from a snapshot of the process's maps, read at the end of the interval of its
 * first sample. A fork child that runs briefly and exits (a shell's, a server's worker) is gone by then:
 * `forked` keeps each new task's parent (sched_process_fork) until it execs (sched_process_exec), so the
 * user side names a child gone before its maps were read from its parent's, which it still had.
 *
 * -DINCLUDE_IDLE counts the idle task (pid 0); -DUSER_ONLY / -DKERNEL_ONLY take one stack only.
 * -DPYTHON_FRAMES (with -DUSER_DWARF) adds the CPython frame chain of python processes (pystack.h). */
/* The program reads no field of its context (bpf_get_stack takes it whole), so it declares it void *:
 * the header that defines struct bpf_perf_event_data pulls in linux/sched.h and the headers under it,
 * which made its start 3.1 s instead of 0.9 s. */
#include "common.h"

#ifndef RING_PAGES
#define RING_PAGES 64
#endif
#define STACK_DEPTH 127   /* the kernel's limit for one stack walk */

#ifdef USER_DWARF
#include "ustack.h"
#ifdef PYTHON_FRAMES
#include "pystack.h"
#endif
#endif

struct sample_t {
    u32 tgid;
    u32 tid;
    char comm[TASK_COMM_LEN];
    s32 kdepth;            /* frames in kips, or the walk's negative error */
    s32 udepth;            /* frames in uips (frame pointers), or the walk's negative error */
    u64 cgid;              /* the task's cgroup (v2): a helper, no struct read */
    u64 kips[STACK_DEPTH]; /* innermost first */
#ifdef USER_DWARF
    struct ustack_t user;
#ifdef PYTHON_FRAMES
    struct pystack_t py;   /* after the stack copy: its offset is USER + sizeof(struct ustack_t) */
#endif
#else
    u64 uips[STACK_DEPTH];
#endif
};

BPF_RINGBUF_OUTPUT(samples, RING_PAGES);
#if defined(USER_DWARF) && defined(PYTHON_FRAMES)
PY_PROCS_MAP;
#endif
LOST_COUNTER(ring_full);   /* samples dropped: the ring buffer was full (the user side fell behind) */

#ifndef KERNEL_ONLY
/* new task -> its parent's tgid, until it execs. Keyed by the new task's id, which for a thread is a
 * tid that no process's samples carry: a thread's entry is never looked up, and the LRU drops it. */
BPF_TABLE("lru_hash", u32, u32, forked, 16384);

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    u64 id = bpf_get_current_pid_tgid();   /* the parent */
    if (skip_task(id))
        return PASS_ON;
    u32 child = args->child_pid, parent = id >> 32;
    forked.update(&child, &parent);
    return PASS_ON;
}

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;   /* its maps are its own from now on */
    forked.delete(&tgid);
    return PASS_ON;
}
#endif

int on_sample(void *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
#ifndef INCLUDE_IDLE
    if ((u32)id == 0)
        return 0;
#endif
    if (skip_task(id))
        return 0;

    struct sample_t *s = samples.ringbuf_reserve(sizeof(struct sample_t));
    if (!s) {
        int zero = 0;
        u64 *lost = ring_full.lookup(&zero);
        if (lost)
            (*lost)++;
        return 0;
    }
    s->tgid = id >> 32;
    s->tid = (u32)id;
    bpf_get_current_comm(&s->comm, sizeof(s->comm));
    s->cgid = bpf_get_current_cgroup_id();
    s->kdepth = 0;
    s->udepth = 0;
#ifndef USER_ONLY
    long kbytes = bpf_get_stack(ctx, s->kips, sizeof(s->kips), 0);
    s->kdepth = kbytes < 0 ? kbytes : (u64)kbytes / 8;
#endif
#ifndef KERNEL_ONLY
#ifdef USER_DWARF
    s->udepth = ustack_capture(&s->user) == 0 ? 0 : -14;
#ifdef PYTHON_FRAMES
    pystack_capture(py_procs.lookup(&s->tgid), s->tid, &s->py);
#endif
#else
    long ubytes = bpf_get_stack(ctx, s->uips, sizeof(s->uips), BPF_F_USER_STACK);
    s->udepth = ubytes < 0 ? ubytes : (u64)ubytes / 8;
#endif
#endif
    /* no wakeup: the reader takes what has accumulated every 50 ms (bcctool/ringreader.py), and the
     * ring holds 0.25 s of samples; a wakeup per sample cost the reader a Python round trip each */
    samples.ringbuf_submit(s, BPF_RB_NO_WAKEUP);
    return 0;
}
