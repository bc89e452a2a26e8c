/* offcpu: where threads block — off-CPU time per thread and per (kernel, user) stack.
 *
 * sched_switch only. The task switched out (`prev`) is the current task, so its tgid, the filters and
 * its stacks come from helpers: the stack ids taken at that moment are where it blocked. When it is
 * switched back in (`next`) the time since is added to a per-CPU hash keyed by thread and stack pair:
 * total, count, min and max. The user side reads and deletes that hash each interval. A block in progress
 * is its thread's entry in `start`; the entry stays between blocks with ts 0 (rewritten in place, ts last,
 * rather than inserted and deleted each block) and goes at the thread's last switch out.
 *
 * Each interval is charged only the blocked time inside it, and every block is counted in the interval
 * in which it ends (epoch.h): `blocked` is keyed by the epoch's slot, a block that ends adds to total_ns
 * its part since its epoch began (its whole length goes to length_ns, min and max), user space charges
 * the blocks still in `start` up to each cut, and a block that ends in the moment between a cut and that
 * read leaves its part before the cut in `crossed`.
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
 * -DPYTHON_FRAMES (with -DUSER_DWARF or -DUSER_KERNEL): the CPython frame chain of a python thread
 * (pystack.h): with the copy (dwarf), or at the switch out (kernel: stored in `ustacks` too, the block
 * keeping its hash, taken at every block, as one native stack runs many Python chains since 3.11); its
 * frames do not change while it is blocked.
 *
 * -DSTACK_EVERY=N (N > 1): a block takes its stacks if its thread has taken none for STACK_GAP_NS (weight
 * 1: a thread that blocks rarely keeps every block's stacks), else one block in N, chosen at random at its
 * switch out (weight N); the others keep kstack STACK_UNSAMPLED and no user stack, so every block is still
 * timed and counted and only the stack walks, most of a block's cost (the kernel's ~1.1 us whatever its
 * depth), are sampled. User space shares each thread's exact time and count among its sampled stacks in
 * proportion to their blocks' time and count times their weight (the inverse of their chance of being
 * taken, so the shares are unbiased whatever mix of the two rules took them).
 *
 * -DSTACK_RATE=R (with -DSTACK_EVERY): N is paced (pace.h): on a CPU whose blocks would have taken more than
 * R walks a second at one in N, the next window's are drawn at one in 2N, 4N... (their weight), so the
 * walks stay near R a second and CPU whatever the switch rate; below it N holds.
 *
 * -DUSER_KERNEL: every block's user stack is walked here at its switch out with the stack-delta tables
 * of kunwind.h (kuwalk.h: a process met for the first time is walked by frame pointers until user space
 * has loaded its mappings; a fork child that has not exec'd walks its parent's), stored once by its hash
 * in `ustacks`, and the block keeps the hash. The registers bpf_task_pt_regs gives at sched_switch are
 * prev's (the current task's) saved user registers: where it entered the kernel. A thread that blocks
 * again from the same place (a futex retried, a loop's one call site: the same user ip, sp and bp, and
 * its first return addresses where they were) takes its last walk (`last_walk`, kuwalk.h's ku_same_walk),
 * if that one would come out the same (ku_repeatable) and is still stored. The walk goes on in tail
 * calls, which do not return: see sched_switch for what is done before it. */
#include "common.h"
#include "sched_state.h"
#include "epoch.h"

#ifndef MIN_BLOCK_NS
#define MIN_BLOCK_NS 1000
#endif
#ifndef STACK_DEPTH
#define STACK_DEPTH 127
#endif
#ifndef STACK_ENTRIES
#define STACK_ENTRIES 16384
#endif
#define STACK_UNSAMPLED (-4096)   /* a block whose stacks were not taken (-DSTACK_EVERY); no errno is this */
#ifndef STACK_GAP_NS
#define STACK_GAP_NS 10000000     /* -DSTACK_EVERY: a thread's block takes its stacks after this long without */
#endif

