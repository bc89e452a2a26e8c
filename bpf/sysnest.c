/* sysnest: syscall count, total, max latency and errors per (process, syscall).
 *
 * raw_syscalls sys_enter/sys_exit as raw tracepoints (args[1] is the syscall number at entry and the
 * return value at exit). The entry timestamp lives in task-local storage when the kernel has it (no
 * hash lookup by tid), else in a hash. Totals go to a per-CPU array that is never cleared while a
 * process lives: the user side takes deltas, so no increment is lost to a read/clear race.
 *
 * Each (process, syscall, cgroup) owns one slot of that array, found through the `slots` hash the first
 * time and then remembered in the thread's storage (a small table by syscall number): a syscall a thread
 * has made before costs an array lookup, not a hash lookup (about 15 ns here). Slots are handed out in
 * order, and the user side gives back (zeroed) those of processes that have exited, through `free_slots`.
 *
 * -DSAMPLE_EVERY=N (--sample N) reads the clock for one syscall in N per thread on average and counts
 * every one: two clock reads are most of what exact timing costs (23 ns each on a VM's TSC). The gap to
 * the next timed syscall is drawn afresh each time, uniform in 1 .. 2N-1 (mean N), so the choice cannot
 * lock onto a program's own rhythm: with a fixed "every Nth", a read/write loop and N even times only
 * the reads. Every position in any cycle is timed equally often in the long run, as the gap's steps
 * are coprime with every period. `timed` counts the syscalls whose latency is in total_ns and max_ns;
 * without sampling it equals `count`. */
#include "common.h"

#define SLOT_CACHE 8   /* slots a thread remembers, by syscall number modulo 8 */

struct start_t {
    u64 ts;       /* 0: this syscall is not timed (or, exact mode, the thread is not in one) */
    u32 nr;
    u32 tick;     /* SAMPLE_EVERY: syscalls left until the next timed one (0: not drawn yet);
                     bit 31: in a syscall */
    u32 tgid;     /* task storage: the thread's process, taken once (a task's tgid never changes),
                     so neither program calls bpf_get_current_pid_tgid() per syscall */
    u32 own;      /* SKIP_OWN, task storage: own_gen when last looked up << 1 | the process is the
                     profiler's own; an array read per syscall, the hash only after a change */
#ifdef USE_TASK_STORAGE
    u64 cgid;     /* the thread's cgroup, which the cached slots below belong to (0: not read yet) */
    u64 moves;    /* `moves` when cgid was read */
    struct {
        u32 nr1;  /* syscall number + 1 (0: empty) */
        u32 slot;
    } cache[SLOT_CACHE];
#endif
};

#define IN_SYSCALL 0x80000000u

struct key_t {
    u32 tgid;
    u32 nr;
    u64 cgid;     /* the thread's cgroup (v2), read again after any move: a process moved mid-run is split in two */
};

struct val_t {
    u64 count;
    u64 total_ns;
    u64 errors;
    u64 max_ns;    /* max within epoch `epoch` */
    u64 epoch;
    u64 timed;     /* SAMPLE_EVERY: syscalls in total_ns (exact mode leaves it 0: all of them) */
};

#ifndef MAX_KEYS
#define MAX_KEYS 32768
#endif

BPF_PERCPU_ARRAY(stats, struct val_t, MAX_KEYS);
BPF_HASH(slots, struct key_t, u32, MAX_KEYS);     /* (process, syscall, cgroup) -> its slot in stats */
#ifndef SLOT_CPUS
#define SLOT_CPUS 1
#endif
/* Slots never used yet: each CPU hands out its own, cpu, cpu + SLOT_CPUS, ... (no atomic add, which
 * BCC's compiler target cannot return a value from); the user side passes the number of possible CPUs. */
BPF_PERCPU_ARRAY(next_slot, u32, 1);
BPF_QUEUE(free_slots, u32, MAX_KEYS);              /* slots given back (zeroed) by the user side */
struct comm_t {
    char comm[TASK_COMM_LEN];
};

