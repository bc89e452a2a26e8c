/* tcpconnlat: active TCP connect latency, from SYN_SENT to ESTABLISHED (or to CLOSE: a failed connect).
 *
 * One tracepoint, sock:inet_sock_set_state, for every step. CLOSE->SYN_SENT runs in the connecting
 * task (connect(2)), so the start time, pid and comm are kept there, keyed by the socket address. The
 * answer (SYN_SENT->ESTABLISHED or ->CLOSE) usually runs in softirq, where the current task is anyone:
 * the event takes pid/comm from the start entry and addresses/ports from the tracepoint, whose source
 * port is only assigned after SYN_SENT is set. A connect of the profiler's own processes (-DSKIP_OWN:
 * the app's to its collector) gets no start entry. */
#include "common.h"

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_CLOSE 7

#define STATUS_OK 0
#define STATUS_FAILED 1

struct start_t {
    u64 ts;
    u32 pid;
    char comm[TASK_COMM_LEN];
    u32 pad;
    u64 cgid;         /* the connecting task's cgroup (v2) */
};

struct event_t {
    u64 ts_ns;        /* when the connect ended, bpf_ktime_get_ns() */
    u64 delta_ns;
    u32 pid;
    u16 family;
    u16 lport;
    u16 dport;
    u8 status;
    u8 pad;
    char comm[TASK_COMM_LEN];
    u8 saddr[16];     /* IPv4 in the first 4 bytes */
    u8 daddr[16];
    u64 cgid;
};

#ifndef MAX_CONNECTS
#define MAX_CONNECTS 16384
#endif

BPF_HASH(start, u64, struct start_t, MAX_CONNECTS);
BPF_PERF_OUTPUT(events);
LOST_COUNTER(start_full);    /* connects not timed because `start` was full */

TRACEPOINT_PROBE(sock, inet_sock_set_state)
{
    if (args->protocol != IPPROTO_TCP)
        return PASS_ON;
    u64 sk = (u64)args->skaddr;
    int zero = 0;

    if (args->newstate == TCP_SYN_SENT) {
        u64 id = bpf_get_current_pid_tgid();
        if (skip_task(id))
            return PASS_ON;
#ifdef SKIP_OWN
        u32 tgid = id >> 32;
        if (own_tgids.lookup(&tgid))
            return PASS_ON;   /* the profiler's own (common.h): no start, so its answer is not reported */
#endif
#ifdef FILTER_FAMILY
        if (args->family != FILTER_FAMILY)
            return PASS_ON;
#endif
        struct start_t s = {.ts = bpf_ktime_get_ns(), .pid = id >> 32, .cgid = bpf_get_current_cgroup_id()};
        bpf_get_current_comm(&s.comm, sizeof(s.comm));
        if (start.update(&sk, &s) != 0) {
            u64 *lost = start_full.lookup(&zero);
            if (lost)
                (*lost)++;
        }
        return PASS_ON;
    }
    if (args->oldstate != TCP_SYN_SENT)
        return PASS_ON;

    struct start_t *s = start.lookup(&sk);
    if (!s)
        return PASS_ON;   /* started before tracing, or filtered out */
    struct event_t ev = {.ts_ns = bpf_ktime_get_ns(), .pid = s->pid, .cgid = s->cgid};
    ev.delta_ns = ev.ts_ns - s->ts;
    __builtin_memcpy(&ev.comm, s->comm, sizeof(ev.comm));
    start.delete(&sk);

    /* Anything but ESTABLISHED after SYN_SENT is the connect giving up (RST, timeout, close). */
    ev.status = args->newstate == TCP_ESTABLISHED ? STATUS_OK : STATUS_FAILED;
#ifdef FILTER_LPORT
    if (args->sport != FILTER_LPORT)
        return PASS_ON;
#endif
#ifdef MIN_NS
    /* failed connects are always reported: a refusal is quick and still worth seeing */
    if (ev.status == STATUS_OK && ev.delta_ns < MIN_NS)
        return PASS_ON;
#endif
    ev.family = args->family;
    ev.lport = args->sport;
    ev.dport = args->dport;
    if (ev.family == AF_INET) {
        bpf_probe_read_kernel(&ev.saddr, 4, args->saddr);
        bpf_probe_read_kernel(&ev.daddr, 4, args->daddr);
    } else {
        bpf_probe_read_kernel(&ev.saddr, 16, args->saddr_v6);
        bpf_probe_read_kernel(&ev.daddr, 16, args->daddr_v6);
    }
    events.perf_submit(args, &ev, sizeof(ev));
    return PASS_ON;
}
