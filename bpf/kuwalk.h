/* A program's walk of the current task's user stack with kunwind.h's tables, as cpuprofile (a sample)
 * and compmem (an allocation) make it: where it begins (whose mappings walk it), where it ends (what it
 * met counted, user space asked for what it lacked) and how the stack is stored, once by its hash.
 *
 * A process met for the first time is asked for on ku_events and walked by the kernel's frame-pointer
 * walk until user space has loaded its mappings; a fork child that has not exec'd walks its parent's. A
 * walk asks for one new file's rows (a second new one stays NEW for a later walk to ask); an ask the full
 * ring did not take undoes its mark, so that a later walk asks again.
 *
 * The walk goes on in tail calls, which do not return: the main file's program begins it (ku_walk_begin:
 * ku_user_start, then a tail call to its ku_walk_more), and ku_walk_more walks KU_STEPS frames and
 * tail-calls itself until the walk ends (ku_walk_on: ku_walk_some, ku_user_end), then finishes what the
 * walk was for. BCC rewrites map calls in the main file only (not in a header, nor in a macro), so the
 * main file declares the maps (KU_WALK_MAPS) and defines, besides kunwind.h's three lookups, the calls
 * made here: ku_proc_state, ku_proc_set, ku_proc_drop, ku_send, ku_count, ku_stack_at,
 * ku_stack_insert, ku_tail and parent_of. */
#ifndef PROFILER_KUWALK_H
#define PROFILER_KUWALK_H

#include "fpleaf.h"
#include "kunwind.h"

/* ku_counters' slots (per CPU, cumulative; read by the user side) */
#define KU_EXPR_FRAMES 0      /* expression rows walked by frame pointers */
#define KU_FP_WALKS 1         /* walks by the kernel's frame pointers: the process's mappings not loaded yet */
#define KU_PENDING_FRAMES 2   /* frames walked by frame pointers: their file's rows not loaded yet */
#define KU_REUSED 3           /* walks not made: the thread's last one served (compmem, offcpu) */
#define KU_OUTCOMES 4         /* [KU_OUTCOMES + outcome]: walks by how they ended (ku_walked: compmem, offcpu) */
#define KU_COUNTERS (KU_OUTCOMES + KU_FP_WALK + 1)


#define KU_WALK_MAPS                                                                                    \
    KU_MAPS;                                                                                            \
    BPF_PERCPU_ARRAY(ku_counters, u64, KU_COUNTERS);                                                    \
    BPF_PROG_ARRAY(ku_progs, 1)   /* [0]: ku_walk_more, set by user space (bcctool/kunwind.py) */

static __always_inline u32 *ku_proc_state(u32 tgid);                      /* ku_procs.lookup */
static __always_inline void ku_proc_set(u32 tgid, u32 state);             /* ku_procs.update */
static __always_inline void ku_proc_drop(u32 tgid);                       /* ku_procs.delete */
static __always_inline long ku_send(struct ku_event_t *e);                /* ku_events.ringbuf_output */
static __always_inline void ku_count(int slot, u64 n);                    /* ku_counters[slot] += n */
static __always_inline u32 parent_of(u32 tgid);   /* a fork child that has not exec'd: its parent; else 0 */
static __always_inline void ku_tail(void *ctx);   /* ku_progs.call(ctx, 0): ku_walk_more; returns if it failed */

/* user space is asked to load (again) the mappings of tgid, or a file's rows; 0 when the ask was sent */
static __always_inline long ku_ask(u32 tgid, u32 state, u32 file)
{
    struct ku_event_t e = {.tgid = tgid, .state = state, .file = file};
    return ku_send(&e);
}

/* tgid's mappings asked for, marked pending meanwhile. The ring is full while user space builds a big
 * file's rows: unmarked then, so that a later walk asks again rather than the process being walked by
 * frame pointers for the rest of the run. */
