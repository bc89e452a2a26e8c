/* cpuprofile: sampled on-CPU stacks. A CPU-clock perf event fires HZ times a second on every CPU; each
 * firing sends one sample of the task it interrupted to a ring buffer: process, thread, command, cgroup, its
 * kernel stack (the kernel's frame walk, bpf_get_stack) and its user stack — with -DUSER_FP the frame
 * pointer walk, with -DUSER_DWARF the user registers and a copy of the top of the user stack
 * (ustack.h), unwound in user space with CFI.
 *
 * No mode counts by stack id in a stack map (BPF_STACK_TRACE): its ids collide (a few per cent of
 * stacks at a few thousand buckets, more under load, each bucket preallocated at 1 KiB). Samples printed
 * every interval reach user space whole (a ring buffer costs memory only for the samples in flight),
 * and the counted modes below keep each distinct stack once under its 64-bit hash (stackstore.h).
 *
 * User frames are named from a snapshot of the process's maps, read at the end of the interval of its
 * first sample. A fork child that runs briefly and exits (a shell's, a server's worker) is gone by then:
 * `forked` keeps each new task's parent (sched_process_fork) until it execs (sched_process_exec), so the
 * user side names a child gone before its maps were read from its parent's, which it still had.
 *
 * -DCOUNT_IN_KERNEL (--folded with frame-pointer stacks: a whole run, printed at the end, BCC profile's
 * job) counts samples in a map keyed by process, cgroup, command and the hashes of its two stacks (the
 * kernel's walks, frame pointers for the user stack), each stack stored once in `stacks`, as BCC's
 * profile counts by stack id, without its collisions: no sample reaches user space, which hears only of
 * each new process (its maps are read while it lives) and, at the end, of the fork children sampled
 * before they exec'd (`children`).
 *
 * -DUSER_KERNEL (--user-stacks kernel) unwinds user stacks here, with the stack-delta tables of kunwind.h,
 * and counts samples in the kernel per interval (epoch.h): keyed by process, cgroup, command and the
 * 64-bit hashes of its kernel, user and Python stacks, each stack stored once in `stacks`. User space
 * reads the finished interval's counts and only the stacks it has not seen. A process met for the first
 * time is said on ku_events and walked by frame pointers until user space has loaded its mappings; a
 * fork child that has not exec'd walks its parent's. -DUNWIND_CHECK also sends each sample's stack copy
 * beside its kernel-unwound pcs (`checks`), for the test that compares them with bcctool/unwind.py.
 *
 * -DINCLUDE_IDLE counts the idle task (pid 0); -DUSER_ONLY / -DKERNEL_ONLY take one stack only.
 * -DPYTHON_FRAMES (with -DUSER_DWARF or -DUSER_KERNEL) adds the CPython frame chain of python processes (pystack.h). */
/* The program reads no field of its context (bpf_get_stack takes it whole), so it declares it void *:
 * the header that defines struct bpf_perf_event_data pulls in linux/sched.h and the headers under it,
 * which made its start 3.1 s instead of 0.9 s. */
#include "common.h"

#ifndef RING_PAGES
#define RING_PAGES 64
#endif
#define STACK_DEPTH 127   /* the kernel's limit for one stack walk */

#if defined(USER_DWARF) || defined(UNWIND_CHECK)
#include "ustack.h"
#endif
#include "fpleaf.h"
#if defined(PYTHON_FRAMES) && (defined(USER_DWARF) || defined(USER_KERNEL))
#include "pystack.h"
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

#if defined(COUNT_IN_KERNEL) || defined(USER_KERNEL)
#include "stackstore.h"
#ifndef COUNT_KEYS
#define COUNT_KEYS 16384
#endif
#ifndef STACKS
#define STACKS 16384
#endif
/* each distinct stack once, under its hash (stackstore.h): memory as used */
BPF_F_TABLE("hash", u64, struct ku_stack, stacks, STACKS, BPF_F_NO_PREALLOC);
static __always_inline struct ku_stack *ku_stack_at(u64 hash) { return stacks.lookup(&hash); }
static __always_inline long ku_stack_insert(u64 hash, struct ku_stack *s) { return stacks.insert(&hash, s); }
#endif

