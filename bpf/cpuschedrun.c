/* cpuschedrun: on-CPU run time and run-queue latency per thread, as log2 histograms.
 *
 * sched_wakeup / sched_wakeup_new start a thread's wait on the run queue; sched_switch ends the wait of
 * `next` (its run starts) and the run of `prev`. A `prev` switched out while still runnable (preempted,
 * or yielding) goes straight back on the run queue, so its wait starts at that switch. Only tracepoint
 * fields are read: tids come from the fields; the -p filter compares the tgid of `prev`, the current
 * task, and looks up membership for the others.
 *
 * `tasks` holds one state per thread seen. With -p its entries double as the member set: user space
 * seeds the process's threads, task_newtask adds the threads it creates, so no other lookup filters.
 * Totals (-DPER_THREAD) and histograms only grow; user space takes deltas, so no update is lost to a
 * read/clear race.
 *
 * Every run and wait is counted in the interval in which it ends (epoch.h): the histograms and `stats`
 * are indexed by the epoch's slot, user space reads a finished slot and clears it. Each interval is
 * charged only the run time inside it: a run that ends adds to run_ns its part since its epoch began
 * (its whole length still goes to the run-time histogram and `runs`), user space charges the open part
 * of the runs still in `tasks` (state S_RUNNING) up to each cut, and a run that ends between a cut and
 * that read leaves its part before the cut in `crossed`. A thread alone on its CPU for longer than an
 * interval so shows ~100 % in each, not 0 % and then several hundred. Waits are not split: each is
 * charged whole to the interval it ends in.
 *
 * The kernel does not deliver every sched_switch. Some kernels deliver no event raised in the context of
 * certain tasks (in a Firecracker guest here, the VM agent's threads, e.g. tokio-rt-worker): their switches
 * out are never seen, and so neither the switch in of the task after them, nor the wakeups they make. A
 * run must not stay open in our books until the thread's next switch in, which may be seconds away:
 * `on_cpu` keeps the task the last switch seen on this CPU put on it, and when the next switch seen here
 * takes off another task, that task's switch out was not delivered. Its run ends there with no time (when
 * it ended is not known), counted in `unseen_switch_outs`, as is a run of a thread switched in while by
 * our books it still runs elsewhere. A thread switched out while our books say it is queued or asleep was
 * switched in unseen. Its run is counted, timed from when it was queued or from when the task on this
 * CPU by our books was last known there (its switch, or heal() finding it), whichever is later (its wait, unknown, as 0) or, asleep, with no time, and counted in
 * `unseen_switch_ins`; user space never saw it open, so its whole length goes to the interval it ends in.
 * heal() (at the end) finds most such switches within 1/HEAL_HZ s instead, and opens the run then. A task never seen leaving its CPU is so charged no run time, and the task after it
 * may be charged its run (tests/metrics/test_cpuschedrun_machine.py measures both).
 *
 * --cgroup (FILTER_CGROUP_ID) filters like -p: `tasks` is the member set, seeded by user space from the
 * group's and its descendants' cgroup.threads, joined by tasks created by a member (they start in its
 * group) and by any task switched out while in the group. Each thread's entry keeps its cgroup as of its
 * last switch out, for its row.
 *
 * -DSKIP_OWN: the profiler's own threads (common.h) are S_OWN in `tasks` and nothing of them is counted.
 * Whose a thread is shows at its switch out (`prev` is the current task): its entry keeps the answer with
 * own_gen, so the own_tgids hash is asked once a thread and again only after the set changed, one array
 * read per switch otherwise. A thread made by an own process is own from its sched_wakeup_new. */
#include "common.h"
#include "sched_state.h"
#include "epoch.h"

#if defined(FILTER_PID) || defined(FILTER_CGROUP_ID)
#define MEMBERS_ONLY 1   /* only threads in `tasks` are followed on the wakeup and `next` sides */
#endif

#define S_UNKNOWN 0   /* sleeping, or seeded: no interval open */
#define S_QUEUED 1    /* runnable, waiting for a CPU since ts */
#define S_RUNNING 2   /* on a CPU since ts */
#define S_OWN 3       /* the profiler's own (-DSKIP_OWN): nothing of it is counted */


#ifndef MAX_TASKS
#define MAX_TASKS 65536
#endif

struct task_t {
    u64 ts;
    u32 state;
    u32 own;      /* SKIP_OWN: own_gen when last looked up << 1 | the thread is the profiler's own */
#ifdef PER_THREAD
    u64 cgid;     /* its cgroup (v2) at its last switch out, for its row (0: not switched out yet) */
#endif
};

