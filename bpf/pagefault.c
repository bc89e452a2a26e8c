/* pagefault: minor and major page faults per process.
 *
 * Attached to the kernel's software perf events page-faults-min and page-faults-maj with a sample
 * period of 1, so the program runs once per fault, in the faulting task. The kernel raises these
 * events in mm_account_fault() right where it increments the task's min_flt / maj_flt, the counters
 * getrusage() reports, so minor/major here means exactly what rusage means (major = the fault waited
 * on I/O, VM_FAULT_MAJOR or a retried fault). The exceptions:page_fault_user tracepoint cannot say
 * that (its error_code is the CPU's: present/write/user bits), so it is only an optional extra count
 * of user-mode fault traps (TRAPS). Counts go to a per-CPU hash keyed by (process, cgroup) that is
 * never cleared while a process lives; the user side takes deltas. The profiler's own processes
 * (-DSKIP_OWN) are asked about only when a key would be made, so they never get one. */
/* The programs take no field of their context, so they declare it void *: the header that defines
 * struct bpf_perf_event_data pulls in linux/sched.h, which tripled the compile (0.3 s to 0.9 s). */
#include "common.h"

struct val_t {
    u64 minor;
    u64 major;
    u64 traps;
};

struct comm_t {
    char comm[TASK_COMM_LEN];
};

#ifndef MAX_PIDS
#define MAX_PIDS 32768
#endif

struct key_t {
    u32 tgid;
    u32 pad;
    u64 cgid;     /* the faulting task's cgroup (v2) */
};

BPF_PERCPU_HASH(faults, struct key_t, struct val_t, MAX_PIDS);
BPF_HASH(comms, u32, struct comm_t, MAX_PIDS);   /* names of processes gone before the user side reads */
LOST_COUNTER(full);                               /* faults not counted because `faults` was full */

/* A process named at its first fault may exec afterwards (fork, exec, exit within one interval is the
 * common case for short commands): take the new name. */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return PASS_ON;
    u32 tgid = id >> 32;
#ifdef SKIP_OWN
    if (own_tgids.lookup(&tgid))
        return PASS_ON;
#endif
    struct comm_t c = {};
    bpf_get_current_comm(&c.comm, sizeof(c.comm));
    comms.update(&tgid, &c);
    return PASS_ON;
}

enum fault_kind { MINOR, MAJOR, TRAP };

static __always_inline int count_fault(enum fault_kind kind)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return 0;
    u32 tgid = id >> 32;
    struct key_t key = {.tgid = tgid, .cgid = bpf_get_current_cgroup_id()};
    struct val_t *v = faults.lookup(&key);
    if (!v) {
#ifdef SKIP_OWN
        /* asked only for a process not counted yet: the profiler's own (common.h) never gets a key, and
           the others' faults cost no lookup more */
        if (own_tgids.lookup(&tgid))
            return 0;
#endif
        struct val_t init = {};
        faults.insert(&key, &init);
        v = faults.lookup(&key);
        if (!v) {
            int zero = 0;
            u64 *lost = full.lookup(&zero);
            if (lost)
                (*lost)++;
            return 0;
        }
        struct comm_t c = {};
        bpf_get_current_comm(&c.comm, sizeof(c.comm));
        comms.update(&tgid, &c);
    }
    if (kind == MINOR)
        v->minor++;
    else if (kind == MAJOR)
        v->major++;
    else
        v->traps++;
    return 0;
}

int on_minor(void *ctx)
{
    return count_fault(MINOR);
}

int on_major(void *ctx)
{
    return count_fault(MAJOR);
}

#ifdef COUNT_TRAPS
/* Every user-mode fault exception, including ones the kernel retries or does not account (a fault
 * that raced, a SIGSEGV); kernel-mode faults on user memory (copy_to_user) are not here but are in
 * rusage, so TRAPS is a cross-check, not a sum of MINOR and MAJOR. */
TRACEPOINT_PROBE(exceptions, page_fault_user)
{
    count_fault(TRAP);
    return PASS_ON;
}
#endif