struct start_t {
    u64 ts;
    u32 tgid;
    int kstack;
    int ustack;
    u32 weight;   /* 1 / the chance its stacks were taken (-DSTACK_EVERY: 1, N or paced N << k; 1 otherwise) */
    u64 cgid;     /* the thread's cgroup (v2) when it blocked */
#ifdef USER_DWARF
    u64 uip;   /* user registers when it blocked: the same at its syscall's return */
    u64 usp;
#endif
#ifdef USER_KERNEL
    u64 uhash;    /* its user stack's hash in `ustacks`; 0: none (ustack: the frame-pointer walk, or none) */
    u64 pyhash;   /* its Python frames' hash in `ustacks`; 0: none (not a registered python) */
#endif
};

struct key_t {
    u32 tgid;
    u32 tid;
    int kstack;
    int ustack;
    char comm[TASK_COMM_LEN];
    u64 cgid;
    u32 slot;     /* EPOCH_SLOT of the interval the block ended in */
    u32 weight;   /* as start_t's */
#ifdef USER_KERNEL
    u64 uhash;    /* as start_t's */
    u64 pyhash;
#endif
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
BPF_ARRAY(epochs, struct epoch_t, 1);

/* a block that ended after a cut, before user space read the blocks open at it: its part before the cut */
struct crossed_key_t {
    u32 tid;
    u32 pad;
    u64 start;
};
struct crossed_t {
    struct key_t key;
    u64 part;
};
BPF_HASH(crossed, struct crossed_key_t, struct crossed_t, 16384);
BPF_PERCPU_HASH(blocked, struct key_t, struct val_t, 32768);
BPF_TABLE("stacktrace", int, struct stack_t, stacks, STACK_ENTRIES);
LOST_COUNTER(full);          /* blocks not counted: a map was full */
LOST_COUNTER(stack_errors);  /* kernel stacks not stored (stack map full or a hash collision) */
LOST_COUNTER(unseen_switch_ins);   /* blocks whose end the kernel did not deliver, ended at the next switch out */
BPF_PERCPU_ARRAY(last_switch, u64, 1);   /* when this CPU's last switch seen happened */
BPF_HASH(seen, u32, u8, 65536);      /* processes whose maps the user side has been told to read */
#if defined(STACK_EVERY) && defined(USE_TASK_STORAGE)
#define THREAD_STORAGE 1
struct thread_t {
    u64 sampled_at;   /* when its last block with stacks began (-DSTACK_EVERY) */
    u32 told;         /* its process is in `seen`: no lookup there a block (24 ns a switch) */
    u32 pad;
};
BPF_TASK_STORAGE(threads, struct thread_t);
#else
struct thread_t;
#endif
#if defined(STACK_EVERY) && defined(STACK_RATE)
#include "pace.h"
BPF_PERCPU_ARRAY(pace, struct pace_t, 1);   /* each CPU's draw: one block in pace.every */
#endif
#if defined(STACK_EVERY) && !defined(THREAD_STORAGE)
/* when each thread's last block with stacks began; an LRU where task storage is not available, as a
 * thread that exits leaves its entry behind */
BPF_TABLE("lru_hash", u32, u64, sampled_at, 65536);
#endif
BPF_RINGBUF_OUTPUT(new_maps, 4);     /* tgids whose maps to read now */

#ifdef PYTHON_FRAMES
#include "pystack.h"
PY_PROCS_MAP;
#endif

#ifdef USER_DWARF
#include "ustack.h"
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
    u64 epoch;    /* the interval it ended in: user space claims what is left of it at that cut */
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
    u64 epoch;
    u64 cgid;
    char comm[TASK_COMM_LEN];
    u32 weight;
    u32 pad;
    struct ustack_t user;
#ifdef PYTHON_FRAMES
    struct pystack_t py;   /* after the stack copy: at offset 80 + sizeof(struct ustack_t) */
#endif
};
BPF_HASH(pending, u32, struct pending_t, 16384);
BPF_RINGBUF_OUTPUT(dwarf_blocks, DWARF_RING_PAGES);
LOST_COUNTER(dwarf_missed);      /* long blocks left with their frame-pointer stack */
LOST_COUNTER(dwarf_ring_full);   /* of those, because the ring buffer was full */
#endif

