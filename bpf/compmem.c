/* compmem: kernel memory allocated by each process, what of it is still outstanding, and where.
 *
 * kmem:kmalloc / kmem:kfree (and, with TRACE_CACHES, kmem:kmem_cache_alloc / kmem:kmem_cache_free)
 * tracepoints, fields only. An allocation is remembered by its address with its size, time, owner
 * process and kernel stack id; a free looks the address up, so it is charged back to the process that
 * allocated, whoever frees it (an RCU callback, a kworker). Per-process totals only ever grow
 * (allocated, freed; bytes and counts) in a per-CPU hash; the user side subtracts.
 *
 * User stacks (who in user space made the syscall that allocated): by default -DUSER_DWARF, a copy of
 * the user registers and the top of the user stack (ustack.h) goes to user space (ring buffer
 * `ucopies`) and is unwound there with CFI; the allocation keeps the copy's id. With -DUSER_KERNEL the
 * stack is walked here with the stack-delta tables of kunwind.h (kuwalk.h: a process met for the first
 * time is walked by frame pointers until user space has loaded its mappings; a fork child that has not
 * exec'd walks its parent's), stored once by its hash in `ustacks`, and the allocation keeps the hash.
 * The walk goes on in tail calls, which do not return: the allocation waits in `walk_scratch` and is
 * recorded by the program that ends the walk. Either way one stack serves every allocation of one
 * syscall: the thread's last one is reused while its user registers are the same and it has not returned
 * to user space (raw_syscalls:sys_exit forgets it), so a pipe() that makes five allocations costs one
 * copy or one walk. An allocation whose copy found the ring buffer full, or whose walk found `ustacks`
 * full, keeps the frame-pointer walk instead, as every allocation does without either (a stack id). A
 * kernel thread has no user stack (key 0, stack id < 0).
 *
 * -DSAMPLE_BYTES=N keeps one allocation in about every N bytes, as heap profilers sample: every
 * allocation is counted in its process's totals (allocated bytes and count, exact), but only those
 * sampled() are kept by address, with their stacks (the costly part: a stack walk, a map insert and
 * delete), each standing for `weight` bytes; frees are not counted here, user space estimates what is
 * outstanding from the kept ones. Without it every allocation is kept and stands for its own size, and
 * a free adds to its process's freed totals.
 *
 * With -DSTACK_RATE=R the N bytes are paced (pace.h): on a CPU whose allocations would have taken more
 * than R walks a second at one in N bytes, the next window keeps one in about 2N, 4N... bytes, each
 * standing for that many, so the walks stay near R a second whatever the allocation rate.
 *
 * Sampled, almost no address is in `allocs`, yet every free (and every allocation, for a free missed)
 * would look its address up there: `kept_at` counts the kept addresses by a hash of the address, and
 * `allocs` is asked only where that count is not 0 (a counting Bloom filter). A slot is raised after
 * its address is inserted and lowered after it is deleted, so it is never below the addresses kept under
 * it: a 0 means none. The allocation's tracepoint returns before its address can be freed, so no free
 * is asked about before its raise. Under pgbench -S a kmalloc cost 160 ns of BPF and a kfree 72 without
 * stacks, the two lookups most of it.
 *
 * The profiler's own processes (-DSKIP_OWN) are asked about only when a process would get its record,
 * so they never get one and none of their allocations is kept. */
#include "common.h"

struct alloc_t {
    u64 size;        /* bytes_alloc: what the allocator really handed out */
    u64 ts;          /* when, for the age of leak suspects */
    u64 call_site;   /* the allocating function (a tracepoint field): shown when the stack is missing */
    u32 tgid;
    s32 stack_id;    /* < 0 when the stack map could not take it */
    s32 ustack_id;   /* the frame-pointer user stack (USER_DWARF / USER_KERNEL: only when no copy could be
                        sent, no walk stored); < 0: none */
    u32 pad;
    u64 ukey;        /* USER_DWARF: the id of the user stack copy sent to `ucopies`; USER_KERNEL: the
                        walked stack's hash in `ustacks`; 0: none */
    u64 weight;      /* the bytes it stands for: its size, or with SAMPLE_BYTES max(size, SAMPLE_BYTES) */
};

struct pmem_t {
    u64 alloc_bytes;
    u64 allocs;
    u64 freed_bytes;
    u64 frees;
};

struct comm_t {
    char comm[TASK_COMM_LEN];
    u64 cgid;     /* the process's cgroup (v2) at its first allocation, and again at exec */
};

