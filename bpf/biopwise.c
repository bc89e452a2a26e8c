/* biopwise: block I/O bytes, I/Os, sync/async and device latency per (process, device).
 *
 * Kernels with block:block_io_start (6.5+): that tracepoint runs in the submitting task when a bio
 * becomes a request, so it names the owner and gives the device and direction (its fields). A raw
 * tracepoint on the same event gives the request's address, never dereferenced: the key under which
 * the request is found again at block_rq_issue, where it is counted with the bytes block_rq_issue's
 * fields give (every merge is in by then; a re-issue after the device was busy only moves the issue
 * time), and at block_rq_complete, where its latency is added (and a log2 slot of it: the latency
 * histogram). Counted at issue, in the issuer's task, not at completion: the kernel now and then runs
 * no program for a completion that ftrace sees (2 of ~24,000, in a softirq on top of another task), which
 * loses a latency, not an I/O. Completion is a raw tracepoint because a classic tracepoint program is
 * skipped when its event fires in an interrupt while any other BPF program or bpf() map call runs on the
 * CPU (fdinfo recursion_misses): 1-6 of 200 completions were lost that way beside a writing and deleting
 * `dd`. A raw tracepoint program is skipped only when it would nest in itself.
 * Kernels without block_io_start: the request's first issue is its start, so the issuing task owns it;
 * the same pair of programs on block_rq_issue (the fields, then the address) makes its entry and counts
 * it, and the raw completion adds the latency and drops the entry with the last byte completed. Matched
 * by address, not by (dev, sector) through classic programs as before: a completion those skipped (a
 * bpf() map call on the CPU, the reader's each interval) left its entry behind, and the next request
 * at that sector (a read of what was just written) passed for its re-issue and went uncounted: 8 KiB to
 * 5 MiB of a 32-MiB O_DIRECT read in each of 6 runs beside two processes making map calls.
 * Totals are never cleared while the process lives: the user side takes deltas. A request of the
 * profiler's own processes (-DSKIP_OWN) is not counted, one map lookup per request. */
#include "common.h"

struct key_t {
    u32 tgid;
    u32 dev;
    u64 cgid;
};

struct val_t {
    u64 read_bytes;
    u64 write_bytes;
    u64 read_ios;
    u64 write_ios;
    u64 sync_ios;
    u64 async_ios;
    u64 lat_ns;
    u64 lat_count;
};

#ifndef MAX_KEYS
#define MAX_KEYS 16384
#endif

BPF_PERCPU_HASH(stats, struct key_t, struct val_t, MAX_KEYS);
struct comm_t {
    char comm[TASK_COMM_LEN];
};

BPF_HASH(comms, u32, struct comm_t, 16384);    /* for processes gone before the user side looks */
LOST_COUNTER(full);    /* requests not counted because `stats` was full */
BPF_PERCPU_ARRAY(lat_hist, u64, 64);    /* log2 slots of device latency (us) of the requests counted */

/* 1 = read, 2 = write, 0 = neither (flush, discard); *sync set from the 'S' flag. See blk_fill_rwbs. */
static __always_inline int rwbs_kind(const char *rwbs, int *sync)
{
    int kind = 0;
#pragma unroll
    for (int i = 0; i < 10; i++) {
        char c = rwbs[i];
        if (c == 0)
            break;
        if (c == 'W')
            kind = 2;
        else if (c == 'R')
            kind = 1;
        else if (c == 'S')
            *sync = 1;
    }
    return kind;
}

/* The owner's totals on this CPU, made on first use; NULL (and counted in `full`) when the map is full. */
static __always_inline struct val_t *owner_totals(struct key_t *key, const char *comm)
{
    struct val_t *v = stats.lookup(key);
    if (v)
        return v;
    struct val_t init = {};
    stats.insert(key, &init);
    v = stats.lookup(key);
    if (!v) {
        int zero = 0;
        u64 *lost = full.lookup(&zero);
        if (lost)
            (*lost)++;
        return 0;
    }
    comms.update(&key->tgid, (struct comm_t *)comm);
    return v;
}

static __always_inline void add_bytes(struct val_t *v, int kind, u32 bytes)
{
    if (kind == 2)
        v->write_bytes += bytes;
    else
        v->read_bytes += bytes;
}

/* one request of `kind` (1 read, 2 write) counted: its bytes and its I/O */
static __always_inline void count_request(struct val_t *v, int kind, int sync, u32 bytes)
{
    add_bytes(v, kind, bytes);
    if (kind == 2)
        v->write_ios++;
    else
        v->read_ios++;
    if (sync)
        v->sync_ios++;
    else
        v->async_ios++;
}

static __always_inline void add_latency(struct val_t *v, u64 lat)
{
    v->lat_ns += lat;
    v->lat_count++;
    u32 slot = bpf_log2l(lat / 1000);
    u64 *bucket = lat_hist.lookup(&slot);
    if (bucket)
        (*bucket)++;
}