#ifdef USER_KERNEL
#include "kuwalk.h"
#ifndef USTACKS
#define USTACKS 16384
#endif
struct walk_scratch_t {  /* per CPU: the walk, and the block it is for, over its tail calls */
    struct ku_walk walk;
    struct start_t s;
    struct ku_last regs;     /* the registers it began from: the thread's last walk, if repeatable */
    u32 tid;
    u32 owner;           /* whose mappings walk it (kuwalk.h) */
#ifdef PYTHON_FRAMES
    struct pystack_t py; /* the block's Python frames, before they are stored */
#endif
};
#ifdef PYTHON_FRAMES
_Static_assert(sizeof(struct pystack_t) == sizeof(struct ku_stack), "a Python stack is stored in `ustacks` too");
#endif
KU_WALK_MAPS;
BPF_F_TABLE("hash", u64, struct ku_stack, ustacks, USTACKS, BPF_F_NO_PREALLOC);   /* memory as used */
BPF_PERCPU_ARRAY(walk_scratch, struct walk_scratch_t, 1);
/* LRU: a thread that exits leaves its entry behind */
BPF_TABLE("lru_hash", u32, struct ku_last, last_walk, 16384);
/* new task -> its parent, until it execs; keyed by the new task's id, so a thread's is never looked up */
BPF_TABLE("lru_hash", u32, u32, forked, 16384);
LOST_COUNTER(ustacks_full);   /* walked user stacks not stored (those blocks keep the frame-pointer walk), Python ones (none) */

/* the map calls of kunwind.h and kuwalk.h, which BCC rewrites here only */
static __always_inline struct ku_proc_maps *ku_maps_of(u32 tgid) { return ku_maps.lookup(&tgid); }
static __always_inline struct ku_file *ku_file_at(u32 file) { return ku_files.lookup(&file); }
static __always_inline struct ku_row *ku_row_at(u32 index) { return ku_rows.lookup(&index); }
static __always_inline u32 *ku_proc_state(u32 tgid) { return ku_procs.lookup(&tgid); }
static __always_inline void ku_proc_set(u32 tgid, u32 state) { ku_procs.update(&tgid, &state); }
static __always_inline void ku_proc_drop(u32 tgid) { ku_procs.delete(&tgid); }
static __always_inline long ku_send(struct ku_event_t *e) { return ku_events.ringbuf_output(e, sizeof(*e), 0); }
static __always_inline struct ku_stack *ku_stack_at(u64 hash) { return ustacks.lookup(&hash); }
static __always_inline long ku_stack_insert(u64 hash, struct ku_stack *s) { return ustacks.insert(&hash, s); }
static __always_inline void ku_tail(void *ctx) { ku_progs.call(ctx, 0); }

static __always_inline void ku_count(int slot, u64 n)
{
    u64 *c = ku_counters.lookup(&slot);
    if (c)
        *c += n;
}

static __always_inline u32 parent_of(u32 tgid)
{
    u32 *parent = forked.lookup(&tgid);
    return parent ? *parent : 0;
}

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    u64 id = bpf_get_current_pid_tgid();   /* the parent */
    if (skip_task(id))
        return PASS_ON;
    u32 child = args->child_pid, parent = id >> 32;
    forked.update(&child, &parent);
    return PASS_ON;
}
#endif

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
#ifdef USER_KERNEL
    forked.delete(&tgid);     /* its own address space from now on: */
    ku_procs.delete(&tgid);   /* its mappings are loaded anew */
#endif
    if (skip_task(id))
        return PASS_ON;
    u8 one = 1;
    seen.update(&tgid, &one);
    if (new_maps.ringbuf_output(&tgid, sizeof(tgid), 0))   /* a full ring: its next block says it */
        seen.delete(&tgid);
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

/* a pending block that will not get its DWARF stack: counted with its frame-pointer one. Whoever deletes
 * a pending block owns it: this program, or user space claiming what is left of an interval at its cut */
static __always_inline void settle_pending(u32 tid)
{
    struct pending_t *p = pending.lookup(&tid);
    if (!p)
        return;
    struct pending_t copy = *p;
    if (pending.delete(&tid) != 0)
        return;   /* claimed by user space */
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
    e->epoch = p->epoch;
    e->cgid = p->key.cgid;
    __builtin_memcpy(&e->comm, p->key.comm, TASK_COMM_LEN);
    e->weight = p->key.weight;
    if (pending.delete(&tid) != 0) {
        dwarf_blocks.ringbuf_discard(e, 0);   /* claimed by user space at a cut */
        return;
    }
    ustack_capture(&e->user);
#ifdef PYTHON_FRAMES
    pystack_capture(py_procs.lookup(&e->tgid), tid, &e->py);
#endif
    dwarf_blocks.ringbuf_submit(e, 0);
}