#ifndef MAX_ALLOCS
#define MAX_ALLOCS 65536
#endif
#ifndef MAX_PIDS
#define MAX_PIDS 10240
#endif
#ifndef MAX_STACKS
#define MAX_STACKS 16384
#endif

/* slots of `lost`, read by metrics/compmem.py */
#define LOST_ALLOCS_FULL 0   /* allocation not tracked: `allocs` full */
#define LOST_PIDS_FULL 1     /* allocation not tracked: `proc_mem` full */
#define LOST_STACK 2         /* tracked, but its stack was not stored (stack map full or collided) */
#define MISSED_FREE 3        /* an address came back from the allocator with no free seen (bulk frees
                                and kfree_rcu batches are not traced): its old allocation is settled */
#define LOST_UCOPY 4         /* USER_DWARF: a user stack copy not sent (ring buffer full) */
#define UCOPIES 5            /* USER_DWARF: user stack copies sent */
#define LOST_USTACK 6        /* USER_KERNEL: a walked user stack not stored (`ustacks` full) */
#define LOST_SLOTS 7

BPF_HASH(allocs, u64, struct alloc_t, MAX_ALLOCS);
BPF_PERCPU_HASH(proc_mem, u32, struct pmem_t, MAX_PIDS);
BPF_HASH(comms, u32, struct comm_t, MAX_PIDS);
#ifndef NO_STACKS   /* --stacks 0: no stack is shown, so none is walked (the costliest step) */
BPF_STACK_TRACE(stacks, MAX_STACKS);
#endif
BPF_PERCPU_ARRAY(lost, u64, LOST_SLOTS);

#ifdef SAMPLE_BYTES
#define KEPT_SLOTS 65536   /* a power of two; with N addresses kept, about N / KEPT_SLOTS of the frees ask `allocs` */
BPF_ARRAY(kept_at, u32, KEPT_SLOTS);

static __always_inline u32 *kept_slot(u64 ptr)
{
    u32 slot = (u32)(((ptr >> 3) * 0x9E3779B97F4A7C15ull) >> 48);   /* Fibonacci hashing: the top 16 bits */
    return kept_at.lookup(&slot);
}

/* 0 when no kept allocation can be at ptr: `allocs` need not be asked */
static __always_inline int maybe_kept(u64 ptr)
{
    u32 *n = kept_slot(ptr);
    return !n || *n != 0;
}

static __always_inline void kept_count(u64 ptr, int by)
{
    u32 *n = kept_slot(ptr);
    if (n)
        __sync_fetch_and_add(n, by);
}
#else
static __always_inline int maybe_kept(u64 ptr) { return 1; }
static __always_inline void kept_count(u64 ptr, int by) {}
#endif

#if defined(USER_DWARF) && !defined(NO_STACKS)
#include "ustack.h"
#ifndef UCOPY_RING_PAGES
#define UCOPY_RING_PAGES 2048   /* 8 MiB: ~400 copies of 16 KiB in a burst before the user side drains */
#endif
struct ucopy_t {               /* the ring buffer's record, read by metrics/compmem.py */
    u64 id;
    u32 tgid;
    u32 pad;
    struct ustack_t user;
};
BPF_RINGBUF_OUTPUT(ucopies, UCOPY_RING_PAGES);
BPF_PERCPU_ARRAY(ucopy_seq, u64, 1);
#endif

/* One syscall's allocations share its stack: worth a probe on every syscall's return only when every
 * allocation is kept (sampled, two of one syscall are rare) */
#if (defined(USER_DWARF) || defined(USER_KERNEL)) && !defined(NO_STACKS) && !defined(SAMPLE_BYTES)
#define SYSCALL_STACKS 1
#endif

#if (defined(USER_DWARF) || defined(USER_KERNEL)) && !defined(NO_STACKS)
struct last_user_t {           /* a thread's last user stack (a copy's id, a walk's hash) and the user
                                  registers it was taken at: valid until the thread returns to user space */
    u64 id;
    u64 ip;
    u64 sp;
    u64 bp;
};
#ifdef SYSCALL_STACKS
/* LRU: a thread that exits inside a syscall never reaches sys_exit to remove its entry */
BPF_TABLE("lru_hash", u32, struct last_user_t, last_user, 16384);
#endif

/* The thread's last user stack if its user registers (in *now) are those it was taken at: the same
 * syscall, whatever it allocates; else 0 (always, sampled: nothing forgets it at the syscall's return) */