struct req_t {
    u64 issue_ns;    /* 0 until issued; the last issue when re-issued */
    u32 tgid;        /* owner: the task that submitted (or, without block_io_start, issued) the request */
    u32 dev;
    u64 cgid;        /* the owner's cgroup (v2) */
    u8 kind;         /* 1 read, 2 write */
    u8 sync;
    u8 counted;      /* its I/O is in `stats`: 1 at its issue, 2 at its completion (fields not had at issue) */
    u8 timed;        /* its latency is in `stats` (a completion in parts times its first) */
#ifndef HAVE_IO_START
    u32 left;        /* bytes not yet completed: the entry goes with the last part */
    u64 sector;      /* where the part not yet completed starts: a re-issue starts there */
#else
    u8 pad[4];
#endif
    char comm[TASK_COMM_LEN];
};

/* Whether `owner`'s request of `bytes` to `dev` with flags `rwbs` is counted, and as what (*kind,
 * *sync): not an empty flush, a discard, another device, a process filtered out or the profiler's own. */
static __always_inline int counted_request(u32 owner, u32 dev, u32 bytes, const char *rwbs, int *kind, int *sync)
{
    if (bytes == 0)
        return 0;    /* an empty flush */
#ifdef FILTER_DEV
    if (dev != FILTER_DEV)
        return 0;
#endif
    if (skip_ids(owner, owner) || skip_cgroup())
        return 0;
#ifdef SKIP_OWN
    if (own_tgids.lookup(&owner))
        return 0;    /* the profiler's own (common.h) */
#endif
    *kind = rwbs_kind(rwbs, sync);
    return *kind != 0;    /* 0: a discard or flush */
}

#ifdef HAVE_IO_START
/* Keyed by the request's address; made at block_io_start, gone at block_io_done (and overwritten or
 * deleted by the next block_io_start of the same struct, should that end be missed). */
BPF_HASH(requests, u64, struct req_t, 32768);

/* What block_io_start's tracepoint program read, for the raw tracepoint program of the same event,
 * which runs right after it on the same CPU (attached after it: bcctool attaches in that order) */
struct pending_t {
    struct req_t req;
    u32 tid;
    u32 full;        /* 1 = set and not yet taken; 2 = set for a request that is not counted */
};
BPF_PERCPU_ARRAY(pending, struct pending_t, 1);
LOST_COUNTER(unpaired);    /* block_io_start raw runs that found no fields: requests not counted */
/* requests issued and never timed, found at their block_io_done (or when their struct starts another
 * request): their completion did not reach block_rq_complete's program, so their latency is lost (they
 * are counted at issue). Seen here, rarely, with no skip counted: 1-5 of 200 reads in about 1 run in 50
 * beside a dd churning files; not explained yet. */
LOST_COUNTER(completion_unseen);
#else
/* Keyed by the request's address; made at its first issue, gone with its last completed byte (LRU: a
 * completion the kernel ran no program for ages out, and a new request in that struct is told from a
 * re-issue by where it starts). */
BPF_TABLE("lru_hash", u64, struct req_t, requests, 32768);
LOST_COUNTER(unpaired);    /* block_rq_issue raw runs that found no fields: requests not counted */
#endif

/* What block_rq_issue's tracepoint program read, for the raw tracepoint program of the same event, run
 * right after it on the same CPU (attached after it, as block_io_start's pair) */
struct issuing_t {
    u64 sector;
    u32 bytes;
    u32 dev;
    char rwbs[10];   /* block_rq_issue's (8 bytes on older kernels) */
    u32 tid;
    u32 full;        /* 1 = set and not yet taken */
};
BPF_PERCPU_ARRAY(issuing, struct issuing_t, 1);

#ifdef HAVE_IO_START
/* an entry's request was issued and its completion never timed */
static __always_inline void check_completion_seen(struct req_t *r)
{
    if (r->issue_ns && !r->timed) {
        int zero = 0;
        u64 *lost = completion_unseen.lookup(&zero);
        if (lost)
            (*lost)++;
    }
}

TRACEPOINT_PROBE(block, block_io_start)
{
    int zero = 0;
    struct pending_t *p = pending.lookup(&zero);
    if (!p)
        return PASS_ON;
    u64 pid_tgid = bpf_get_current_pid_tgid();
    p->tid = (u32)pid_tgid;
    p->full = 2;
    u32 owner = pid_tgid >> 32;
    int kind = 0, sync = 0;
    if (!counted_request(owner, args->dev, args->bytes, args->rwbs, &kind, &sync))
        return PASS_ON;
    struct req_t *r = &p->req;
    r->issue_ns = 0;
    r->tgid = owner;
    r->dev = args->dev;
    r->cgid = bpf_get_current_cgroup_id();
    r->kind = kind;
    r->sync = sync;
    r->counted = 0;
    r->timed = 0;
    bpf_get_current_comm(&r->comm, sizeof(r->comm));
    p->full = 1;
    return PASS_ON;
}