BPF_HASH(comms, u32, struct comm_t, 16384);
BPF_ARRAY(epoch, u64, 1);   /* bumped by the user side each interval, so max_ns is per interval */
LOST_COUNTER(full);          /* syscalls not counted because every slot was taken */

#ifdef USE_TASK_STORAGE
BPF_TASK_STORAGE(start, struct start_t);
#else
BPF_HASH(start, u32, struct start_t, 65536);
#endif

#ifdef USE_TASK_STORAGE
/* Tasks moved between cgroups so far, anywhere: a thread reads its cgroup again when this changed. The
 * tracepoint fires once the move is done, so a syscall that ends during the move itself can still be
 * counted in the old group. A new thread (clone into a cgroup included) has no storage yet: it reads. */
BPF_ARRAY(moves, u64, 1);

TRACEPOINT_PROBE(cgroup, cgroup_attach_task)
{
    int zero = 0;
    u64 *n = moves.lookup(&zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    return PASS_ON;
}
#endif

#ifdef FILTER_PPID
BPF_HASH(children, u32, u32, 65536);   /* tgid -> parent tgid, seeded from /proc */

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    u32 child = args->child_pid;
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    children.update(&child, &parent);
    return PASS_ON;
}
#endif

RAW_TRACEPOINT_PROBE(sys_enter)
{
#if defined(FILTER_TASK) || defined(FILTER_PPID) || !defined(USE_TASK_STORAGE)
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return 0;
#endif
#ifdef FILTER_PPID
    u32 tgid = id >> 32;
    u32 *parent = children.lookup(&tgid);
    if (!parent || *parent != FILTER_PPID)
        return 0;
#endif
#ifdef USE_TASK_STORAGE
    struct start_t *s = start.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0,
                                               BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!s)
        return 0;
    if (!s->tgid)   /* storage just created for this thread */
        s->tgid = bpf_get_current_pid_tgid() >> 32;
#ifdef SKIP_OWN
    int first = 0;
    u32 *gen = own_gen.lookup(&first);
    u32 now_gen = gen ? *gen : 0;
    if (s->own >> 1 != now_gen)
        s->own = now_gen << 1 | (own_tgids.lookup(&s->tgid) != 0);
    if (s->own & 1)
        return 0;   /* sys_exit finds it not in a syscall */
#endif
    s->nr = ctx->args[1];
#ifdef SAMPLE_EVERY
    u32 left = s->tick & ~IN_SYSCALL;
    if (left > 1) {
        s->tick = (left - 1) | IN_SYSCALL;
    } else {
        /* draw first, read the clock last: the timed span is the syscall's, not the draw's */
        s->tick = (1 + bpf_get_prandom_u32() % (2 * SAMPLE_EVERY - 1)) | IN_SYSCALL;
        if (left == 1)      /* 0 is a thread seen for the first time: it only draws */
            s->ts = bpf_ktime_get_ns();
    }
#else
    s->ts = bpf_ktime_get_ns();
#endif
#else
#ifdef SKIP_OWN
    u32 tgid_own = id >> 32;
    if (own_tgids.lookup(&tgid_own))
        return 0;   /* sys_exit finds no start */
#endif
    u32 tid = id;
    struct start_t s = {.ts = bpf_ktime_get_ns(), .nr = ctx->args[1], .tick = IN_SYSCALL};
    start.update(&tid, &s);
#endif
    return 0;
}

RAW_TRACEPOINT_PROBE(sys_exit)
{
#ifdef USE_TASK_STORAGE
    /* no filter here: a thread sys_enter filtered out has no storage, or none marked in a syscall */
    struct start_t *s = start.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0, 0);
#ifdef SAMPLE_EVERY
    if (!s || !(s->tick & IN_SYSCALL))
        return 0;
    s->tick &= ~IN_SYSCALL;
    u64 delta = s->ts ? bpf_ktime_get_ns() - s->ts : 0;
    int timed = s->ts != 0;
