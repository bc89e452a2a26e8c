/* biopwise: block I/O bytes, I/Os, sync/async and device latency per (process, device).
 *
 * block:block_io_start (where the kernel has it) runs in the submitting task when a bio becomes a
 * request, so it names the owner. block:block_rq_issue counts the request once, with its final size
 * (back-merged bios included), and stamps the issue time; a re-issue after the device was busy (it
 * happens here: virtio returns BLK_STS_RESOURCE and kblockd retries) only moves the stamp, so nothing
 * is counted twice nor credited to the kworker that retried. block:block_rq_complete adds the latency
 * (and a log2 slot of it: the latency histogram over every request counted).
 * Requests are keyed by (dev, sector) — tracepoint fields only. Totals are never cleared while the
 * process lives: the user side takes deltas. A request of the profiler's own processes (-DSKIP_OWN) is
 * not counted at issue, one map lookup per request. */
#include "common.h"

struct rq_key {
    u32 dev;
    u32 pad;
    u64 sector;
};

struct rq_val {
    u64 issue_ns;    /* 0 until issued */
    u32 tgid;        /* owner: the submitter at block_io_start, else the task at issue */
    u32 skip;        /* the owner is outside --cgroup (judged where the owner is the current task) */
    char comm[TASK_COMM_LEN];
    u64 cgid;        /* the owner's cgroup (v2) */
};

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

/* LRU: a request whose completion we never see (started before tracing, front-merged) ages out. */
BPF_TABLE("lru_hash", struct rq_key, struct rq_val, inflight, 32768);
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

#ifdef HAVE_IO_START
TRACEPOINT_PROBE(block, block_io_start)
{
    if (args->bytes == 0)
        return PASS_ON;    /* an empty flush */
#ifdef FILTER_DEV
    if (args->dev != FILTER_DEV)
        return PASS_ON;
#endif
    /* Recorded whatever -p says: the filter applies to the owner at issue, so a request of another
     * process that the filtered one happens to dispatch is never credited to it. */
    struct rq_key key = {.dev = args->dev, .sector = args->sector};
    struct rq_val val = {.tgid = bpf_get_current_pid_tgid() >> 32, .skip = skip_cgroup(),
                         .cgid = bpf_get_current_cgroup_id()};
    bpf_get_current_comm(&val.comm, sizeof(val.comm));
    inflight.update(&key, &val);
    return PASS_ON;
}
#endif

TRACEPOINT_PROBE(block, block_rq_issue)
{
    if (args->bytes == 0)
        return PASS_ON;
#ifdef FILTER_DEV
    if (args->dev != FILTER_DEV)
        return PASS_ON;
#endif
    struct rq_key rk = {.dev = args->dev, .sector = args->sector};
    u64 now = bpf_ktime_get_ns();
    struct rq_val *rq = inflight.lookup(&rk);
    if (rq && rq->issue_ns) {
        rq->issue_ns = now;    /* a re-issue: counted already, latency from the last try */
        return PASS_ON;
    }
    u32 owner = rq ? rq->tgid : bpf_get_current_pid_tgid() >> 32;
    if (skip_ids(owner, owner) || (rq ? rq->skip : skip_cgroup()))
        return PASS_ON;
#ifdef SKIP_OWN
    if (own_tgids.lookup(&owner))
        return PASS_ON;   /* the profiler's own (common.h): not issued by our books, so its completion adds nothing */
#endif
    int sync = 0;
    int kind = rwbs_kind(args->rwbs, &sync);
    if (!kind)
        return PASS_ON;
    if (rq) {
        rq->issue_ns = now;
    } else {
        struct rq_val val = {.issue_ns = now, .tgid = owner, .cgid = bpf_get_current_cgroup_id()};
        bpf_get_current_comm(&val.comm, sizeof(val.comm));
        inflight.update(&rk, &val);
        rq = inflight.lookup(&rk);
        if (!rq)
            return PASS_ON;
    }

    struct key_t key = {.tgid = owner, .dev = args->dev, .cgid = rq->cgid};
    struct val_t *v = stats.lookup(&key);
    if (!v) {
        struct val_t init = {};
        stats.insert(&key, &init);
        v = stats.lookup(&key);
        if (!v) {
            int zero = 0;
            u64 *lost = full.lookup(&zero);
            if (lost)
                (*lost)++;
            return PASS_ON;
        }
        comms.update(&key.tgid, (struct comm_t *)rq->comm);
    }
    if (kind == 2) {
        v->write_bytes += args->bytes;
        v->write_ios++;
    } else {
        v->read_bytes += args->bytes;
        v->read_ios++;
    }
    if (sync)
        v->sync_ios++;
    else
        v->async_ios++;
    return PASS_ON;
}

TRACEPOINT_PROBE(block, block_rq_complete)
{
    struct rq_key rk = {.dev = args->dev, .sector = args->sector};
    struct rq_val *rq = inflight.lookup(&rk);
    if (!rq)
        return PASS_ON;
    u64 issued = rq->issue_ns;
    struct key_t key = {.tgid = rq->tgid, .dev = args->dev, .cgid = rq->cgid};
    inflight.delete(&rk);
    if (!issued)
        return PASS_ON;
    struct val_t *v = stats.lookup(&key);
    if (v) {
        u64 lat = bpf_ktime_get_ns() - issued;
        v->lat_ns += lat;
        v->lat_count++;
        u32 slot = bpf_log2l(lat / 1000);
        u64 *bucket = lat_hist.lookup(&slot);
        if (bucket)
            (*bucket)++;
    }
    return PASS_ON;
}
