/* offcpu: where threads block — off-CPU time per thread and per (kernel, user) stack.
 *
 * sched_switch only. The task switched out (`prev`) is the current task, so its tgid, the filters and
 * its stacks come from helpers: the stack ids taken at that moment are where it blocked. When it is
 * switched back in (`next`) the time since is added to a per-CPU hash keyed by thread and stack pair:
 * total, count, min and max. The user side reads and deletes that hash each interval.
 *
 * Each interval is charged only the blocked time inside it: the user side writes the time its
 * interval began (`cut`) before reading the hash, so a block that ends adds to total_ns only its part
 * since then (its whole length goes to length_ns, min and max), and the user side charges the open part
 * of the blocks still in `start` itself at each interval's end.
 *
 * By default only blocking counts (prev_state not runnable); -DPREEMPTED also counts the time a
 * preempted thread waited for a CPU. -DSTATE_MASK=bits keeps only blocks in those prev_state bits
 * (1: S, interruptible; 2: D, uninterruptible).
 *
 * User frames are named from a snapshot of the process's maps, which must be taken while it lives:
 * `seen` tells the user side at once (ring buffer `new_maps`) of a process that blocks for the first
 * time, and sched_process_exec of one whose maps an exec has just replaced.
 *
 * -DUSER_DWARF: a block of DWARF_MIN_NS or more gets a DWARF user stack (ustack.h: user registers and
 * a copy of the top of the stack, unwound in user space with CFI). The copy cannot be taken at the
 * switch (not the thread's own context, and most blocks are too short to pay for 16 KiB), so the
 * block waits in `pending` until the thread's blocking syscall returns (raw_syscalls:sys_exit): its
 * user stack is then the one it blocked with — checked by its user ip and sp, saved at the switch —
 * and the block goes to user space with the copy (ring buffer `dwarf_blocks`). A thread that blocks
 * again inside the same syscall (a lock on the way out) sends it from that switch, in its own context
 * too. A block that ends otherwise (a page fault; user registers that differ) is counted with its
 * frame-pointer stack in `blocked`, and in `dwarf_missed`.
 *
 * -DPYTHON_FRAMES (with -DUSER_DWARF): with the copy, the CPython frame chain of a python thread
 * (pystack.h), taken at the same moment: its frames do not change while it is blocked. */
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
#ifdef USER_DWARF
    u64 uip;   /* user registers when it blocked: the same at its syscall's return */
    u64 usp;
#endif
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
    u64 total_ns;    /* blocked time inside the interval */
    u64 length_ns;   /* the blocks' whole lengths, for their average */
    u64 count;
    u64 min_ns;
    u64 max_ns;
};

/* --stack-depth bounds the frames the kernel copies (innermost first) and the map's memory */
struct stack_t {
    u64 ip[STACK_DEPTH];
};

BPF_HASH(start, u32, struct start_t, 65536);
BPF_ARRAY(cut, u64, 1);      /* bpf_ktime_get_ns() when the user side's current interval began */
BPF_PERCPU_HASH(blocked, struct key_t, struct val_t, 32768);
BPF_TABLE("stacktrace", int, struct stack_t, stacks, STACK_ENTRIES);
LOST_COUNTER(full);          /* blocks not counted: a map was full */
LOST_COUNTER(stack_errors);  /* kernel stacks not stored (stack map full or a hash collision) */
BPF_HASH(seen, u32, u8, 65536);      /* processes whose maps the user side has been told to read */
BPF_RINGBUF_OUTPUT(new_maps, 4);     /* tgids whose maps to read now */

#ifdef USER_DWARF
#include "ustack.h"
#ifdef PYTHON_FRAMES
#include "pystack.h"
PY_PROCS_MAP;
#endif
#ifndef DWARF_MIN_NS
#define DWARF_MIN_NS 1000000
#endif
#ifndef DWARF_RING_PAGES
#define DWARF_RING_PAGES 512
#endif
struct pending_t {
    struct key_t key;
    u64 delta;
    u64 charged;
    u64 end;      /* when it ended: user space waits at a cut for those that ended before it */
    u64 uip;
    u64 usp;
};
struct dwarf_block_t {   /* the ring buffer's record: one block and its user stack */
    u32 tgid;
    u32 tid;
    int kstack;
    int ustack;          /* the frame-pointer stack id, should the unwind fail */
    u64 delta;
    u64 charged;
    u64 end;
    u64 cgid;
    char comm[TASK_COMM_LEN];
    struct ustack_t user;
#ifdef PYTHON_FRAMES
    struct pystack_t py;   /* after the stack copy: at offset 64 + sizeof(struct ustack_t) */
#endif
};
BPF_HASH(pending, u32, struct pending_t, 16384);
BPF_RINGBUF_OUTPUT(dwarf_blocks, DWARF_RING_PAGES);
LOST_COUNTER(dwarf_missed);      /* long blocks left with their frame-pointer stack */
LOST_COUNTER(dwarf_ring_full);   /* of those, because the ring buffer was full */
#endif

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

