/* netpack: kernel transmit-path latency per packet, from net:net_dev_queue to net:net_dev_xmit.
 *
 * Queue time is kept per skb address; at xmit the latency goes into per-device totals, a per-device
 * max for the current interval and a per-device histogram (quarter-octave buckets), all per-CPU and
 * never cleared: the user side takes deltas and computes p50/p99 from the histogram, so a busy link
 * costs no per-packet traffic to user space. Per-packet events go through a perf buffer only with
 * -DEVENTS. A queue entry whose packet never reaches xmit (qdisc drop, GSO split into new skbs) is
 * counted when its skb is queued again, else expired by the user side. Device names are the
 * tracepoints' __data_loc `name` field.
 *
 * cgroup: a packet queued by a task (a send from sendmsg) is the sending task's, by
 * bpf_get_current_cgroup_id() at net_dev_queue; one queued from a softirq (an ACK or ICMP error sent
 * while receiving, a retransmit timer, a forwarded packet, a deferred TCP send) runs in whatever task
 * the softirq interrupted, so it is nobody's: cgroup id 0. Softirq context is a per-CPU flag set
 * between irq:softirq_entry and softirq_exit (softirqs do not nest on a CPU; no struct read of the
 * preempt count). --cgroup (FILTER_CGROUP_ID) keeps only task-queued packets of the group;
 * -DBY_CGROUP keys the per-device totals by (device, cgroup).
 *
 * -DSKIP_OWN: a packet queued by one of the profiler's own processes (the app's posts to its collector
 * on lo) is not timed, one map lookup per packet a task queues; one queued in a softirq is nobody's and
 * is kept (the ACKs of the app's own connections among them). */
#include "common.h"

#define IFNAMSIZ 16

struct dev_t {
    char name[IFNAMSIZ];
    u64 cgid;          /* with BY_CGROUP, else 0 */
};

struct queued_t {
    u64 ts;
    u64 cgid;          /* the queuing task's cgroup, 0 when queued in a softirq */
    u32 pid;           /* the queuing task's process, 0 when queued in a softirq */
    u32 pad;
};

/* A stacked device (vlan, bond) queues the same skb to the lower device before its own xmit returns,
 * so a packet is one entry per (skb, device), not per skb. */
struct start_key_t {
    u64 skb;
    char name[IFNAMSIZ];
};

struct slot_key_t {
    char name[IFNAMSIZ];
    u64 cgid;
    u64 slot;
};

struct stats_t {
    u64 packets;
    u64 bytes;
    u64 total_ns;
};

struct max_t {
    u64 max_ns;    /* max within epoch `epoch` */
    u64 epoch;
};

struct count_t {
    u64 count;
};

struct event_t {
    u64 ts_ns;
    u64 delta_ns;
    u64 cgid;
    u32 len;
    u32 pid;           /* the queuing process, 0 when queued in a softirq */
    char dev[IFNAMSIZ];
};

#ifndef MAX_INFLIGHT
#define MAX_INFLIGHT 32768
#endif
#ifdef BY_CGROUP
#define MAX_DEVICES 4096   /* (device, cgroup) pairs */
#else
#define MAX_DEVICES 256
#endif

BPF_HASH(start, struct start_key_t, struct queued_t, MAX_INFLIGHT);   /* (skb, device) -> queue time */
BPF_PERCPU_ARRAY(softirq, u32, 1);   /* 1 while this CPU runs a softirq */
BPF_PERCPU_HASH(stats, struct dev_t, struct stats_t, MAX_DEVICES);
BPF_PERCPU_HASH(maxes, struct dev_t, struct max_t, MAX_DEVICES);
BPF_PERCPU_HASH(hist, struct slot_key_t, struct count_t, MAX_DEVICES * 64);
BPF_ARRAY(epoch, u64, 1);      /* the interval number, set by the user side, so max_ns is per interval */
BPF_PERF_OUTPUT(events);
LOST_COUNTER(start_full);      /* packets not timed because `start` was full */
LOST_COUNTER(reused);          /* queued skbs that never reached xmit, found when the skb was reused */
LOST_COUNTER(stats_full);      /* packets timed but not counted because a stats map was full */

/* Quarter-octave bucket of a latency in ns: 0..3 exact, then 4 buckets per power of two (each at
 * most 1/4 of its lower bound wide), so a percentile read from a bucket is within 12.5% of it. */
static __always_inline u64 latency_slot(u64 ns)
{
    if (ns < 4)
        return ns;
    u64 octave = bpf_log2l(ns) - 1;    /* floor(log2(ns)), >= 2 */
    return octave * 4 + ((ns >> (octave - 2)) & 3);
}