#ifdef COUNT_IN_KERNEL
struct count_key_t {
    u32 tgid;
    u32 pad;
    u64 cgid;
    u64 kstack;            /* the kernel stack's hash in `stacks` (a failed walk: a stack of its error); 0: none */
    u64 ustack;            /* the user stack's */
    char comm[TASK_COMM_LEN];
};
BPF_HASH(counts, struct count_key_t, u64, COUNT_KEYS);
BPF_PERCPU_ARRAY(walked, struct ku_stack, 1);    /* the stack being stored: too large for the BPF stack */
BPF_TABLE("lru_hash", u32, u8, known, 16384);   /* processes the user side has heard of */
BPF_RINGBUF_OUTPUT(new_procs, 4);                /* each once */
BPF_HASH(children, u32, u32, 65536);             /* sampled fork children that had not exec'd -> parent */
LOST_COUNTER(stacks_full);     /* samples dropped: a new stack found `stacks` full */
LOST_COUNTER(counts_full);     /* samples dropped: the counts map was full */
LOST_COUNTER(children_full);   /* fork children whose parent could not be kept: their user frames unnamed */
#elif !defined(USER_KERNEL)
BPF_RINGBUF_OUTPUT(samples, RING_PAGES);
#endif
#if defined(PYTHON_FRAMES) && (defined(USER_DWARF) || defined(USER_KERNEL))
PY_PROCS_MAP;
#endif
#if !defined(COUNT_IN_KERNEL) && !defined(USER_KERNEL)
LOST_COUNTER(ring_full);   /* samples dropped: the ring buffer was full (the user side fell behind) */
#endif

#ifdef USER_KERNEL
#include "epoch.h"
#include "kuwalk.h"
struct kcount_key_t {
    u32 slot;              /* the epoch's parity */
    u32 tgid;
    u64 cgid;
    u64 kstack;            /* the stacks' keys in `stacks`; 0: none */
    u64 ustack;
    u64 pystack;
    char comm[TASK_COMM_LEN];
};
struct scratch_t {         /* per CPU: too large for the BPF stack; carried over the walk's tail calls */
    struct ku_walk walk;
    struct ku_stack kernel;
    struct kcount_key_t key;
    u32 owner;             /* whose mappings walk the user stack (0: none) */
    u32 pad;
#ifdef PYTHON_FRAMES
    struct pystack_t py;
#endif
};
#ifdef PYTHON_FRAMES
_Static_assert(sizeof(struct pystack_t) == sizeof(struct ku_stack), "a Python stack is stored in `stacks` too");
#endif
BPF_ARRAY(epochs, struct epoch_t, 1);
BPF_HASH(kcounts, struct kcount_key_t, u64, COUNT_KEYS);
BPF_PERCPU_ARRAY(scratch, struct scratch_t, 1);
KU_WALK_MAPS;   /* ku_counters: [0] expression rows walked by frame pointers, [1] samples walked by frame
                   pointers because their process's mappings were not loaded yet, [2] frames walked by
                   frame pointers because their file's rows were not loaded yet (kuwalk.h) */
LOST_COUNTER(counts_full);     /* samples dropped: the counts map was full */
LOST_COUNTER(stacks_full);     /* samples dropped: a new stack found `stacks` full */
LOST_COUNTER(kernel_walk);     /* kernel stacks the kernel's walk failed (not "no kernel stack") */
#ifdef UNWIND_CHECK
struct check_t {           /* one sample's kernel walk and its stack copy, for the equality test */
    u32 tgid;
    u32 owner;
    struct ku_stack user;
    struct ustack_t copy;
};
BPF_RINGBUF_OUTPUT(checks, 256);
#endif

/* the map calls of kunwind.h and kuwalk.h, which BCC rewrites here only */
static __always_inline struct ku_proc_maps *ku_maps_of(u32 tgid) { return ku_maps.lookup(&tgid); }
static __always_inline struct ku_file *ku_file_at(u32 file) { return ku_files.lookup(&file); }
static __always_inline struct ku_row *ku_row_at(u32 index) { return ku_rows.lookup(&index); }
static __always_inline u32 *ku_proc_state(u32 tgid) { return ku_procs.lookup(&tgid); }
static __always_inline void ku_proc_set(u32 tgid, u32 state) { ku_procs.update(&tgid, &state); }
static __always_inline void ku_proc_drop(u32 tgid) { ku_procs.delete(&tgid); }
static __always_inline long ku_send(struct ku_event_t *e) { return ku_events.ringbuf_output(e, sizeof(*e), 0); }
static __always_inline void ku_tail(void *ctx) { ku_progs.call(ctx, 0); }

static __always_inline void ku_count(int slot, u64 n)
{
    u64 *c = ku_counters.lookup(&slot);
    if (c)
        *c += n;
}
#endif

#ifndef KERNEL_ONLY
/* new task -> its parent's tgid (0: none), until it execs. Keyed by the new task's id, which for a
 * thread is a tid that no process's samples carry: a thread's entry is never looked up. With
 * -DFORK_PIDS=pid_max an array indexed by pid, whose update costs least (bench/mixed.c forks 700 times
 * a second); where pid_max is large, an LRU hash. */
#ifdef FORK_PIDS
BPF_ARRAY(forked, u32, FORK_PIDS);