static __always_inline u64 same_syscall(u32 tid, struct last_user_t *now)
{
#ifdef SYSCALL_STACKS
    struct last_user_t *last = last_user.lookup(&tid);
    if (last && last->ip == now->ip && last->sp == now->sp && last->bp == now->bp)
        return last->id;
#endif
    return 0;
}

/* the thread's stack, for the rest of its syscall's allocations */
static __always_inline void keep_syscall_stack(u32 tid, struct last_user_t *now)
{
#ifdef SYSCALL_STACKS
    last_user.update(&tid, now);
#endif
}
#endif

#ifdef SAMPLE_BYTES
#ifdef STACK_RATE
#include "pace.h"
BPF_PERCPU_ARRAY(pace, struct pace_t, 1);   /* each CPU's sampling bytes: SAMPLE_BYTES, or paced */
#endif

/* The bytes one kept allocation stands for on this CPU now, `size` more allocated: SAMPLE_BYTES, or with
 * -DSTACK_RATE doubled while this CPU's allocations would take more than STACK_RATE walks a second */
static __always_inline u64 sample_bytes(u64 size)
{
#ifdef STACK_RATE
    int zero = 0;
    struct pace_t *p = pace.lookup(&zero);
    if (p)
        return pace_every(p, size, 0, SAMPLE_BYTES);
#endif
    return SAMPLE_BYTES;
}

/* An allocation of `size` bytes is kept with probability size / every (always when it is that large)
 * and stands for max(size, every) bytes: the sum over the kept is an unbiased estimate of the bytes of
 * all (each allocation's expected share is its size), its variance that of one sample in every bytes.
 * One random draw, no state shared between CPUs. */
static __always_inline int sampled(u64 size, u64 every)
{
    return size >= every || (((u64)bpf_get_prandom_u32() * every) >> 32) < size;
}
#endif

#if defined(USER_KERNEL) && !defined(NO_STACKS)
#include "kuwalk.h"
#ifndef USTACKS
#define USTACKS 16384
#endif
struct walk_scratch_t {        /* per CPU: the walk, and the allocation it is for, over its tail calls */
    struct ku_walk walk;
    struct alloc_t a;
    u64 ptr;
    struct last_user_t regs;   /* the user registers it began from, for the thread's next allocation */
    u32 tid;
    u32 owner;                 /* whose mappings walk it (kuwalk.h) */
};
KU_WALK_MAPS;
BPF_F_TABLE("hash", u64, struct ku_stack, ustacks, USTACKS, BPF_F_NO_PREALLOC);   /* memory as used */
BPF_PERCPU_ARRAY(walk_scratch, struct walk_scratch_t, 1);
/* new task -> its parent, until it execs; keyed by the new task's id, so a thread's is never looked up */
BPF_TABLE("lru_hash", u32, u32, forked, 16384);

/* the map calls of kunwind.h and kuwalk.h, which BCC rewrites here only */
static __always_inline struct ku_proc_maps *ku_maps_of(u32 tgid) { return ku_maps.lookup(&tgid); }
static __always_inline struct ku_file *ku_file_at(u32 file) { return ku_files.lookup(&file); }
static __always_inline struct ku_row *ku_row_at(u32 index) { return ku_rows.lookup(&index); }
static __always_inline u32 *ku_proc_state(u32 tgid) { return ku_procs.lookup(&tgid); }
static __always_inline void ku_proc_set(u32 tgid, u32 state) { ku_procs.update(&tgid, &state); }
static __always_inline void ku_proc_drop(u32 tgid) { ku_procs.delete(&tgid); }
static __always_inline long ku_send(struct ku_event_t *e) { return ku_events.ringbuf_output(e, sizeof(*e), 0); }
static __always_inline struct ku_stack *ku_stack_at(u64 hash) { return ustacks.lookup(&hash); }
static __always_inline long ku_stack_insert(u64 hash, struct ku_stack *s) { return ustacks.insert(&hash, s); }
static __always_inline void ku_tail(void *ctx) { ku_progs.call(ctx, 0); }

static __always_inline void ku_count(int slot, u64 n)
{
    u64 *c = ku_counters.lookup(&slot);
    if (c)
        *c += n;
}

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
    u32 child = args->child_pid, parent = id >> 32;
    forked.update(&child, &parent);
    return PASS_ON;
}
#endif


static __always_inline void count_lost(int slot)
{
    u64 *n = lost.lookup(&slot);
    if (n)
        (*n)++;
}

/* The allocation at `ptr` is gone: charge it back to the process that made it (sampled: user space
 * estimates the freed from what stays kept). */
