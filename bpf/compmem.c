/* compmem: kernel memory allocated by each process, what of it is still outstanding, and where.
 *
 * kmem:kmalloc / kmem:kfree (and, with TRACE_CACHES, kmem:kmem_cache_alloc / kmem:kmem_cache_free)
 * tracepoints, fields only. An allocation is remembered by its address with its size, time, owner
 * process and kernel stack id; a free looks the address up, so it is charged back to the process that
 * allocated, whoever frees it (an RCU callback, a kworker). Per-process totals only ever grow
 * (allocated, freed; bytes and counts) in a per-CPU hash; the user side subtracts. */
#include "common.h"

struct alloc_t {
    u64 size;        /* bytes_alloc: what the allocator really handed out */
    u64 ts;          /* when, for the age of leak suspects */
    u64 call_site;   /* the allocating function (a tracepoint field): shown when the stack is missing */
    u32 tgid;
    s32 stack_id;    /* < 0 when the stack map could not take it */
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

BPF_HASH(allocs, u64, struct alloc_t, MAX_ALLOCS);
BPF_PERCPU_HASH(proc_mem, u32, struct pmem_t, MAX_PIDS);
BPF_HASH(comms, u32, struct comm_t, MAX_PIDS);
#ifndef NO_STACKS   /* --stacks 0: no stack is shown, so none is walked (the costliest step) */
BPF_STACK_TRACE(stacks, MAX_STACKS);
#endif
BPF_PERCPU_ARRAY(lost, u64, 4);

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
