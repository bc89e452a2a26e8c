/* cacheraw: page-cache reads (pages requested, pages added) and writes (folios dirtied) per process.
 *
 * filemap:mm_filemap_get_pages fires each time a read has a batch of folios for [index, last_index],
 * the whole rest of the request: one read() loops over it with index moving up and the same last_index,
 * so only the first call of a request is counted. The request may reach past the end of the file; for
 * read() and pread64() (HAVE_READ_EXIT) the syscall's return value tells how much was there, and the
 * pages asked for beyond it are counted as `overshoot_pages`. filemap:mm_filemap_add_to_page_cache is a
 * folio of 1 << order pages entering the cache in this task's context (readahead included).
 * writeback:writeback_dirty_folio is a clean folio made dirty (no order: a count of folios); when it is
 * the folio this thread just added, a write allocated it (a write miss), else it was cached (a hit).
 * Tracepoint fields only. Totals are never cleared while the process lives; the user side takes deltas
 * and derives hits and misses (docs/metrics/cacheraw.md). The profiler's own processes (-DSKIP_OWN) are
 * asked about only when counters would be made, so they never get any. */
#include "common.h"

#define PAGE_SHIFT 12

struct val_t {
    u64 requested_pages;
    u64 overshoot_pages;
    u64 added_pages;
    u64 added_folios;
    u64 write_miss_pages;
    u64 write_miss_folios;
    u64 write_hit_folios;
};

/* Per thread: the last folio it added, the last read request it saw, the read() it is in. */
struct task_t {
    u64 add_ino;
    u64 add_index;
    u64 add_pages;     /* 0: nothing pending */
    u64 gp_ino;
    u64 gp_index;
    u64 gp_last;
    u64 rd_count;      /* bytes the read() asked for */
    u64 rd_pages;      /* pages its requests counted */
    u32 gp_dev;
    u32 in_read;
};

struct comm_t {
    char comm[TASK_COMM_LEN];
    u32 uid;
    u32 pad;
    u64 cgid;     /* the process's cgroup (v2) when first seen, and again at exec */
};

#ifndef MAX_KEYS
#define MAX_KEYS 16384
#endif

BPF_PERCPU_HASH(stats, u32, struct val_t, MAX_KEYS);
BPF_HASH(comms, u32, struct comm_t, MAX_KEYS);
LOST_COUNTER(full);    /* events not counted because `stats` was full */

#ifdef USE_TASK_STORAGE
BPF_TASK_STORAGE(tasks, struct task_t);
#else
BPF_TABLE("lru_hash", u32, struct task_t, tasks, 65536);    /* by tid; exited threads age out */
#endif

/* The current thread's state, created on demand when `create`. */
static __always_inline struct task_t *task_state(u64 id, int create)
{
#ifdef USE_TASK_STORAGE
    return tasks.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0,
                                  create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
#else
    u32 tid = id;
    if (!create)
        return tasks.lookup(&tid);
    struct task_t empty = {};
    return tasks.lookup_or_try_init(&tid, &empty);
#endif
}

/* The process's counters, created (with its comm and uid) on first use; NULL when the map is full or
 * the process is the profiler's own. */
static __always_inline struct val_t *stats_of(u32 tgid)
{
    struct val_t *v = stats.lookup(&tgid);
    if (v)
        return v;
#ifdef SKIP_OWN
    /* asked only for a process not counted yet: the profiler's own (common.h) never gets counters, and
       the others' events cost no lookup more */
    if (own_tgids.lookup(&tgid))
        return 0;
#endif
    struct val_t init = {};
    stats.insert(&tgid, &init);
    v = stats.lookup(&tgid);
    if (!v) {
        int zero = 0;
        u64 *lost = full.lookup(&zero);
        if (lost)
            (*lost)++;
        return 0;
    }
    struct comm_t c = {.uid = (u32)bpf_get_current_uid_gid(), .cgid = bpf_get_current_cgroup_id()};
    bpf_get_current_comm(&c.comm, sizeof(c.comm));
    comms.update(&tgid, &c);
    return v;
}