static __always_inline void settle(u64 ptr, struct alloc_t *a)
{
#ifndef SAMPLE_BYTES
    u32 owner = a->tgid;
    struct pmem_t *v = proc_mem.lookup(&owner);
    if (v) {
        v->freed_bytes += a->size;
        v->frees++;
    }
#endif
    if (allocs.delete(&ptr) == 0)
        kept_count(ptr, -1);
}

#if defined(USER_DWARF) && !defined(NO_STACKS)
/* The id of a copy of the current thread's user stack: its last one if still valid, else a new one
 * sent to `ucopies`; 0 for a kernel thread or a full ring buffer (counted). */
static __always_inline u64 user_copy(u32 tid, u32 tgid, s32 *no_room)
{
    struct last_user_t now = {};
    if (user_regs(&now.ip, &now.sp, &now.bp))
        return 0;
    u64 last = same_syscall(tid, &now);
    if (last)
        return last;
    int zero = 0;
    u64 *seq = ucopy_seq.lookup(&zero);
    if (!seq)
        return 0;
    struct ucopy_t *c = ucopies.ringbuf_reserve(sizeof(struct ucopy_t));
    if (!c) {
        count_lost(LOST_UCOPY);
        *no_room = 0;
        return 0;
    }
    *seq += 1;
    now.id = ((u64)bpf_get_smp_processor_id() << 48) | *seq;   /* unique without a shared counter */
    c->id = now.id;
    c->tgid = tgid;
    ustack_capture(&c->user);
    ucopies.ringbuf_submit(c, 0);
    count_lost(UCOPIES);
    keep_syscall_stack(tid, &now);
    return now.id;
}
#endif

/* The allocation kept, and counted to its process (v: its totals; sampled: counted already). */
static __always_inline void record(u64 ptr, struct alloc_t *a, struct pmem_t *v)
{
    if (allocs.update(&ptr, a) != 0) {
        count_lost(LOST_ALLOCS_FULL);
        return;
    }
    kept_count(ptr, 1);
#ifndef SAMPLE_BYTES
    if (v) {
        v->alloc_bytes += a->size;
        v->allocs++;
    }
#endif
}

#if defined(USER_KERNEL) && !defined(NO_STACKS)
/* The walk of the allocation waiting in sc has ended: its stack stored (the rest of its syscall takes it
 * again), the walk counted by how it ended, the allocation recorded. */
static __always_inline void walked(void *ctx, struct walk_scratch_t *sc)
{
    u64 h = ku_walked(&sc->walk);
    if (h) {
        sc->a.ukey = h;
        sc->regs.id = h;
        keep_syscall_stack(sc->tid, &sc->regs);
    } else {   /* `ustacks` full: the frame-pointer walk, better than none */
        count_lost(LOST_USTACK);
        sc->a.ustack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    }
    u32 tgid = sc->a.tgid;
    record(sc->ptr, &sc->a, proc_mem.lookup(&tgid));
}

/* The allocation's user stack: its syscall's, if walked already; else walked now, the allocation waiting
 * in walk_scratch for the program that ends the walk (this one, or ku_walk_more) to record it. */
static __always_inline void walk_user(void *ctx, u64 ptr, struct alloc_t *a, u32 tid, struct pmem_t *v)
{
    int zero = 0;
    struct walk_scratch_t *sc = walk_scratch.lookup(&zero);
    struct last_user_t now = {};
    if (!sc || user_regs(&now.ip, &now.sp, &now.bp)) {   /* a kernel thread: no user stack */
        record(ptr, a, v);
        return;
    }
    a->ukey = same_syscall(tid, &now);
    if (a->ukey) {
        ku_count(KU_REUSED, 1);
        record(ptr, a, v);
        return;
    }
    sc->a = *a;
    sc->ptr = ptr;
    sc->tid = tid;
    sc->regs = now;
    ku_walk_begin(ctx, &sc->walk, a->tgid, &sc->owner);
    walked(ctx, sc);
}

/* More frames of the walk walk_user() began, KU_STEPS a program: then this program again (a tail call),
 * or the allocation recorded. It is a tracepoint program (bcctool/kunwind.py loads it so): a tail call
 * keeps the caller's type, and what it returns is the tracepoint's answer. */
int ku_walk_more(void *ctx)
{
    int zero = 0;
    struct walk_scratch_t *sc = walk_scratch.lookup(&zero);
    if (!sc)
        return PASS_ON;
    ku_walk_on(ctx, &sc->walk, sc->a.tgid, sc->owner);
    walked(ctx, sc);
    return PASS_ON;
}
#endif

