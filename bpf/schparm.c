/* schparm: scheduling parameters and context switches of each thread, reported when it exits.
 *
 * Policy, nice and RT priority are never read from the task: they change only through syscalls
 * (sched_setscheduler, sched_setparam, sched_setattr, setpriority), whose arguments are recorded at
 * entry and applied at exit when the call succeeded, and are inherited at fork (task_newtask: current
 * is the parent, clone_flags says thread or process). Threads alive at start are seeded from /proc by
 * the user side. Switches and run time come from sched_switch: `prev` is the current task, so its
 * counters live in task-local storage (a tid hash where the kernel lacks it), and its run started at
 * the previous switch on this CPU. sched_process_exit sends one record per exiting thread, with the
 * cgroup it exits in (a helper: the exiting task is current), none for the profiler's own processes
 * (-DSKIP_OWN). */
#include "common.h"
#include "sched_state.h"

#define SCHED_NORMAL 0
#define SCHED_BATCH 3
#define SCHED_IDLE 5
#define SCHED_EXT 7
#define SCHED_RESET_ON_FORK 0x40000000
#define SCHED_FLAG_RESET_ON_FORK 0x01
#define SCHED_FLAG_KEEP_POLICY 0x08
#define SCHED_FLAG_KEEP_PARAMS 0x10
#define PRIO_PROCESS 0

#ifndef MAX_TASKS
#define MAX_TASKS 65536
#endif

struct params_t {
    u32 tgid;
    u32 ppid;
    u32 policy;
    int nice;
    u32 rt_priority;
    u32 reset_on_fork;
};

struct counters_t {
    u64 runtime_ns;
    u64 voluntary;
    u64 involuntary;
};

/* what a pending syscall will change if it succeeds */
#define SET_POLICY 1
#define SET_RTPRIO 2
#define SET_NICE 4
#define SET_NICE_IF_FAIR 8   /* sched_setattr: nice applies to fair policies only */
#define REFRESH 16           /* setpriority on a process group or user: the user side re-reads /proc */

struct pending_t {
    u32 target;
    u32 what;
    u32 policy;
    int nice;
    u32 rt_priority;
    u32 reset_on_fork;
};

/* the first fields of the UAPI struct sched_attr (include/uapi/linux/sched/types.h), a stable ABI */
struct sched_attr_head {
    u32 size;
    u32 sched_policy;
    u64 sched_flags;
    int sched_nice;
    u32 sched_priority;
};

struct event_t {
    u64 runtime_ns;
    u64 voluntary;
    u64 involuntary;
    u64 cgid;    /* the thread's cgroup (v2) at its exit */
    u32 pid;
    u32 tid;
    u32 ppid;
    u32 cpu;
    int prio;
    int nice;
    u32 policy;
    u32 rt_priority;
    u32 known;   /* params came from /proc or fork or a syscall, not guessed */
    char comm[TASK_COMM_LEN];
};

BPF_HASH(params, u32, struct params_t, MAX_TASKS);
BPF_HASH(pending, u32, struct pending_t, 4096);
BPF_PERCPU_ARRAY(cpu_in, u64, 1);   /* when this CPU's current task was switched in */
BPF_ARRAY(refresh, u64, 1);         /* bumped when a change needs a /proc re-read */
BPF_PERF_OUTPUT(exits);
LOST_COUNTER(full);                 /* threads whose parameters could not be stored */
#ifdef USE_TASK_STORAGE
BPF_TASK_STORAGE(counters, struct counters_t);
#else
BPF_HASH(counters, u32, struct counters_t, MAX_TASKS);
#endif