#endif

/* A block has ended: its thread keeps its entry in `start`, ts 0 while it is not blocked (an insert and a
 * delete a block, each under the bucket's lock, cost more than these writes) */
static __always_inline void block_ended(struct start_t *entry)
{
    entry->ts = 0;
}

/* The end of a block that began at ts and whose switch back in was not delivered: it came back on this
 * CPU after cpu_ts, the last switch seen here, and before now; at least MIN_BLOCK_NS, so it is counted. */
static __always_inline u64 unseen_block_end(u64 cpu_ts, u64 ts, u64 now)
{
    u64 end = cpu_ts > ts + MIN_BLOCK_NS ? cpu_ts : ts + MIN_BLOCK_NS;
    return end < now ? end : now;
}

/* The block of `tid` that began at st->ts ended at `now`: counted in the current epoch, its part before
 * the cut left in `crossed` while user space has not read the open blocks (epoch.h). may_defer: a long
 * block may wait in `pending` for its syscall's return and a DWARF stack. */
static __always_inline void end_block(struct epoch_t *epoch, u32 tid, struct start_t *st, u64 now, char *comm,
                                      int may_defer)
{
    u64 delta = now - st->ts;
    if (delta < MIN_BLOCK_NS)
        return;
    struct key_t key = {.tgid = st->tgid, .tid = tid, .kstack = st->kstack, .ustack = st->ustack, .cgid = st->cgid,
                        .slot = EPOCH_SLOT(epoch), .weight = st->weight};
#ifdef USER_KERNEL
    key.uhash = st->uhash;
    key.pyhash = st->pyhash;
#endif
    __builtin_memcpy(&key.comm, comm, TASK_COMM_LEN);
    u64 charged = epoch_part(epoch, st->ts, now);
    u64 before_cut = epoch_crossed_part(epoch, st->ts);
    if (before_cut) {
        struct crossed_key_t ck = {.tid = tid, .start = st->ts};
        struct crossed_t c = {.key = key, .part = before_cut};
        c.key.slot = EPOCH_SLOT(epoch) ^ 1;
        if (crossed.update(&ck, &c) == ERR_MAP_FULL)
            count_lost();
    }
#ifdef USER_DWARF
    if (may_defer && delta >= DWARF_MIN_NS && st->uip && st->kstack != STACK_UNSAMPLED) {   /* sampled: a DWARF stack too */
        struct pending_t p = {.key = key, .delta = delta, .charged = charged, .end = now, .epoch = epoch->epoch,
                              .uip = st->uip, .usp = st->usp};
        if (pending.update(&tid, &p) == 0)
            return;   /* counted when its syscall returns */
    }
#endif
    account(&key, delta, charged);
}

#ifdef FAULT_MISS_SWITCH_INS
/* tests (bcctool's BCCTOOL_FAULTS): every FAULT_MISS_SWITCH_INS-th switch in of a blocked thread on a CPU
 * goes unseen, as the kernel now and then does not deliver one */
BPF_PERCPU_ARRAY(fault_switch_ins, u64, 1);
static __always_inline int fault_missed_switch_in(void)
{
    int zero = 0;
    u64 *n = fault_switch_ins.lookup(&zero);
    return n && ++*n % FAULT_MISS_SWITCH_INS == 0;
}
#else
static __always_inline int fault_missed_switch_in(void) { return 0; }
#endif

#ifdef USER_DWARF
/* A blocking syscall returns: its thread's pending block takes its DWARF stack. A thread that returns with
 * a block still open has run since without the kernel delivering its switch back in (see sched_switch).
 * Back from the syscall it blocked in (the same user ip and sp), it is in its own context with the user
 * stack it blocked with: the block ends now (it has run only in the kernel since its switch in, on its
 * way out of the syscall) and gets its DWARF stack, which at its next switch out would be the next
 * block's. Otherwise (it blocked in a fault, and has run user code since) it ends as sched_switch ends
 * one, at the last switch seen on this CPU, with its frame-pointer stack. */