#ifdef SYSCALL_STACKS
/* Back to user space: the thread's next allocation may come from anywhere. */
RAW_TRACEPOINT_PROBE(sys_exit)
{
    u64 id = bpf_get_current_pid_tgid();
#ifdef FILTER_PID
    if ((u32)(id >> 32) != FILTER_PID)
        return 0;
#endif
    u32 tid = (u32)id;
    last_user.delete(&tid);
    return 0;
}
#endif

static __always_inline void on_alloc(void *ctx, u64 ptr, u64 size, u64 call_site)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return;
#ifdef MIN_BYTES
    if (size < MIN_BYTES)
        return;
#endif
    u32 tgid = id >> 32;
    if (tgid == 0 || ptr == 0)    /* an interrupt on an idle CPU; a failed allocation */
        return;
#ifdef EXCLUDE_PID
    if (tgid == EXCLUDE_PID)      /* the tracer itself: its map reads allocate */
        return;
#endif

    struct pmem_t *v = proc_mem.lookup(&tgid);
    if (!v) {
#ifdef SKIP_OWN
        /* asked only for a process not counted yet, before any stack is walked: the profiler's own
           (common.h) never gets a record, and the others' allocations cost no lookup more */
        if (own_tgids.lookup(&tgid))
            return;
#endif
        struct pmem_t init = {};
        proc_mem.insert(&tgid, &init);
        v = proc_mem.lookup(&tgid);
        if (!v) {
            count_lost(LOST_PIDS_FULL);
            return;
        }
        struct comm_t c = {.cgid = bpf_get_current_cgroup_id()};
        bpf_get_current_comm(&c.comm, sizeof(c.comm));
        comms.update(&tgid, &c);
    }

    struct alloc_t *old = maybe_kept(ptr) ? allocs.lookup(&ptr) : 0;
    if (old) {
        settle(ptr, old);
        count_lost(MISSED_FREE);
    }
    struct alloc_t a = {.size = size, .call_site = call_site, .tgid = tgid, .weight = size};
#ifdef SAMPLE_BYTES
    v->alloc_bytes += size;   /* every allocation counted; the sampled kept */
    v->allocs++;
    u64 every = sample_bytes(size);
    if (!sampled(size, every))
        return;
    if (size < every)
        a.weight = every;
#endif
    a.ts = bpf_ktime_get_ns();
#ifdef NO_STACKS
    a.stack_id = -1;
#else
    a.stack_id = stacks.get_stackid(ctx, 0);
    if (a.stack_id < 0)
        count_lost(LOST_STACK);
#if defined(USER_KERNEL)
    a.ustack_id = -1;
    walk_user(ctx, ptr, &a, (u32)id, v);
    return;
#elif defined(USER_DWARF)
    a.ustack_id = -1;
    a.ukey = user_copy((u32)id, tgid, &a.ustack_id);
    if (a.ukey == 0 && a.ustack_id == 0)   /* no room for a copy: the frame-pointer walk, better than none */
        a.ustack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#else
    a.ustack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#endif
#endif
    record(ptr, &a, v);
}

static __always_inline void on_free(u64 ptr)
{
    if (!maybe_kept(ptr))
        return;
    struct alloc_t *a = allocs.lookup(&ptr);
    if (a)
        settle(ptr, a);
}

/* A process named at its first allocation may exec afterwards: take the new name. */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
#if defined(USER_KERNEL) && !defined(NO_STACKS)
    forked.delete(&tgid);     /* its own address space from now on: */
    ku_procs.delete(&tgid);   /* its mappings are loaded anew */
#endif
    if (skip_task(id) || !comms.lookup(&tgid))
        return PASS_ON;
    struct comm_t c = {.cgid = bpf_get_current_cgroup_id()};
    bpf_get_current_comm(&c.comm, sizeof(c.comm));
    comms.update(&tgid, &c);
    return PASS_ON;
}

TRACEPOINT_PROBE(kmem, kmalloc)
{
    on_alloc(args, (u64)args->ptr, args->bytes_alloc, args->call_site);
    return PASS_ON;
}

TRACEPOINT_PROBE(kmem, kfree)
{
    on_free((u64)args->ptr);
    return PASS_ON;
}

#ifdef TRACE_CACHES
TRACEPOINT_PROBE(kmem, kmem_cache_alloc)
{
    on_alloc(args, (u64)args->ptr, args->bytes_alloc, args->call_site);
    return PASS_ON;
}

TRACEPOINT_PROBE(kmem, kmem_cache_free)
{
    on_free((u64)args->ptr);
    return PASS_ON;
}
#endif