/* add one block to its (thread, stacks) totals: delta its whole length, charged its part in this interval */
static __always_inline void account(struct key_t *key, u64 delta, u64 charged)
{
    struct val_t *v = blocked.lookup(key);
    if (!v) {
        struct val_t init = {.min_ns = delta};
        blocked.insert(key, &init);
        v = blocked.lookup(key);
        if (!v) {
            count_lost();
            return;
        }
    }
    v->total_ns += charged;
    v->length_ns += delta;
    v->count++;
    if (delta < v->min_ns || v->min_ns == 0)
        v->min_ns = delta;
    if (delta > v->max_ns)
        v->max_ns = delta;
}

#ifdef USER_DWARF
/* the current task's saved user ip and sp; 0 for a kernel thread */
static __always_inline void user_ip_sp(u64 *ip, u64 *sp)
{
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs((struct task_struct *)bpf_get_current_task_btf());
    u64 cs = 0;
    *ip = *sp = 0;
    if (regs && bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs) == 0 && (cs & 3) == 3) {
        bpf_probe_read_kernel(ip, sizeof(*ip), &regs->ip);
        bpf_probe_read_kernel(sp, sizeof(*sp), &regs->sp);
    }
}

static __always_inline void count_in(void *table_lookup_result)
{
    u64 *n = table_lookup_result;
    if (n)
        (*n)++;
}

/* a pending block that will not get its DWARF stack: counted with its frame-pointer one */
static __always_inline void settle_pending(u32 tid)
{
    struct pending_t *p = pending.lookup(&tid);
    if (!p)
        return;
    struct pending_t copy = *p;
    pending.delete(&tid);
    account(&copy.key, copy.delta, copy.charged);
    int zero = 0;
    count_in(dwarf_missed.lookup(&zero));
}

/* The current thread is back in its own context with the user stack it blocked with (same user ip
 * and sp): send its pending block with a copy of that stack. Otherwise it keeps its frame-pointer one. */
static __always_inline void send_pending(u32 tid, u64 ip, u64 sp)
{
    struct pending_t *p = pending.lookup(&tid);
    if (!p)
        return;
    if (ip != p->uip || sp != p->usp) {
        settle_pending(tid);
        return;
    }
    struct dwarf_block_t *e = dwarf_blocks.ringbuf_reserve(sizeof(struct dwarf_block_t));
    if (!e) {
        int zero = 0;
        count_in(dwarf_ring_full.lookup(&zero));
        settle_pending(tid);
        return;
    }
    e->tgid = p->key.tgid;
    e->tid = tid;
    e->kstack = p->key.kstack;
    e->ustack = p->key.ustack;
    e->delta = p->delta;
    e->charged = p->charged;
    e->end = p->end;
    e->cgid = p->key.cgid;
    __builtin_memcpy(&e->comm, p->key.comm, TASK_COMM_LEN);
    pending.delete(&tid);
    ustack_capture(&e->user);
#ifdef PYTHON_FRAMES
    pystack_capture(py_procs.lookup(&e->tgid), tid, &e->py);
#endif
    dwarf_blocks.ringbuf_submit(e, 0);
}

TRACEPOINT_PROBE(raw_syscalls, sys_exit)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    if (!pending.lookup(&tid))
        return PASS_ON;
    u64 ip, sp;
    user_ip_sp(&ip, &sp);
    send_pending(tid, ip, sp);
    return PASS_ON;
}
#endif

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
#ifdef STATE_MASK
    wanted = wanted && (state & STATE_MASK) != 0;
#endif
    if (prev != 0 && wanted && !skip_task(id)) {
        struct start_t s = {.tgid = id >> 32, .cgid = bpf_get_current_cgroup_id()};
        u8 one = 1;
#ifdef USER_DWARF
        user_ip_sp(&s.uip, &s.usp);
        /* blocking again before the last block's syscall returned (a lock on the way out): this is
         * its own context too, so the last block's stack is taken now */
        send_pending(prev, s.uip, s.usp);
#endif
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
    struct start_t st = *s;
    start.delete(&next);
    u64 delta = now - st.ts;
    struct key_t key = {.tgid = st.tgid, .tid = next, .kstack = st.kstack, .ustack = st.ustack, .cgid = st.cgid};
    if (delta < MIN_BLOCK_NS)
        return PASS_ON;
    __builtin_memcpy(&key.comm, args->next_comm, TASK_COMM_LEN);
    int zero = 0;
    u64 *began = cut.lookup(&zero);
    u64 charged = began && *began > st.ts ? (now > *began ? now - *began : 0) : delta;
#ifdef USER_DWARF
    if (delta >= DWARF_MIN_NS && st.uip) {
        struct pending_t p = {.key = key, .delta = delta, .charged = charged, .end = now, .uip = st.uip, .usp = st.usp};
        if (pending.update(&next, &p) == 0)
            return PASS_ON;   /* counted when its syscall returns */
    }
#endif
    account(&key, delta, charged);
    return PASS_ON;
}