#else
    if (!s || !s->ts)
        return 0;
    u64 delta = bpf_ktime_get_ns() - s->ts;
#endif
    s->ts = 0;
    /* The cgroup is read again only after a move somewhere (or the thread's first syscall): reading it
     * costs about 10 ns a syscall here, comparing a counter about 1. */
    int zero = 0;
    u64 *moved = moves.lookup(&zero);
    u64 now_moves = moved ? *moved : 0;
    if (!s->cgid || s->moves != now_moves) {
        s->moves = now_moves;
        u64 cgid = bpf_get_current_cgroup_id();
        if (cgid != s->cgid) {   /* moved, or its first: the slots it remembers are someone else's */
#pragma unroll
            for (int i = 0; i < SLOT_CACHE; i++)
                s->cache[i].nr1 = 0;
            s->cgid = cgid;
        }
    }
    struct key_t key = {.tgid = s->tgid, .nr = s->nr, .cgid = s->cgid};
#else
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return 0;
    u32 tid = id;
    struct start_t *s = start.lookup(&tid);
    if (!s)
        return 0;
    u64 delta = bpf_ktime_get_ns() - s->ts;
    struct key_t key = {.tgid = id >> 32, .nr = s->nr, .cgid = bpf_get_current_cgroup_id()};
    start.delete(&tid);
#ifdef SAMPLE_EVERY
    int timed = 1;  /* the hash keeps nothing per thread between syscalls: every one is timed */
#endif
#endif
#ifndef USE_TASK_STORAGE
    int zero = 0;
#endif
    u64 *cur = epoch.lookup(&zero);
    u64 now_epoch = cur ? *cur : 0;

    u32 slot = 0;
    int cached = 0;
#ifdef USE_TASK_STORAGE
    u32 way = key.nr & (SLOT_CACHE - 1);
    if (s->cache[way].nr1 == key.nr + 1) {
        slot = s->cache[way].slot;
        cached = 1;
    }
#endif
    if (!cached) {
        u32 *found = slots.lookup(&key);
        if (found) {
            slot = *found;
        } else {
            /* a new (process, syscall, cgroup): a slot given back, else the next never used */
            if (free_slots.pop(&slot) != 0) {
                u32 *next = next_slot.lookup(&zero);
                if (!next)
                    return 0;
                slot = *next * SLOT_CPUS + bpf_get_smp_processor_id();
                if (slot < MAX_KEYS)
                    (*next)++;
            }
            if (slot >= MAX_KEYS || slots.insert(&key, &slot) != 0) {
                /* full, or another CPU made the key first: give the slot back and take its */
                if (slot < MAX_KEYS)
                    free_slots.push(&slot, 0);
                found = slots.lookup(&key);
                if (!found) {
                    u64 *lost = full.lookup(&zero);
                    if (lost)
                        (*lost)++;
                    return 0;
                }
                slot = *found;
            } else {
                struct comm_t c = {};
                bpf_get_current_comm(&c.comm, sizeof(c.comm));
                comms.update(&key.tgid, &c);
            }
        }
#ifdef USE_TASK_STORAGE
        s->cache[way].nr1 = key.nr + 1;
        s->cache[way].slot = slot;
#endif
    }
    struct val_t *v = stats.lookup(&slot);
    if (!v)
        return 0;
    v->count++;
    if ((long)ctx->args[1] < 0)
        v->errors++;
#ifdef SAMPLE_EVERY
    if (!timed)
        return 0;
    v->timed++;
#endif
    v->total_ns += delta;
    if (v->epoch != now_epoch) {
        /* a new window; window 0 (before the user side set one) folds into window 1 */
        if (v->epoch != 0)
            v->max_ns = 0;
        v->epoch = now_epoch;
    }
    if (delta > v->max_ns)
        v->max_ns = delta;
    return 0;
}