TRACEPOINT_PROBE(raw_syscalls, sys_exit)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 ip, sp;
    if (!pending.lookup(&tid)) {
        struct start_t *open = start.lookup(&tid);
        if (!open || !open->ts)
            return PASS_ON;
        int zero = 0;
        struct epoch_t *ep = epochs.lookup(&zero);   /* before the clock, as in sched_switch */
        if (!ep)
            return PASS_ON;
        struct epoch_t epoch = *ep;
        u64 now = bpf_ktime_get_ns();
        struct start_t st = *open;
        block_ended(open);
        user_ip_sp(&ip, &sp);
        int back = st.uip && ip == st.uip && sp == st.usp;
        u64 end = now;
        if (!back) {
            u64 *last = last_switch.lookup(&zero);
            end = unseen_block_end(last ? *last : 0, st.ts, now);
        }
        char comm[TASK_COMM_LEN];
        bpf_get_current_comm(&comm, sizeof(comm));
        end_block(&epoch, tid, &st, end, comm, back);
        count_in(unseen_switch_ins.lookup(&zero));
        if (!back)
            return PASS_ON;
    } else {
        user_ip_sp(&ip, &sp);
    }
    send_pending(tid, ip, sp);
    return PASS_ON;
}
#endif

/* prev's block begins at ts: written in place in its thread's entry in `start` (`entry`, or looked up),
 * its ts last, or the thread's first entry inserted */
static __always_inline void started_at(u32 tid, struct start_t *s, u64 ts, struct start_t *entry)
{
    if (!entry)
        entry = start.lookup(&tid);
    if (entry) {   /* ts 0 until it is all written: user space reads what it says whole, or not at all */
        s->ts = 0;
        *entry = *s;
        asm volatile("" ::: "memory");
        entry->ts = ts;
        return;
    }
    s->ts = ts;
    if (start.update(&tid, s) == ERR_MAP_FULL)
        count_lost();
}

/* prev's block begins now, after this program's own stack walks (~4.5 us; a user stack walked in tail
 * calls takes longer), which are not the thread's time off the CPU */
static __always_inline void started(u32 tid, struct start_t *s)
{
    started_at(tid, s, bpf_ktime_get_ns(), 0);
}

#ifdef USER_KERNEL
/* The walk of the block waiting in sc has ended: counted by how it ended, its stack stored (and kept as
 * the thread's last walk if another from the same registers would repeat it), the block begun. */
static __always_inline void walked(void *ctx, struct walk_scratch_t *sc)
{
    u32 tid = sc->tid;
    u64 h = ku_walked(&sc->walk);
    if (h) {
        sc->s.uhash = h;
        if (ku_keep(&sc->regs, &sc->walk, h))
            last_walk.update(&tid, &sc->regs);
    } else {   /* `ustacks` full: the frame-pointer walk, better than none */
        int zero = 0;
        u64 *lost = ustacks_full.lookup(&zero);
        if (lost)
            (*lost)++;
        sc->s.ustack = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    }
    started(tid, &sc->s);
}

#ifdef PYTHON_FRAMES
/* The CPython frames of prev, a registered python's thread, stored in `ustacks`: their hash, 0 for none
 * (not a registered python, or `ustacks` full: counted). Before the native walk, whose tail calls do not
 * return; at every block, since the same native stack runs many Python chains. */
static __always_inline u64 python_stack(u32 tgid, u32 tid)
{
    struct py_proc_t *py = py_procs.lookup(&tgid);
    int zero = 0;
    struct walk_scratch_t *sc = walk_scratch.lookup(&zero);
    if (!py || !sc)
        return 0;
    pystack_capture(py, tid, &sc->py);
    u64 h = ku_store((struct ku_stack *)&sc->py, 2 * sc->py.depth, PY_SEED);
    if (!h) {
        u64 *lost = ustacks_full.lookup(&zero);
        if (lost)
            (*lost)++;
    }
    return h;
}
#endif

/* prev's user stack, for its block s: the thread's last walk if it is this stack still (ku_same_walk:
 * same registers and process, the first return addresses unchanged); else walked now, the block waiting
 * in walk_scratch for the program that ends the walk (this one, or ku_walk_more) to begin it. Two call
 * paths that agree in registers and in those return addresses, and differ only further out, would share
 * one stack. A kernel thread has no user stack. */