/* exec reads the new binary under the old name; the name the user knows comes after */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct comm_t *c = comms.lookup(&tgid);
    if (c) {
        bpf_get_current_comm(&c->comm, sizeof(c->comm));
        c->cgid = bpf_get_current_cgroup_id();
    }
    return PASS_ON;
}

TRACEPOINT_PROBE(filemap, mm_filemap_get_pages)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return PASS_ON;
    struct task_t *t = task_state(id, 1);
    if (!t)
        return PASS_ON;
    u64 pages = 0;
    /* the same request continuing (same file and end, start moved up) was counted at its first call */
    if (!(t->gp_dev == args->s_dev && t->gp_ino == args->i_ino && t->gp_last == args->last_index &&
          args->index > t->gp_index))
        pages = args->last_index - args->index + 1;
    t->gp_dev = args->s_dev;
    t->gp_ino = args->i_ino;
    t->gp_index = args->index;
    t->gp_last = args->last_index;
    if (!pages)
        return PASS_ON;
    if (t->in_read)
        t->rd_pages += pages;
    struct val_t *v = stats_of(id >> 32);
    if (v)
        v->requested_pages += pages;
    return PASS_ON;
}

TRACEPOINT_PROBE(filemap, mm_filemap_add_to_page_cache)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return PASS_ON;
    u64 pages = 1ULL << (args->order & 31);
    struct task_t *t = task_state(id, 1);
    if (t) {
        t->add_ino = args->i_ino;
        t->add_index = args->index;
        t->add_pages = pages;
    }
    struct val_t *v = stats_of(id >> 32);
    if (v) {
        v->added_pages += pages;
        v->added_folios++;
    }
    return PASS_ON;
}

TRACEPOINT_PROBE(writeback, writeback_dirty_folio)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return PASS_ON;
    u64 miss_pages = 0;
    struct task_t *t = task_state(id, 0);
    if (t && t->add_pages && t->add_ino == args->ino && t->add_index == args->index) {
        miss_pages = t->add_pages;
        t->add_pages = 0;
    }
    struct val_t *v = stats_of(id >> 32);
    if (!v)
        return PASS_ON;
    if (miss_pages) {
        v->write_miss_pages += miss_pages;
        v->write_miss_folios++;
    } else {
        v->write_hit_folios++;
    }
    return PASS_ON;
}

#ifdef HAVE_READ_EXIT
static __always_inline void read_enter(u64 count)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return;
    struct task_t *t = task_state(id, 1);
    if (t) {
        t->in_read = 1;
        t->rd_count = count;
        t->rd_pages = 0;
    }
}

/* Pages requested past what the read returned (the end of the file) are taken back. Only the page
 * offset of the start is unknown: when the count is whole pages and the request spanned exactly that
 * many, the start was page-aligned; otherwise one page more is allowed. */
static __always_inline void read_exit(long ret)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return;
    struct task_t *t = task_state(id, 0);
    if (!t || !t->in_read)
        return;
    t->in_read = 0;
    u64 requested = t->rd_pages;
    if (!requested || ret < 0 || (u64)ret >= t->rd_count)
        return;
    u64 used = ((u64)ret + (1 << PAGE_SHIFT) - 1) >> PAGE_SHIFT;
    int aligned = !(t->rd_count & ((1 << PAGE_SHIFT) - 1)) && requested == t->rd_count >> PAGE_SHIFT;
    if (!aligned)
        used++;
    if (used >= requested)
        return;
    struct val_t *v = stats_of(id >> 32);
    if (v)
        v->overshoot_pages += requested - used;
}

TRACEPOINT_PROBE(syscalls, sys_enter_read)
{
    read_enter(args->count);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_enter_pread64)
{
    read_enter(args->count);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_exit_read)
{
    read_exit(args->ret);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_exit_pread64)
{
    read_exit(args->ret);
    return PASS_ON;
}
#endif