#ifdef FILTER_DEV
static __always_inline int skip_dev(const char *name)
{
    char want[IFNAMSIZ] = FILTER_DEV;
#pragma unroll
    for (int i = 0; i < IFNAMSIZ; i++) {
        if (name[i] != want[i])
            return 1;
        if (want[i] == 0)
            break;
    }
    return 0;
}
#endif

TRACEPOINT_PROBE(irq, softirq_entry)
{
    int zero = 0;
    u32 *in = softirq.lookup(&zero);
    if (in)
        *in = 1;
    return PASS_ON;
}

TRACEPOINT_PROBE(irq, softirq_exit)
{
    int zero = 0;
    u32 *in = softirq.lookup(&zero);
    if (in)
        *in = 0;
    return PASS_ON;
}

TRACEPOINT_PROBE(net, net_dev_queue)
{
    int zero = 0;
    u32 *in = softirq.lookup(&zero);
    int by_task = !(in && *in);
#ifdef FILTER_CGROUP_ID
    if (!by_task || skip_cgroup())
        return PASS_ON;
#endif
    u32 pid = by_task ? bpf_get_current_pid_tgid() >> 32 : 0;
#ifdef SKIP_OWN
    if (by_task && own_tgids.lookup(&pid))
        return PASS_ON;   /* the profiler's own (common.h): not timed, so its xmit adds nothing */
#endif
    struct start_key_t key = {.skb = (u64)args->skbaddr};
    TP_DATA_LOC_READ_STR(&key.name, name, IFNAMSIZ);
#ifdef FILTER_DEV
    if (skip_dev(key.name))
        return PASS_ON;
#endif
    struct queued_t q = {.ts = bpf_ktime_get_ns(), .cgid = by_task ? bpf_get_current_cgroup_id() : 0, .pid = pid};
    struct queued_t *old = start.lookup(&key);
    if (old) {
        /* the skb was dropped before xmit (qdisc full) and freed, and its memory is a new packet */
        *old = q;
        u64 *n = reused.lookup(&zero);
        if (n)
            (*n)++;
        return PASS_ON;
    }
    if (start.update(&key, &q) != 0) {
        u64 *lost = start_full.lookup(&zero);
        if (lost)
            (*lost)++;
    }
    return PASS_ON;
}

TRACEPOINT_PROBE(net, net_dev_xmit)
{
    /* NETDEV_TX_BUSY: the driver will be offered this skb again, keep its queue time */
    if (args->rc != 0)
        return PASS_ON;
    struct start_key_t key = {.skb = (u64)args->skbaddr};
    TP_DATA_LOC_READ_STR(&key.name, name, IFNAMSIZ);
    struct queued_t *q = start.lookup(&key);
    if (!q)
        return PASS_ON;
    u64 now = bpf_ktime_get_ns();
    u64 delta = now - q->ts;
    u64 cgid = q->cgid;
    u32 pid = q->pid;
    start.delete(&key);

    struct dev_t dev = {};
    __builtin_memcpy(&dev.name, key.name, IFNAMSIZ);
#ifdef BY_CGROUP
    dev.cgid = cgid;
#endif
    u32 len = args->len;
    int zero = 0;

    struct stats_t *st = stats.lookup(&dev);
    if (!st) {
        struct stats_t init = {};
        stats.insert(&dev, &init);
        st = stats.lookup(&dev);
    }
    struct slot_key_t sk = {.cgid = dev.cgid, .slot = latency_slot(delta)};
    __builtin_memcpy(&sk.name, dev.name, IFNAMSIZ);
    struct count_t *c = hist.lookup(&sk);
    if (!c) {
        struct count_t init = {};
        hist.insert(&sk, &init);
        c = hist.lookup(&sk);
    }
    struct max_t *mx = maxes.lookup(&dev);
    if (!mx) {
        struct max_t init = {};
        maxes.insert(&dev, &init);
        mx = maxes.lookup(&dev);
    }
    if (!st || !c || !mx) {
        u64 *lost = stats_full.lookup(&zero);
        if (lost)
            (*lost)++;
        return PASS_ON;
    }
    st->packets++;
    st->bytes += len;
    st->total_ns += delta;
    c->count++;
    u64 *cur = epoch.lookup(&zero);
    u64 now_epoch = cur ? *cur : 0;
    if (mx->epoch != now_epoch) {
        mx->max_ns = 0;    /* a new window; window 0, before the user side set one, is not reported */
        mx->epoch = now_epoch;
    }
    if (delta > mx->max_ns)
        mx->max_ns = delta;

#ifdef EVENTS
#ifdef MIN_NS
    if (delta < MIN_NS)
        return PASS_ON;
#endif
    struct event_t ev = {.ts_ns = now, .delta_ns = delta, .cgid = cgid, .len = len, .pid = pid};
    __builtin_memcpy(&ev.dev, dev.name, IFNAMSIZ);
    events.perf_submit(args, &ev, sizeof(ev));
#endif
    return PASS_ON;
}