BPF_HASH(tasks, u32, struct task_t, MAX_TASKS);
/* log2 slots of run time (us, or ms with -DMILLISECONDS) and of run-queue latency, 64 per epoch slot */
BPF_PERCPU_ARRAY(run_hist, u64, 128);
BPF_PERCPU_ARRAY(wait_hist, u64, 128);
LOST_COUNTER(full);                      /* threads not tracked because a map was full */
LOST_COUNTER(unseen_switch_ins);         /* runs whose switch in the kernel did not deliver */
LOST_COUNTER(unseen_switch_outs);        /* runs whose switch out the kernel did not deliver */
struct on_cpu_t {
    u64 ts;        /* when this CPU's last switch was seen */
    u32 tid;       /* the task it put on the CPU (0: idle) */
    u32 pad;
    u64 checked;   /* when `tid` was last known to be on it: that switch, or heal() finding it there */
};
BPF_PERCPU_ARRAY(on_cpu, struct on_cpu_t, 1);
BPF_ARRAY(epochs, struct epoch_t, 1);

#ifdef PER_THREAD
struct stat_t {
    u64 run_ns;
    u64 wait_ns;
    u64 runs;
    u64 waits;
    u64 unseen_switch_ins;   /* of its runs, those whose switch in was not delivered: their start is estimated */
};

struct ident_t {
    u32 tgid;
    char comm[TASK_COMM_LEN];
    u32 pad;
    u64 cgid;
};

struct stat_key_t {
    u32 tid;
    u32 slot;   /* EPOCH_SLOT of the interval */
};

/* a run that ended after a cut, before user space read the runs open at it: its part before the cut */
struct crossed_key_t {
    u32 tid;
    u32 pad;
    u64 start;
};

BPF_PERCPU_HASH(stats, struct stat_key_t, struct stat_t, MAX_TASKS);
BPF_HASH(crossed, struct crossed_key_t, u64, 4096);
/* who an exited thread was, for its last row (/proc answers for the living); written once per exit */
BPF_TABLE("lru_hash", u32, struct ident_t, exited, 4096);
#endif

#ifdef MILLISECONDS
#define HIST_DIV 1000000
#else
#define HIST_DIV 1000
#endif

#ifdef FAULT_UNTRACED_TID
/* tests (bcctool's BCCTOOL_FAULTS): no event raised in this thread's context is delivered, as this kernel
 * does with the VM agent's (see above): its switches out, and so the switch in of the task after it, and
 * the wakeups it makes */
#define UNTRACED(tid) ((u32)(tid) == FAULT_UNTRACED_TID)
#else
#define UNTRACED(tid) 0
#endif

static __always_inline void count_lost(void)
{
    int zero = 0;
    u64 *lost = full.lookup(&zero);
    if (lost)
        (*lost)++;
}

/* A wakeup queues a thread that was not runnable; one already queued keeps its earlier start, and one
 * still on its CPU (woken before it finished going to sleep) is not queued at all. */
static __always_inline void on_wakeup(u32 tid)
{
#ifdef FILTER_TID
    if (tid != FILTER_TID)
        return;
#endif
    if (tid == 0)
        return;
    struct task_t *t = tasks.lookup(&tid);
    if (!t) {
#ifdef MEMBERS_ONLY
        return;   /* not a member */
#else
        struct task_t init = {.ts = bpf_ktime_get_ns(), .state = S_QUEUED};
        if (tasks.insert(&tid, &init) == ERR_MAP_FULL)
            count_lost();
        return;
#endif
    }
    if (t->state == S_UNKNOWN) {
        t->ts = bpf_ktime_get_ns();
        t->state = S_QUEUED;
    }
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
    if (UNTRACED(bpf_get_current_pid_tgid()))
        return PASS_ON;
    on_wakeup(args->pid);
    return PASS_ON;
}

#ifdef SKIP_OWN
static __always_inline u32 own_generation(void)
{
    int zero = 0;
    u32 *gen = own_gen.lookup(&zero);
    return gen ? *gen : 0;
}
#endif

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
    if (UNTRACED(bpf_get_current_pid_tgid()))
        return PASS_ON;
#ifdef SKIP_OWN
    /* the current task made the new one: a thread or child of the profiler's own is its own too, from
       birth (and stays so by our books until own_gen changes: that refresh has found it) */
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    if (own_tgids.lookup(&parent)) {
        u32 child = args->pid;
        struct task_t init = {.state = S_OWN, .own = own_generation() << 1 | 1};
        if (tasks.update(&child, &init) == ERR_MAP_FULL)
            count_lost();
        return PASS_ON;
    }