static __always_inline void walk_user(void *ctx, u32 tid, struct start_t *s)
{
    int zero = 0;
    struct walk_scratch_t *sc = walk_scratch.lookup(&zero);
    struct ku_last now = {.tgid = s->tgid};
    if (!sc || user_regs(&now.ip, &now.sp, &now.bp)) {
        started(tid, s);
        return;
    }
    struct ku_last *last = last_walk.lookup(&tid);
    s->uhash = last ? ku_same_walk(last, &now) : 0;
    if (s->uhash) {
        ku_count(KU_REUSED, 1);
        started(tid, s);
        return;
    }
    sc->s = *s;
    sc->tid = tid;
    sc->regs = now;
    ku_walk_begin(ctx, &sc->walk, s->tgid, &sc->owner);
    walked(ctx, sc);
}

/* More frames of the walk walk_user() began, KU_STEPS a program: then this program again (a tail call),
 * or the block begun. A tracepoint program (bcctool/kunwind.py loads it so): a tail call keeps its
 * caller's type, and what it returns is sched_switch's answer. */
int ku_walk_more(void *ctx)
{
    int zero = 0;
    struct walk_scratch_t *sc = walk_scratch.lookup(&zero);
    if (!sc)
        return PASS_ON;
    ku_walk_on(ctx, &sc->walk, sc->s.tgid, sc->owner);
    walked(ctx, sc);
    return PASS_ON;
}
#endif

#ifdef STACK_EVERY
/* -DSTACK_EVERY: one block in how many is drawn on this CPU now: STACK_EVERY, or paced (-DSTACK_RATE) */
static __always_inline u32 draw_every(u64 now)
{
#ifdef STACK_RATE
    int zero = 0;
    struct pace_t *p = pace.lookup(&zero);
    if (p)
        return pace_every(p, 1, now, STACK_EVERY);
#endif
    return STACK_EVERY;
}

/* -DSTACK_EVERY: the weight of the block prev begins at `now` if it takes its stacks (1: its thread has
 * taken none for STACK_GAP_NS, or ever; else drawn at random, one in draw_every(), that number), 0 if it
 * does not */
static __always_inline u32 stack_weight(u32 prev, u64 now, struct thread_t *me)
{
#ifdef THREAD_STORAGE
    u64 *last = me ? &me->sampled_at : 0;
#else
    u64 *last = sampled_at.lookup(&prev);
#endif
    u32 weight = 0;
    if (!last || now - *last >= STACK_GAP_NS) {
        weight = 1;
    } else {
        u32 every = draw_every(now);
        if (bpf_get_prandom_u32() % every == 0)
            weight = every;
    }
    if (!weight)
        return 0;
    if (last)
        *last = now;
#ifndef THREAD_STORAGE
    else
        sampled_at.update(&prev, &now);
#endif
    return weight;
}
#endif

/* prev blocks, and passed the filters: its block begins with where it blocked (its cgroup, kernel and
 * user stacks). In kernel mode the user stack's walk may go on in tail calls, which do not return: this
 * is the last thing sched_switch does. */