int io_start_request(struct bpf_raw_tracepoint_args *ctx)
{
    u64 addr = ctx->args[0];
    int zero = 0;
    struct pending_t *p = pending.lookup(&zero);
    if (!p)
        return 0;
    u32 full = p->full;
    p->full = 0;
    struct req_t *before = requests.lookup(&addr);
    if (before)
        check_completion_seen(before);
    if (full == 1 && p->tid == (u32)bpf_get_current_pid_tgid()) {
        requests.update(&addr, &p->req);
        return 0;
    }
    requests.delete(&addr);    /* not ours, or unknown: whatever this struct carried before is stale */
    if (full != 2) {
        u64 *lost = unpaired.lookup(&zero);
        if (lost)
            (*lost)++;
    }
    return 0;
}
#else
/* Without block_io_start the issuer owns the request: its entry is made here, at the first issue. */
static __always_inline void start_request(u64 addr, struct issuing_t *f)
{
    u32 owner = bpf_get_current_pid_tgid() >> 32;
    int kind = 0, sync = 0;
    if (!counted_request(owner, f->dev, f->bytes, f->rwbs, &kind, &sync))
        return;
    struct req_t r = {.tgid = owner, .dev = f->dev, .cgid = bpf_get_current_cgroup_id(), .kind = kind,
                      .sync = sync, .left = f->bytes, .sector = f->sector};
    bpf_get_current_comm(&r.comm, sizeof(r.comm));
    requests.update(&addr, &r);
}
#endif

TRACEPOINT_PROBE(block, block_rq_issue)
{
    int zero = 0;
    struct issuing_t *p = issuing.lookup(&zero);
    if (p) {
        p->bytes = args->bytes;
#ifndef HAVE_IO_START
        p->sector = args->sector;
        p->dev = args->dev;
        _Static_assert(sizeof(args->rwbs) <= sizeof(p->rwbs), "rwbs grew");
        __builtin_memcpy(p->rwbs, args->rwbs, sizeof(args->rwbs));
#endif
        p->tid = (u32)bpf_get_current_pid_tgid();
        p->full = 1;
    }
    return PASS_ON;
}

int issue_request(struct bpf_raw_tracepoint_args *ctx)
{
    u64 addr = ctx->args[ISSUE_RQ_ARG];
    int zero = 0;
    struct issuing_t *p = issuing.lookup(&zero);
    if (!p)
        return 0;
    int have = p->full && p->tid == (u32)bpf_get_current_pid_tgid();    /* the fields of this issue */
    u32 bytes = have ? p->bytes : 0;
    p->full = 0;
    struct req_t *r = requests.lookup(&addr);
#ifndef HAVE_IO_START
    if (r && have && r->sector != p->sector) {
        requests.delete(&addr);    /* a new request in the struct of one whose end was missed, not a re-issue */
        r = 0;
    }
    if (!r) {
        if (!have) {
            u64 *lost = unpaired.lookup(&zero);
            if (lost)
                (*lost)++;
            return 0;
        }
        start_request(addr, p);
        r = requests.lookup(&addr);
    }
#endif
    if (!r)
        return 0;
    r->issue_ns = bpf_ktime_get_ns();    /* a re-issue: latency from the last try */
    if (r->counted || !bytes)
        return 0;    /* counted at its first issue; or the fields were skipped: counted at completion */
    struct key_t key = {.tgid = r->tgid, .dev = r->dev, .cgid = r->cgid};
    struct val_t *v = owner_totals(&key, r->comm);
    if (!v)
        return 0;
    count_request(v, r->kind, r->sync, bytes);
    r->counted = 1;
    return 0;
}

RAW_TRACEPOINT_PROBE(block_rq_complete)
{
    u64 addr = ctx->args[0];
    struct req_t *r = requests.lookup(&addr);
    if (!r)
        return 0;
    u32 bytes = ctx->args[2];
#ifndef HAVE_IO_START
    /* no block_io_done before 6.5: the entry goes with its last byte; a part leaves where the rest starts */
    if (bytes < r->left) {
        r->left -= bytes;
        r->sector += bytes >> 9;
    } else {
        r->left = 0;
    }
#endif
    if (r->counted == 1 && r->timed)
        goto done;    /* the rest of a request counted at issue, completed in parts */
    struct key_t key = {.tgid = r->tgid, .dev = r->dev, .cgid = r->cgid};
    struct val_t *v = owner_totals(&key, r->comm);
    if (!v)
        goto done;
    if (!r->counted) {
        count_request(v, r->kind, r->sync, bytes);
        r->counted = 2;
    } else if (r->counted == 2) {
        add_bytes(v, r->kind, bytes);    /* the rest of a request counted here, completed in parts */
    }
    if (!r->timed && r->issue_ns) {
        r->timed = 1;
        add_latency(v, bpf_ktime_get_ns() - r->issue_ns);
    }
done:
#ifndef HAVE_IO_START
    if (!r->left)
        requests.delete(&addr);
#endif
    return 0;
}

#ifdef HAVE_IO_START
/* The request's end (once, after its last part): its entry goes, so none outlives its request. */
RAW_TRACEPOINT_PROBE(block_io_done)
{
    u64 addr = ctx->args[0];
    struct req_t *r = requests.lookup(&addr);
    if (!r)
        return 0;
    check_completion_seen(r);
    requests.delete(&addr);
    return 0;
}
#endif