#endif
    on_wakeup(args->pid);
    return PASS_ON;
}

#ifdef MEMBERS_ONLY
/* A thread created by the traced process (or a task created in the traced cgroup, where it starts)
 * becomes a member before its first wakeup. */
TRACEPOINT_PROBE(task, task_newtask)
{
#ifdef FILTER_PID
    if ((u32)(bpf_get_current_pid_tgid() >> 32) != FILTER_PID || !(args->clone_flags & CLONE_THREAD))
        return PASS_ON;
#endif
    if (skip_cgroup())
        return PASS_ON;
    u32 tid = args->pid;
    struct task_t init = {.state = S_UNKNOWN};
    if (tasks.insert(&tid, &init) == ERR_MAP_FULL)
        count_lost();
    return PASS_ON;
}
#endif

#ifdef PER_THREAD
/* a thread's counters for this epoch, created on first use */
static __always_inline struct stat_t *stat_of(u32 tid, struct epoch_t *epoch)
{
    struct stat_key_t key = {.tid = tid, .slot = EPOCH_SLOT(epoch)};
    struct stat_t *s = stats.lookup(&key);
    if (s)
        return s;
    struct stat_t init = {};
    stats.insert(&key, &init);
    s = stats.lookup(&key);
    if (!s)
        count_lost();
    return s;
}
#endif

/* one run (wait 0) or wait (1) of this length in the epoch's half of its log2 histogram */
static __always_inline void count_in_hist(int wait, struct epoch_t *epoch, u64 length)
{
    u32 slot = EPOCH_SLOT(epoch) * 64 + bpf_log2l(length / HIST_DIV);
    u64 *bucket = wait ? wait_hist.lookup(&slot) : run_hist.lookup(&slot);
    if (bucket)
        (*bucket)++;
}

/* a run of `tid` that began at `start` ends now. `seen_open`: user space charged it up to each cut it
 * crossed (it was S_RUNNING in `tasks`), so only its part since this epoch began is added here. A run
 * whose switch in was not delivered was never open by our books: it is charged whole, to the interval in
 * which it ends, or the part before the last cut is lost (a spinner alone on its CPU after the VM agent
 * preempted it: 78 ms of 3.8 s short in one run) */
static __always_inline void end_run(struct epoch_t *epoch, u32 tid, u64 start, u64 now, int seen_open)
{
    count_in_hist(0, epoch, now - start);
#ifdef PER_THREAD
    struct stat_t *s = stat_of(tid, epoch);
    if (s) {
        s->run_ns += seen_open ? epoch_part(epoch, start, now) : now - start;
        s->runs++;
    }
    u64 before_cut = seen_open ? epoch_crossed_part(epoch, start) : 0;
    if (before_cut) {
        struct crossed_key_t ck = {.tid = tid, .start = start};
        if (crossed.update(&ck, &before_cut) == ERR_MAP_FULL)
            count_lost();
    }
#endif
}

/* a wait of `tid` on the run queue that began at `start` ends now */
static __always_inline void end_wait(struct epoch_t *epoch, u32 tid, u64 start, u64 now)
{
    count_in_hist(1, epoch, now - start);
#ifdef PER_THREAD
    struct stat_t *s = stat_of(tid, epoch);
    if (s) {
        s->wait_ns += now - start;
        s->waits++;
    }
#endif
}

/* a run of `tid` whose switch in was not delivered: its start is an estimate (see sched_switch, heal) */
static __always_inline void count_unseen_switch_in(struct epoch_t *epoch, u32 tid)
{
    int zero = 0;
    u64 *unseen = unseen_switch_ins.lookup(&zero);
    if (unseen)
        (*unseen)++;
#ifdef PER_THREAD
    struct stat_t *s = stat_of(tid, epoch);
    if (s)
        s->unseen_switch_ins++;
#endif
}

/* a run whose switch out was not delivered ends now, with no time: when it ended is not known */
static __always_inline void end_unseen_run(struct epoch_t *epoch, u32 tid, struct task_t *t, u64 now)
{
    end_run(epoch, tid, now, now, 1);
    t->ts = now;
    t->state = S_UNKNOWN;
    int zero = 0;
    u64 *unseen = unseen_switch_outs.lookup(&zero);
    if (unseen)
        (*unseen)++;
}

#ifdef SKIP_OWN
/* 1 when `prev` (`t` its entry, or NULL), switching out now, is the profiler's own (common.h): its entry
 * is left in S_OWN, or deleted at its exit, and nothing of it is counted. An entry keeps its answer with
 * the own_gen it was found under, so the hash is asked again only after the set changed. */