static __always_inline void begin_block(void *ctx, u32 prev, u64 id, u64 now, struct start_t *entry)
{
    struct start_t s = {.tgid = id >> 32, .cgid = bpf_get_current_cgroup_id(), .weight = 1};
    u8 one = 1;
#ifdef USER_DWARF
    user_ip_sp(&s.uip, &s.usp);
    /* blocking again before the last block's syscall returned (a lock on the way out): this is
     * its own context too, so the last block's stack is taken now */
    send_pending(prev, s.uip, s.usp);
#endif
#ifdef THREAD_STORAGE
    struct thread_t *me = threads.task_storage_get((struct task_struct *)bpf_get_current_task_btf(), 0,
                                                   BPF_LOCAL_STORAGE_GET_F_CREATE);
    int told = me && me->told;
#else
    struct thread_t *me = 0;
    int told = 0;
#endif
    /* met before: a lookup, which takes no lock, rather than an insert refused; once met, the thread
     * remembers it (a process that exits takes its threads' storage with it; exec says it again) */
    if (!told) {
        if (!seen.lookup(&s.tgid) && seen.insert(&s.tgid, &one) == 0 &&
            new_maps.ringbuf_output(&s.tgid, sizeof(s.tgid), 0)) {
            seen.delete(&s.tgid);   /* a full ring: its next block says it */
        } else {
#ifdef THREAD_STORAGE
            if (me)
                me->told = 1;
#endif
        }
    }
#ifdef STACK_EVERY
    s.weight = stack_weight(prev, now, me);
    if (!s.weight) {   /* timed and counted, without its stacks */
        s.kstack = STACK_UNSAMPLED;
        s.ustack = -1;
        started_at(prev, &s, now, entry);   /* no walk since the switch's clock read: no second read */
        return;
    }
#endif
    s.kstack = stacks.get_stackid(ctx, 0);
    if (s.kstack < 0) {
        int zero = 0;
        u64 *lost = stack_errors.lookup(&zero);
        if (lost)
            (*lost)++;
    }
#ifdef USER_KERNEL
    s.ustack = -1;   /* a frame-pointer walk only where `ustacks` is full */
#ifdef PYTHON_FRAMES
    s.pyhash = python_stack(s.tgid, prev);
#endif
    walk_user(ctx, prev, &s);
#else
    s.ustack = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    started(prev, &s);
#endif
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    int zero = 0;
    struct epoch_t *ep = epochs.lookup(&zero);   /* before the clock: a block that ends sees its epoch */
    if (!ep)
        return PASS_ON;
    struct epoch_t epoch = *ep;
    u64 now = bpf_ktime_get_ns();

    u64 id = bpf_get_current_pid_tgid();
    u32 prev = args->prev_pid;
    u64 *last = last_switch.lookup(&zero);
    u64 cpu_ts = last ? *last : 0;
    if (last)
        *last = now;
    /* By our books prev is still blocked, yet it runs: the kernel did not deliver the sched_switch that
     * brought it back (the VM agent's switches out are not traced here, ftrace included: ~1 a second).
     * It came back on this CPU after the last switch seen here, which put the untraced task on it: its
     * block ends there, not now (a burner's 4.5-ms run later). At least MIN_BLOCK_NS: it is counted. */
    struct start_t *mine = start.lookup(&prev);
    if (mine && mine->ts) {
        struct start_t st = *mine;
        block_ended(mine);
        end_block(&epoch, prev, &st, unseen_block_end(cpu_ts, st.ts, now), args->prev_comm, 0);
        u64 *unseen = unseen_switch_ins.lookup(&zero);
        if (unseen)
            (*unseen)++;
    }

    /* next: it is back; how long was it away? Done before prev's block begins, whose user stack walk
     * (kernel mode) may end this program in tail calls that do not return. The order changes no figure:
     * prev and next are two threads with their own entries in `start`, and next's block ends with the
     * epoch and the clock read above, as it did after prev's begin. prev's block is begun (its ts taken,
     * then written to `start`) by the last program of the chain, still inside this run of the tracepoint:
     * prev is this CPU's current task until the chain returns, so it cannot be switched in anywhere
     * before its block is in `start`; and a cut's grace period waits for the whole chain, so a block whose
     * ts is before a cut is in `start` when user space reads the blocks open at that cut (open_blocks),
     * and one whose ts is after it (open_blocks skips it) is charged to the intervals after it only. */
    u32 next = args->next_pid;
    struct start_t *s = start.lookup(&next);
    if (s && s->ts && !fault_missed_switch_in()) {
        struct start_t st = *s;
        block_ended(s);
        end_block(&epoch, next, &st, now, args->next_comm, 1);
    }

    /* prev: filtered first (the cheapest tests before any map), then its block begins */
    long state = args->prev_state;
#ifdef PREEMPTED
    int wanted = !(state & PREV_STATE_EXITED);
#else
    int wanted = (state & PREV_STATE_SLEEPING) != 0 && !(state & PREV_STATE_EXITED);
#endif
#ifdef STATE_MASK
    wanted = wanted && (state & STATE_MASK) != 0;
#endif
    if (mine && (state & PREV_STATE_EXITED))
        start.delete(&prev);   /* its last switch: the entry it kept between blocks goes */
    if (prev == 0 || !wanted || skip_task(id))
        return PASS_ON;
#ifdef SKIP_OWN
    u32 own_tgid = id >> 32;
    if (own_tgids.lookup(&own_tgid))
        return PASS_ON;   /* the profiler's own (common.h): its blocks are not started */
#endif
    begin_block(args, prev, id, now, mine);
    return PASS_ON;
}