static __always_inline int fair_policy(u32 policy)
{
    return policy == SCHED_NORMAL || policy == SCHED_BATCH || policy == SCHED_IDLE || policy == SCHED_EXT;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    u64 now = bpf_ktime_get_ns();
    int zero = 0;
    u64 *since = cpu_in.lookup(&zero);
    if (!since)
        return PASS_ON;
    u64 started = *since;
    *since = now;   /* `next` runs from now, whoever it is */

    u64 id = bpf_get_current_pid_tgid();
    /* --pid/--tid only: with --cgroup every thread is counted and the exit record filtered, so a
     * thread that joins the group later still reports the switches of its whole life */
    if (args->prev_pid == 0 || skip_ids(id >> 32, (u32)id))
        return PASS_ON;
    if (args->prev_state & PREV_STATE_EXITED) {
        /* its last switch: the exit record has gone out, nothing more to count */
#ifndef USE_TASK_STORAGE
        u32 dead = id;
        counters.delete(&dead);
#endif
        return PASS_ON;
    }
#ifdef USE_TASK_STORAGE
    struct counters_t *c = counters.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0,
                                                     BPF_LOCAL_STORAGE_GET_F_CREATE);
#else
    u32 tid = id;
    struct counters_t *c = counters.lookup(&tid);
    if (!c) {
        struct counters_t init = {};
        counters.insert(&tid, &init);
        c = counters.lookup(&tid);
    }
#endif
    if (!c)
        return PASS_ON;
    if (started)
        c->runtime_ns += now - started;
    /* Blocked (state bits set) is voluntary; preempted or still runnable is involuntary, as the
     * kernel counts nvcsw/nivcsw (a yield is involuntary there too). */
    if (args->prev_state & PREV_STATE_SLEEPING)
        c->voluntary++;
    else
        c->involuntary++;
    return PASS_ON;
}

/* A new thread or process starts with its parent's parameters (reset-on-fork applied). */
TRACEPOINT_PROBE(task, task_newtask)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 parent = id, child = args->pid;
    u64 flags = args->clone_flags;
    struct params_t *pp = params.lookup(&parent);
    if (!pp)
        return PASS_ON;   /* untraced parent: not a thread of the -p process */
    struct params_t c = *pp;
    c.tgid = (flags & CLONE_THREAD) ? (u32)(id >> 32) : child;
#ifdef FILTER_PID
    if (c.tgid != FILTER_PID)
        return PASS_ON;
#endif
    c.ppid = (flags & (CLONE_THREAD | CLONE_PARENT)) ? pp->ppid : (u32)(id >> 32);
    if (c.reset_on_fork) {
        if (!fair_policy(c.policy)) {
            c.policy = SCHED_NORMAL;
            c.rt_priority = 0;
        }
        if (c.nice < 0)
            c.nice = 0;
        c.reset_on_fork = 0;
    }
    if (params.update(&child, &c) < 0) {
        int zero = 0;
        u64 *lost = full.lookup(&zero);
        if (lost)
            (*lost)++;
    }
    return PASS_ON;
}

/* --- parameter changes: remembered at entry, applied at exit on success --------------------------- */
TRACEPOINT_PROBE(syscalls, sys_enter_sched_setscheduler)
{
    u32 tid = bpf_get_current_pid_tgid();
    int policy = args->policy;
    struct pending_t p = {.target = args->pid ? (u32)args->pid : tid, .what = SET_POLICY | SET_RTPRIO,
                          .policy = policy & ~SCHED_RESET_ON_FORK,
                          .reset_on_fork = (policy & SCHED_RESET_ON_FORK) != 0};
    int prio = 0;
    bpf_probe_read_user(&prio, sizeof(prio), args->param);
    p.rt_priority = prio;
    pending.update(&tid, &p);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sched_setparam)
{
    u32 tid = bpf_get_current_pid_tgid();
    struct pending_t p = {.target = args->pid ? (u32)args->pid : tid, .what = SET_RTPRIO};
    int prio = 0;
    bpf_probe_read_user(&prio, sizeof(prio), args->param);
    p.rt_priority = prio;
    pending.update(&tid, &p);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sched_setattr)
{
    u32 tid = bpf_get_current_pid_tgid();
    struct sched_attr_head attr = {};
    if (bpf_probe_read_user(&attr, sizeof(attr), args->uattr) < 0)
        return PASS_ON;
    if (attr.sched_flags & SCHED_FLAG_KEEP_PARAMS)
        return PASS_ON;   /* only utilization clamps change */
    struct pending_t p = {.target = args->pid ? (u32)args->pid : tid, .what = SET_RTPRIO | SET_NICE_IF_FAIR,
                          .policy = attr.sched_policy, .nice = attr.sched_nice,
                          .rt_priority = attr.sched_priority,
                          .reset_on_fork = (attr.sched_flags & SCHED_FLAG_RESET_ON_FORK) != 0};
    if (!(attr.sched_flags & SCHED_FLAG_KEEP_POLICY))
        p.what |= SET_POLICY;
    pending.update(&tid, &p);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_enter_setpriority)
{
    u32 tid = bpf_get_current_pid_tgid();
    int nice = args->niceval;
    nice = nice < -20 ? -20 : nice > 19 ? 19 : nice;   /* the kernel clamps, it does not refuse */
    struct pending_t p = {.what = SET_NICE, .nice = nice};
    if (args->which != PRIO_PROCESS)
        p.what = REFRESH;   /* a whole group or user: too many tasks to resolve here */
    else
        p.target = args->who ? (u32)args->who : tid;
    pending.update(&tid, &p);
    return PASS_ON;
}