static __always_inline int own_switch_out(struct task_t *t, u32 prev, u32 tgid, long state)
{
    u32 gen = own_generation();
    int own = t && t->own >> 1 == gen ? t->own & 1 : own_tgids.lookup(&tgid) != 0;
    if (!own) {
        if (t && t->state == S_OWN) {   /* no longer the profiler's own: followed from this switch out */
            t->state = S_UNKNOWN;
            t->ts = 0;
        }
        if (t)
            t->own = gen << 1;
        return 0;
    }
    if (state & PREV_STATE_EXITED) {
        tasks.delete(&prev);
    } else if (t) {
        t->state = S_OWN;
        t->own = gen << 1 | 1;
    } else {
        struct task_t init = {.state = S_OWN, .own = gen << 1 | 1};
        if (tasks.insert(&prev, &init) == ERR_MAP_FULL)
            count_lost();
    }
    return 1;
}
#endif

/* the entry of `tid`, switched in (a switch seen, or heal() finding it on its CPU): NULL when it is not
 * followed, or when it was not known (then it is now, running since `since`: its first run is counted) */
static __always_inline struct task_t *switched_in(u32 tid, u64 since)
{
#ifdef FILTER_TID
    if (tid != FILTER_TID)
        return NULL;
#endif
    struct task_t *t = tasks.lookup(&tid);
    if (!t) {
#ifndef MEMBERS_ONLY
        struct task_t init = {.ts = since, .state = S_RUNNING};
        if (tasks.insert(&tid, &init) == ERR_MAP_FULL)
            count_lost();
#endif
    }
    return t;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    if (UNTRACED(args->prev_pid))
        return PASS_ON;
    int zero = 0;
    struct epoch_t *ep = epochs.lookup(&zero);   /* before the clock: what ends now sees its epoch */
    if (!ep)
        return PASS_ON;
    struct epoch_t epoch = *ep;
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid, next = args->next_pid;
    struct on_cpu_t *cpu = on_cpu.lookup(&zero);   /* this CPU's last switch seen before this one */
    if (cpu && cpu->tid && cpu->tid != prev) {
        /* the task that switch put on this CPU is not the one leaving it: its switch out was not
           delivered. Unless it has been seen switched in since (elsewhere), its run ends here */
        u32 gone = cpu->tid;
        struct task_t *g = tasks.lookup(&gone);
        if (g && g->state == S_RUNNING && g->ts == cpu->ts)
            end_unseen_run(&epoch, gone, g, now);
    }

    /* prev: the current task, so its tgid is known and the filter is a compare */
    u64 id = bpf_get_current_pid_tgid();
    if (prev != 0 && !skip_task(id)) {
        long state = args->prev_state;
        u32 new_state = (state & PREV_STATE_SLEEPING) == 0 ? S_QUEUED : S_UNKNOWN;
        struct task_t *t = tasks.lookup(&prev);
#ifdef SKIP_OWN
        if (own_switch_out(t, prev, id >> 32, state))
            goto switched_out;
#endif
        if (t) {
            if (t->state == S_RUNNING) {
                end_run(&epoch, prev, t->ts, now, 1);
            } else if (t->ts) {
                /* it ran, yet by our books it waits or sleeps: its switch in (and for a sleeper its
                   wakeup too) was not delivered. Queued: its run is taken from then, or from the
                   last switch seen on this CPU; asleep: counted with no time, which is not known */
                u64 from = now;
                if (t->state == S_QUEUED) {
                    /* switched in on this CPU after its queueing and after the task on it by our books
                       was last known there (its switch, or heal() finding it) */
                    from = t->ts;
                    if (cpu && cpu->checked > from)
                        from = cpu->checked;
                }
                end_wait(&epoch, prev, from, from);
                end_run(&epoch, prev, from, now, 0);
                count_unseen_switch_in(&epoch, prev);
            }
            if (state & PREV_STATE_EXITED) {
                tasks.delete(&prev);
#ifdef PER_THREAD
                struct ident_t who = {.tgid = id >> 32, .cgid = bpf_get_current_cgroup_id()};
                __builtin_memcpy(&who.comm, args->prev_comm, TASK_COMM_LEN);
                exited.update(&prev, &who);
#endif
            } else {
                t->ts = now;
                t->state = new_state;
#ifdef PER_THREAD
                t->cgid = bpf_get_current_cgroup_id();
#endif
            }
        } else if (!(state & PREV_STATE_EXITED)) {
            struct task_t init = {.ts = now, .state = new_state};
#ifdef PER_THREAD
            init.cgid = bpf_get_current_cgroup_id();
#endif
            if (tasks.insert(&prev, &init) == ERR_MAP_FULL)
                count_lost();
        }
    }
#ifdef FILTER_CGROUP_ID
    /* a thread moved out of the group while it ran: its run ends here, or each interval would charge
       it the whole interval (user space charges open runs) for as long as it stays out */
    else if (prev != 0)
        tasks.delete(&prev);
#endif
#ifdef SKIP_OWN
switched_out:
#endif

    if (cpu) {
        cpu->ts = cpu->checked = now;
        cpu->tid = next;
    }

    /* next: its wait ends and its run starts */
    if (next == 0)
        return PASS_ON;
    struct task_t *t = switched_in(next, now);
    if (!t)
        return PASS_ON;
#ifdef SKIP_OWN
    if (t->state == S_OWN)
        return PASS_ON;   /* the profiler's own: its run is not followed */
#endif
    if (t->state == S_QUEUED) {
        end_wait(&epoch, next, t->ts, now);
    } else if (t->state == S_RUNNING) {
        /* on a CPU by our books, and switched in again: the switch out between was not delivered */
        end_unseen_run(&epoch, next, t, now);
    }
    t->ts = now;
    t->state = S_RUNNING;
    return PASS_ON;
}