static __always_inline void set_parent(u32 task, u32 parent)
{
    u32 *slot = forked.lookup(&task);
    if (slot)
        *slot = parent;
}
#else
BPF_TABLE("lru_hash", u32, u32, forked, 16384);

static __always_inline void set_parent(u32 task, u32 parent)
{
    if (parent)
        forked.update(&task, &parent);
    else
        forked.delete(&task);
}
#endif

static __always_inline u32 parent_of(u32 tgid)
{
    u32 *parent = forked.lookup(&tgid);
    return parent ? *parent : 0;
}

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    u64 id = bpf_get_current_pid_tgid();   /* the parent */
    if (skip_task(id))
        return PASS_ON;
    set_parent(args->child_pid, id >> 32);
    return PASS_ON;
}

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;   /* its maps are its own from now on */
    set_parent(tgid, 0);
#ifdef COUNT_IN_KERNEL
    known.delete(&tgid);   /* its next sample says it anew: the user side reads its new maps */
    children.delete(&tgid);
#endif
#ifdef USER_KERNEL
    ku_procs.delete(&tgid);   /* likewise: its mappings are loaded anew */
#endif
    return PASS_ON;
}
#endif

#ifdef COUNT_IN_KERNEL
/* One of the sample's stacks walked by the kernel (flags: 0, or BPF_F_USER_STACK for the user stack by
 * frame pointers) and stored, its hash in *h: 0 for none (-EFAULT: no stack of that kind); a failed
 * walk is stored as a stack of no pcs and the walk's error. 0 when `stacks` had no room (counted). */
static __always_inline int walk_stored(void *ctx, struct ku_stack *s, u64 flags, u64 seed, u64 *h)
{
    long bytes = bpf_get_stack(ctx, s->pcs, STACK_DEPTH * 8, flags);
    if (flags & BPF_F_USER_STACK)
        bytes = fp_caller_restored(s->pcs, bytes, STACK_DEPTH);
    if (bytes == 0 || bytes == -14)
        return 1;
    s->depth = bytes > 0 ? (u64)bytes / 8 : 0;
    s->outcome = bytes > 0 ? 0 : bytes;
    *h = ku_store(s, s->depth, seed);
    if (*h)
        return 1;
    int first = 0;
    u64 *lost = stacks_full.lookup(&first);
    if (lost)
        (*lost)++;
    return 0;
}

static __always_inline int count_sample(void *ctx, u64 id)
{
    int first = 0;
    struct ku_stack *s = walked.lookup(&first);
    if (!s)
        return 0;
    struct count_key_t key = {.tgid = id >> 32};
    bpf_get_current_comm(&key.comm, sizeof(key.comm));
    key.cgid = bpf_get_current_cgroup_id();
#ifndef USER_ONLY
    if (!walk_stored(ctx, s, 0, KU_SEED_KERNEL, &key.kstack))
        return 0;
#endif
#ifndef KERNEL_ONLY
    if (!walk_stored(ctx, s, BPF_F_USER_STACK, KU_SEED_USER, &key.ustack))
        return 0;
#endif
    u64 *n = counts.lookup(&key);
    if (n) {   /* most samples: a (process, stack) seen before, so not a new process either */
        __sync_fetch_and_add(n, 1);
        return 0;
    }
    u64 none = 0;
    n = counts.lookup_or_try_init(&key, &none);
    if (n) {
        __sync_fetch_and_add(n, 1);
    } else {
        u64 *lost = counts_full.lookup(&first);
        if (lost)
            (*lost)++;
    }
    /* a process's first sample is a new key: only then is it looked up among the known */
    u8 one = 1;
    u32 tgid = key.tgid;
    if (!tgid || known.lookup(&tgid))
        return 0;
    known.update(&tgid, &one);
#ifndef KERNEL_ONLY
    /* a fork child that has not exec'd runs in a copy of its parent's address space: kept here, for
     * the end, and only its parent, if new, is said (mixed.c forks hundreds a second) */
    u32 parent = parent_of(tgid);
    if (parent) {
        if (children.update(&tgid, &parent)) {
            u64 *lost = children_full.lookup(&first);
            if (lost)
                (*lost)++;
        }
        if (known.lookup(&parent))
            return 0;
        known.update(&parent, &one);
        tgid = parent;
    }
#endif
    /* its maps are read at once, while it runs; a full ring: not known yet, so its next sample says it */
    if (new_procs.ringbuf_output(&tgid, sizeof(tgid), 0))
        known.delete(&tgid);
    return 0;
}
#endif

#ifdef USER_KERNEL
static __always_inline void count_lost(int which)
{
    int zero = 0;
    u64 *lost = which ? counts_full.lookup(&zero) : stacks_full.lookup(&zero);
    if (lost)
        (*lost)++;
}

