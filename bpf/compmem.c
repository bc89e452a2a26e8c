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
 * `ucopies`) and is unwound there with CFI; the allocation keeps the copy's id. One copy serves every
 * allocation of one syscall: the thread's last copy is reused while its user registers are the same
 * and it has not returned to user space (raw_syscalls:sys_exit forgets it), so a pipe() that makes
 * five allocations costs one copy. An allocation whose copy found the ring buffer full keeps the
 * frame-pointer walk instead, as every allocation does without USER_DWARF (a stack id). A kernel
 * thread has no user stack (copy id 0, stack id < 0).
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
    s32 ustack_id;   /* the frame-pointer user stack (USER_DWARF: only when no copy could be sent); < 0: none */
    u32 pad;
    u64 ucopy;       /* USER_DWARF: the id of the user stack copy sent to `ucopies`; 0: none */
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

BPF_HASH(allocs, u64, struct alloc_t, MAX_ALLOCS);
BPF_PERCPU_HASH(proc_mem, u32, struct pmem_t, MAX_PIDS);
BPF_HASH(comms, u32, struct comm_t, MAX_PIDS);
#ifndef NO_STACKS   /* --stacks 0: no stack is shown, so none is walked (the costliest step) */
BPF_STACK_TRACE(stacks, MAX_STACKS);
#endif
BPF_PERCPU_ARRAY(lost, u64, 6);

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
struct last_copy_t {           /* a thread's last copy, valid until it returns to user space */
    u64 id;
    u64 ip;
    u64 sp;
    u64 bp;
};
BPF_RINGBUF_OUTPUT(ucopies, UCOPY_RING_PAGES);
/* LRU: a thread that exits inside a syscall never reaches sys_exit to remove its entry */
BPF_TABLE("lru_hash", u32, struct last_copy_t, last_copy, 16384);
BPF_PERCPU_ARRAY(ucopy_seq, u64, 1);
#endif

static __always_inline void count_lost(int slot)
{
    u64 *n = lost.lookup(&slot);
    if (n)
        (*n)++;
}

/* The allocation at `ptr` is gone: charge it back to the process that made it. */
static __always_inline void settle(u64 ptr, struct alloc_t *a)
{
    u32 owner = a->tgid;
    struct pmem_t *v = proc_mem.lookup(&owner);
    if (v) {
        v->freed_bytes += a->size;
        v->frees++;
    }
    allocs.delete(&ptr);
}

#if defined(USER_DWARF) && !defined(NO_STACKS)
/* The id of a copy of the current thread's user stack: its last one if still valid, else a new one
 * sent to `ucopies`; 0 for a kernel thread or a full ring buffer (counted). */
static __always_inline u64 user_copy(u32 tid, u32 tgid, s32 *no_room)
{
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs((struct task_struct *)bpf_get_current_task_btf());
    u64 cs = 0;
    if (!regs || bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs) != 0 || (cs & 3) != 3)
        return 0;
    struct last_copy_t now = {};
    bpf_probe_read_kernel(&now.ip, sizeof(now.ip), &regs->ip);
    bpf_probe_read_kernel(&now.sp, sizeof(now.sp), &regs->sp);
    bpf_probe_read_kernel(&now.bp, sizeof(now.bp), &regs->bp);
    struct last_copy_t *last = last_copy.lookup(&tid);
    if (last && last->ip == now.ip && last->sp == now.sp && last->bp == now.bp)
        return last->id;
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
    last_copy.update(&tid, &now);
    return now.id;
}

/* Back to user space: the thread's next allocation may come from anywhere. */
RAW_TRACEPOINT_PROBE(sys_exit)
{
    u64 id = bpf_get_current_pid_tgid();
#ifdef FILTER_PID
    if ((u32)(id >> 32) != FILTER_PID)
        return 0;
#endif
    u32 tid = (u32)id;
    last_copy.delete(&tid);
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

    struct alloc_t *old = allocs.lookup(&ptr);
    if (old) {
        settle(ptr, old);
        count_lost(MISSED_FREE);
    }
    struct alloc_t a = {.size = size, .ts = bpf_ktime_get_ns(), .call_site = call_site, .tgid = tgid};
#ifdef NO_STACKS
    a.stack_id = -1;
#else
    a.stack_id = stacks.get_stackid(ctx, 0);
    if (a.stack_id < 0)
        count_lost(LOST_STACK);
#ifdef USER_DWARF
    a.ustack_id = -1;
    a.ucopy = user_copy((u32)id, tgid, &a.ustack_id);
    if (a.ucopy == 0 && a.ustack_id == 0)   /* no room for a copy: the frame-pointer walk, better than none */
        a.ustack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#else
    a.ustack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#endif
#endif
    if (allocs.update(&ptr, &a) != 0) {
        count_lost(LOST_ALLOCS_FULL);
        return;
    }
    v->alloc_bytes += size;
    v->allocs++;
}

static __always_inline void on_free(u64 ptr)
{
    struct alloc_t *a = allocs.lookup(&ptr);
    if (a)
        settle(ptr, a);
}

/* A process named at its first allocation may exec afterwards: take the new name. */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
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
