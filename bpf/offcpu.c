/* offcpu: where threads block — off-CPU time per thread and per (kernel, user) stack.
 *
 * sched_switch only. The task switched out (`prev`) is the current task, so its tgid, the filters and
 * its stacks come from helpers: the stack ids taken at that moment are where it blocked. When it is
 * switched back in (`next`) the time since is added to a per-CPU hash keyed by thread and stack pair:
 * total, count, min and max. The user side reads and deletes that hash each interval.
 *
 * By default only blocking counts (prev_state not runnable); -DPREEMPTED also counts the time a
 * preempted thread waited for a CPU.
 *
 * User frames are named from a snapshot of the process's maps, which must be taken while it lives:
 * `seen` tells the user side at once (ring buffer `new_maps`) of a process that blocks for the first
 * time, and sched_process_exec of one whose maps an exec has just replaced. */
#include "common.h"
#include "sched_state.h"

#ifndef MIN_BLOCK_NS
#define MIN_BLOCK_NS 1000
#endif
#ifndef STACK_DEPTH
#define STACK_DEPTH 127
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 16384
#endif

struct start_t {
    u64 ts;
    u32 tgid;
    int kstack;
    int ustack;
    u32 pad;
    u64 cgid;     /* the thread's cgroup (v2) when it blocked */
};

struct key_t {
    u32 tgid;
    u32 tid;
    int kstack;
    int ustack;
    char comm[TASK_COMM_LEN];
    u64 cgid;
};

struct val_t {
    u64 total_ns;
    u64 count;
    u64 min_ns;
    u64 max_ns;
};

/* --stack-depth bounds the frames the kernel copies (innermost first) and the map's memory */
struct stack_t {
    u64 ip[STACK_DEPTH];
};

BPF_HASH(start, u32, struct start_t, 65536);
BPF_PERCPU_HASH(blocked, struct key_t, struct val_t, 32768);
BPF_TABLE("stacktrace", int, struct stack_t, stacks, STACK_ENTRIES);
LOST_COUNTER(full);          /* blocks not counted: a map was full */
LOST_COUNTER(stack_errors);  /* kernel stacks not stored (stack map full or a hash collision) */
BPF_HASH(seen, u32, u8, 65536);      /* processes whose maps the user side has been told to read */
BPF_RINGBUF_OUTPUT(new_maps, 4);     /* tgids whose maps to read now */

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 id = bpf_get_current_pid_tgid();
    if (skip_task(id))
        return PASS_ON;
    u32 tgid = id >> 32;
    u8 one = 1;
    seen.update(&tgid, &one);
    new_maps.ringbuf_output(&tgid, sizeof(tgid), 0);
    return PASS_ON;
}

static __always_inline void count_lost(void)
{
    int zero = 0;
    u64 *lost = full.lookup(&zero);
    if (lost)
        (*lost)++;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    u64 now = bpf_ktime_get_ns();

    /* prev: remember when and where it blocked */
    u64 id = bpf_get_current_pid_tgid();
    u32 prev = args->prev_pid;
    long state = args->prev_state;
#ifdef PREEMPTED
    int wanted = !(state & PREV_STATE_EXITED);
#else
    int wanted = (state & PREV_STATE_SLEEPING) != 0 && !(state & PREV_STATE_EXITED);
#endif
    if (prev != 0 && wanted && !skip_task(id)) {
        struct start_t s = {.tgid = id >> 32, .cgid = bpf_get_current_cgroup_id()};
        u8 one = 1;
        if (seen.insert(&s.tgid, &one) == 0)
            new_maps.ringbuf_output(&s.tgid, sizeof(s.tgid), 0);
        s.kstack = stacks.get_stackid(args, 0);
        s.ustack = stacks.get_stackid(args, BPF_F_USER_STACK);
        /* the block starts after this program's own stack walk (~4.5 us), not before it */
        s.ts = bpf_ktime_get_ns();
        if (s.kstack < 0) {
            int zero = 0;
            u64 *lost = stack_errors.lookup(&zero);
            if (lost)
                (*lost)++;
        }
        if (start.update(&prev, &s) == ERR_MAP_FULL)
            count_lost();
    }

    /* next: it is back; how long was it away? */
    u32 next = args->next_pid;
    struct start_t *s = start.lookup(&next);
    if (!s)
        return PASS_ON;
    u64 delta = now - s->ts;
    struct key_t key = {.tgid = s->tgid, .tid = next, .kstack = s->kstack, .ustack = s->ustack, .cgid = s->cgid};
    start.delete(&next);
    if (delta < MIN_BLOCK_NS)
        return PASS_ON;
    __builtin_memcpy(&key.comm, args->next_comm, TASK_COMM_LEN);

    struct val_t *v = blocked.lookup(&key);
    if (!v) {
        struct val_t init = {.min_ns = delta};
        blocked.insert(&key, &init);
        v = blocked.lookup(&key);
        if (!v) {
            count_lost();
            return PASS_ON;
        }
    }
    v->total_ns += delta;
    v->count++;
    if (delta < v->min_ns || v->min_ns == 0)
        v->min_ns = delta;
    if (delta > v->max_ns)
        v->max_ns = delta;
    return PASS_ON;
}