static __always_inline void apply_pending(long ret)
{
    u32 tid = bpf_get_current_pid_tgid();
    struct pending_t *p = pending.lookup(&tid);
    if (!p)
        return;
    struct pending_t change = *p;
    pending.delete(&tid);
    if (ret != 0)
        return;
    if (change.what & REFRESH) {
        int zero = 0;
        u64 *gen = refresh.lookup(&zero);
        if (gen)
            __sync_fetch_and_add(gen, 1);
        return;
    }
    struct params_t *t = params.lookup(&change.target);
    if (!t)
        return;   /* not a traced thread */
    if (change.what & SET_POLICY) {
        t->policy = change.policy;
        t->reset_on_fork = change.reset_on_fork;
    }
    if (change.what & SET_RTPRIO)
        t->rt_priority = change.rt_priority;
    if ((change.what & SET_NICE) || ((change.what & SET_NICE_IF_FAIR) && fair_policy(t->policy)))
        t->nice = change.nice;
}

TRACEPOINT_PROBE(syscalls, sys_exit_sched_setscheduler)
{
    apply_pending(args->ret);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_exit_sched_setparam)
{
    apply_pending(args->ret);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_exit_sched_setattr)
{
    apply_pending(args->ret);
    return PASS_ON;
}

TRACEPOINT_PROBE(syscalls, sys_exit_setpriority)
{
    apply_pending(args->ret);
    return PASS_ON;
}

/* --- the record ----------------------------------------------------------------------------------- */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return PASS_ON;
    u32 tid = id;
#ifdef SKIP_OWN
    u32 tgid = id >> 32;
    if (own_tgids.lookup(&tgid)) {
        params.delete(&tid);   /* the profiler's own (common.h): no record, one lookup per exit */
        return PASS_ON;
    }
#endif
    struct event_t e = {.pid = id >> 32, .tid = tid, .cpu = bpf_get_smp_processor_id(), .prio = args->prio,
                        .cgid = bpf_get_current_cgroup_id()};
    __builtin_memcpy(&e.comm, args->comm, TASK_COMM_LEN);

    struct params_t *p = params.lookup(&tid);
    if (p) {
        e.ppid = p->ppid;
        e.policy = p->policy;
        e.nice = p->nice;
        e.rt_priority = p->rt_priority;
        e.known = 1;
        params.delete(&tid);
    }
#ifdef USE_TASK_STORAGE
    struct counters_t *c = counters.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0, 0);
#else
    struct counters_t *c = counters.lookup(&tid);
#endif
    int zero = 0;
    u64 *since = cpu_in.lookup(&zero);
    if (c) {
        e.runtime_ns = c->runtime_ns;
        e.voluntary = c->voluntary;
        e.involuntary = c->involuntary;
    }
    if (since && *since)
        e.runtime_ns += bpf_ktime_get_ns() - *since;   /* it is running now */
    exits.perf_submit(args, &e, sizeof(e));
    return PASS_ON;
}