static __always_inline void ku_ask_new(u32 tgid)
{
    ku_proc_set(tgid, KU_PENDING);
    if (ku_ask(tgid, KU_PENDING, 0))
        ku_proc_drop(tgid);
}

/* The current task's user stack begins in w: its registers, and whose mappings to walk it with (the
 * process's, or a fork child's parent's), which it returns. 0 where there is nothing to walk: no user
 * context (outcome KU_NO_USER), or a process whose mappings are not loaded yet, walked here by the kernel's
 * frame-pointer walk (outcome KU_FP_WALK; they are asked for at its first walk). */
static __always_inline u32 ku_user_start(void *ctx, struct ku_walk *w, u32 tgid)
{
    w->user.depth = 0;
    w->user.outcome = KU_NO_USER;
    if (ku_regs(w))
        return 0;
    u32 *state = ku_proc_state(tgid);
    if (state && *state != KU_PENDING) {
        ku_start(w);
        return tgid;
    }
    if (!state) {
        /* a fork child that has not exec'd runs in its parent's address space: the parent's mappings,
         * asked for if the parent has not been (it may run too little to be met before its children) */
        u32 parent = parent_of(tgid);
        u32 *theirs = parent ? ku_proc_state(parent) : 0;
        if (theirs && *theirs != KU_PENDING) {
            ku_start(w);
            return parent;
        }
        if (!theirs)
            ku_ask_new(parent ? parent : tgid);
    }
    long bytes = fp_caller_restored(w->user.pcs, bpf_get_stack(ctx, w->user.pcs, KU_FRAMES * 8, BPF_F_USER_STACK),
                                    KU_FRAMES);
    w->user.depth = bytes > 0 ? (u64)bytes / 8 : 0;
    w->user.outcome = KU_FP_WALK;
    ku_count(KU_FP_WALKS, 1);
    return 0;
}

/* The tail call into ku_walk_more failed (it returns only then): the ip alone, counted truncated. */
static __always_inline void ku_call_failed(struct ku_walk *w)
{
    w->user.depth = 1;
    w->user.outcome = KU_FRAME_LIMIT;
}

/* The walk of tgid's stack with owner's mappings has ended as `end` said (KU_GO_ON: its tail call
 * failed, truncated): what it met is counted, and user space is asked for the rows of a file met for the
 * first time, or for the mappings of a process with a pc in none (mapped since they were read: a dlopen;
 * or a fork child's own, only when its interrupted pc is in none: code it mapped since the fork is where
 * its samples land. Beside bench/mixed.c, whose children map nothing, ~10 children's walks a second
 * ended at a return address in none, never at the pc, each asking for a process mostly gone when read). */
static __always_inline void ku_user_end(struct ku_walk *w, u32 tgid, u32 owner, int end)
{
    w->user.outcome = end == KU_GO_ON ? KU_FRAME_LIMIT : end;
    if (w->fp_frames)
        ku_count(KU_EXPR_FRAMES, w->fp_frames);
    if (w->unloaded_frames)
        ku_count(KU_PENDING_FRAMES, w->unloaded_frames);
    if (w->ask_file && ku_ask(tgid, KU_FILE_ASKED, w->ask_file)) {
        struct ku_file *f = ku_file_at(w->ask_file);
        if (f && f->state == KU_FILE_ASKED)
            f->state = KU_FILE_NEW;
    }
    if (end != KU_NO_MAPPING)
        return;
    u32 *state = ku_proc_state(tgid);
    if (owner != tgid && !state && w->steps == 1) {
        ku_ask_new(tgid);
    } else if (owner == tgid && state && *state == KU_READY) {
        *state = KU_STALE;
        if (ku_ask(tgid, KU_STALE, 0))
            *state = KU_READY;
    }
}

/* The current task's user stack, for tgid: its walk begins, and whose mappings walk it goes in *owner
 * (ku_user_start); the walk goes on in ku_walk_more's tail calls, which return only if the call failed
 * (the ip alone). Where it returns, w holds the stack (or the frame-pointer walk, or none). */