/* `s` stored in `stacks` (kuwalk.h): its hash, or 0 when `stacks` is full (counted) */
static __always_inline u64 store_stack(struct ku_stack *s, u32 words, u64 seed)
{
    u64 h = ku_store(s, words, seed);
    if (!h)
        count_lost(0);
    return h;
}

/* The sample's stacks are in sc: stored, and the sample counted under them. */
static __always_inline int count_stacks(struct scratch_t *sc)
{
#ifndef KERNEL_ONLY
    if (sc->walk.user.outcome != KU_NO_USER) {
        sc->key.ustack = store_stack(&sc->walk.user, sc->walk.user.depth, KU_SEED_USER);
        if (!sc->key.ustack)
            return 0;
    }
#ifdef PYTHON_FRAMES
    pystack_capture(py_procs.lookup(&sc->key.tgid), (u32)bpf_get_current_pid_tgid(), &sc->py);
    if (sc->py.err != PY_NOT_PYTHON) {
        sc->key.pystack = store_stack((struct ku_stack *)&sc->py, 2 * sc->py.depth, PY_SEED);
        if (!sc->key.pystack)
            return 0;
    }
#endif
#ifdef UNWIND_CHECK
    struct check_t *c = checks.ringbuf_reserve(sizeof(struct check_t));
    if (c) {
        c->tgid = sc->key.tgid;
        c->owner = sc->owner;
        bpf_probe_read_kernel(&c->user, sizeof(c->user), &sc->walk.user);   /* too large for memcpy */
        ustack_capture(&c->copy);
        checks.ringbuf_submit(c, 0);
    }
#endif
#endif
    u64 *n = kcounts.lookup(&sc->key);
    if (!n) {
        u64 none = 0;
        n = kcounts.lookup_or_try_init(&sc->key, &none);
    }
    if (n)
        __sync_fetch_and_add(n, 1);
    else
        count_lost(1);
    return 0;
}

/* More frames of the walk count_unwound() began, KU_STEPS a program: then this program again (a tail
 * call), or the sample counted. */
int ku_walk_more(void *ctx)
{
#ifndef KERNEL_ONLY
    int zero = 0;
    struct scratch_t *sc = scratch.lookup(&zero);
    if (!sc)
        return 0;
    ku_walk_on(ctx, &sc->walk, sc->key.tgid, sc->owner);
    return count_stacks(sc);
#else
    return 0;
#endif
}

static __always_inline int count_unwound(void *ctx, u64 id)
{
    int zero = 0;
    struct epoch_t *ep = epochs.lookup(&zero);   /* first: the sample belongs to the epoch it read */
    struct scratch_t *sc = scratch.lookup(&zero);
    if (!ep || !sc)
        return 0;
    __builtin_memset(&sc->key, 0, sizeof(sc->key));
    sc->key.slot = EPOCH_SLOT(ep);
    sc->key.tgid = id >> 32;
    bpf_get_current_comm(&sc->key.comm, sizeof(sc->key.comm));
    sc->key.cgid = bpf_get_current_cgroup_id();
#ifndef USER_ONLY
    long kbytes = bpf_get_stack(ctx, sc->kernel.pcs, STACK_DEPTH * 8, 0);
    if (kbytes > 0) {
        sc->kernel.depth = (u64)kbytes / 8;
        sc->kernel.outcome = 0;
        sc->key.kstack = store_stack(&sc->kernel, sc->kernel.depth, KU_SEED_KERNEL);
        if (!sc->key.kstack)
            return 0;
    } else if (kbytes != -14 && kbytes != 0) {   /* -EFAULT: no kernel stack (a sample in user mode) */
        u64 *lost = kernel_walk.lookup(&zero);
        if (lost)
            (*lost)++;
    }
#endif
#ifndef KERNEL_ONLY
    ku_walk_begin(ctx, &sc->walk, sc->key.tgid, &sc->owner);
#endif
    return count_stacks(sc);
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
#ifdef SKIP_OWN
    u32 tgid = id >> 32;
    if (own_tgids.lookup(&tgid))   /* the profiler's own (common.h): 49 lookups a second per CPU */
        return 0;
#endif
#ifdef COUNT_IN_KERNEL
    return count_sample(ctx, id);
#elif defined(USER_KERNEL)
    return count_unwound(ctx, id);
#else

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
    long ubytes = fp_caller_restored(s->uips, bpf_get_stack(ctx, s->uips, sizeof(s->uips), BPF_F_USER_STACK),
                                     STACK_DEPTH);
    s->udepth = ubytes < 0 ? ubytes : (u64)ubytes / 8;
#endif
#endif
    /* no wakeup: the reader takes what has accumulated every 50 ms (bcctool/ringreader.py), and the
     * ring holds 0.25 s of samples; a wakeup per sample cost the reader a Python round trip each */
    samples.ringbuf_submit(s, BPF_RB_NO_WAKEUP);
    return 0;
#endif
}