/* The books of a CPU whose switch was not delivered stay wrong until the next switch seen there, which
 * for a thread alone on its CPU after the VM agent preempted it may be seconds away: by our books it is
 * queued, so no cut charges its run, and the whole run went late to the interval it ended in (a spinner at
 * 95 % of its CPU showed 76 % and then 118 % in a loaded run). A cpu-clock event fires heal() HEAL_HZ
 * times a second on each CPU: the task it interrupts is the one on the CPU, and where `on_cpu` names
 * another, the switch that put it there was not delivered. heal() does what that switch would have: the
 * run on record ends (unseen switch out, no time), and the current task's run begins when the task on
 * record was last known on the CPU (its switch, or the last tick that found it there: at most 1/HEAL_HZ
 * s of another's run goes to it, where the last switch seen could be the agent's whole run before), or
 * when it was queued, if later, so from now on the cuts charge it. Its part before a cut that user space
 * has already read open runs for was charged by nobody: that part goes to this interval, late by at most
 * 1/HEAL_HZ s. */
int heal(struct bpf_perf_event_data *ctx)
{
    int zero = 0;
    struct on_cpu_t *cpu = on_cpu.lookup(&zero);
    u32 cur = bpf_get_current_pid_tgid();
    if (!cpu || !cpu->ts)
        return 0;
    u64 now = bpf_ktime_get_ns();
    if (cpu->tid == cur) {
        cpu->checked = now;   /* the books are right (the cheapest path: one array read, the clock) */
        return 0;
    }
    struct epoch_t *ep = epochs.lookup(&zero);
    if (!ep)
        return 0;
    struct epoch_t epoch = *ep;
    u32 gone = cpu->tid;
    struct task_t *g = tasks.lookup(&gone);
    if (g && g->state == S_RUNNING && g->ts == cpu->ts)
        end_unseen_run(&epoch, gone, g, now);
    u64 from = cpu->checked;
    cpu->tid = cur;
    if (cur == 0) {
        cpu->ts = cpu->checked = now;   /* idle: whatever runs next is switched in after now */
        return 0;
    }
    struct task_t *t = switched_in(cur, from);
    if (!t)
        return 0;
#ifdef SKIP_OWN
    if (t->state == S_OWN)
        return 0;
#endif
    if (t->state == S_RUNNING) {
        end_unseen_run(&epoch, cur, t, now);   /* on another CPU by our books: its switch out there not seen */
    } else if (t->ts > from) {
        from = t->ts;   /* queued (or woken) after the last switch seen here */
    }
    if (t->state == S_QUEUED)
        end_wait(&epoch, cur, from, from);   /* its wait's end is not known: as the switch out would count it */
    t->ts = from;
    t->state = S_RUNNING;
    cpu->ts = cpu->checked = from;
    count_unseen_switch_in(&epoch, cur);
#ifdef PER_THREAD
    /* the part before the cut whose open runs user space has read (or, while it has not yet, before the
     * cut before it): no reader charged it */
    u64 upto = epoch.collected + 1 >= epoch.epoch ? epoch.began : epoch.prev_began;
    if (from < upto) {
        struct stat_t *s = stat_of(cur, &epoch);
        if (s)
            s->run_ns += upto - from;
    }
#endif
    return 0;
}