static __always_inline void ku_walk_begin(void *ctx, struct ku_walk *w, u32 tgid, u32 *owner)
{
    *owner = ku_user_start(ctx, w, tgid);
    if (*owner) {
        ku_tail(ctx);
        ku_call_failed(w);
    }
}

/* ku_walk_more's walk: KU_STEPS more frames, then ku_walk_more again (a tail call, which returns only if
 * it failed), or the walk's end. Where it returns, the walk has ended. */
static __always_inline void ku_walk_on(void *ctx, struct ku_walk *w, u32 tgid, u32 owner)
{
    int end = ku_walk_some(w, owner);
    if (end == KU_GO_ON)
        ku_tail(ctx);
    ku_user_end(w, tgid, owner, end);
}

/* A walk that another from the same registers would repeat, so a thread's next stack taken at the same
 * user ip, sp and bp may reuse it: it reached the outermost frame, or the frame limit (not a failed tail
 * call: steps are taken only in ku_walk_more), with every file's rows loaded. Not one by frame pointers
 * (its process's mappings were not loaded yet) nor a failed one (unreadable memory may be paged in). */
static __always_inline int ku_repeatable(struct ku_walk *w)
{
    s32 end = w->user.outcome;
    if (end != KU_OUTERMOST && end != KU_RA_ZERO && !(end == KU_FRAME_LIMIT && w->steps >= KU_FRAMES))
        return 0;
    return !w->unloaded_frames && !w->ask_file;
}

/* A thread's last walk, for its next stack to take (offcpu's last_walk): the stack's hash, the process
 * and user registers it began from, and where it read its first return addresses. */
struct ku_last {
    u64 hash;
    u64 ip;
    u64 sp;
    u64 bp;
    u64 ra_at[KU_RA_KEPT];
    u32 tgid;
    u32 pad;
};

/* The current task's stack is the one `last` walked, if it begins from the same process and registers
 * (in *now), is still stored (user space deletes stacks it no longer needs), and its first KU_RA_KEPT
 * return addresses are still where the walk read them: equal registers alone would give b's stack when
 * called from a to b called from c, at the same depth through frames of one size. Its hash, or 0. */
static __always_inline u64 ku_same_walk(struct ku_last *last, struct ku_last *now)
{
    if (last->ip != now->ip || last->sp != now->sp || last->bp != now->bp || last->tgid != now->tgid)
        return 0;
    struct ku_stack *s = ku_stack_at(last->hash);
    if (!s)
        return 0;
    u32 depth = s->depth;
#pragma clang loop unroll(disable)
    for (int i = 0; i < KU_RA_KEPT; i++) {
        if (i + 1 >= depth)
            break;
        u64 ra = 0;
        if (bpf_probe_read_user(&ra, sizeof(ra), (void *)last->ra_at[i]) || ra != s->pcs[i + 1])
            return 0;
    }
    return last->hash;
}

/* The walk in w, stored as `hash`, kept in *last (its registers there already) for the thread's next
 * stack, if another from the same registers would repeat it (ku_repeatable). 0 when not. */
static __always_inline int ku_keep(struct ku_last *last, struct ku_walk *w, u64 hash)
{
    if (!ku_repeatable(w))
        return 0;
    last->hash = hash;
    __builtin_memcpy(last->ra_at, w->ra_at, sizeof(last->ra_at));
    return 1;
}

/* The walk in w has ended (or never began: the frame-pointer walk): counted by how, and its stack stored;
 * the hash, or 0 when the stacks map is full. */
static __always_inline u64 ku_walked(struct ku_walk *w)
{
    ku_count(KU_OUTCOMES + w->user.outcome, 1);
    return ku_store(&w->user, w->user.depth, KU_SEED_USER);
}

#endif
