/* A program's walk of the current task's user stack with kunwind.h's tables, as cpuprofile (a sample)
 * and compmem (an allocation) make it: where it begins (whose mappings walk it), where it ends (what it
 * met counted, user space asked for what it lacked) and how the stack is stored, once by its hash.
 *
 * A process met for the first time is asked for on ku_events and walked by the kernel's frame-pointer
 * walk until user space has loaded its mappings; a fork child that has not exec'd walks its parent's. A
 * walk asks for one new file's rows (a second new one stays NEW for a later walk to ask); an ask the full
 * ring did not take undoes its mark, so that a later walk asks again.
 *
 * The walk goes on in tail calls, which do not return: the main file's program begins it (ku_user_start)
 * and tail-calls its ku_walk_more, which walks KU_STEPS frames (ku_walk_some) and tail-calls itself until
 * the walk ends (ku_user_end) and then finishes what the walk was for. BCC rewrites map calls in the main
 * file only, so the main file declares the maps (KU_WALK_MAPS) and defines, besides kunwind.h's three
 * lookups, the calls made here: ku_proc_state, ku_proc_set, ku_proc_drop, ku_send, ku_count,
 * ku_stack_stored, ku_stack_insert and parent_of. */
#ifndef PROFILER_KUWALK_H
#define PROFILER_KUWALK_H

#include "kunwind.h"

/* ku_counters' slots (per CPU, cumulative; read by the user side) */
#define KU_EXPR_FRAMES 0      /* expression rows walked by frame pointers */
#define KU_FP_WALKS 1         /* walks by the kernel's frame pointers: the process's mappings not loaded yet */
#define KU_PENDING_FRAMES 2   /* frames walked by frame pointers: their file's rows not loaded yet */
#define KU_COUNTERS 3

#define KU_SEED_USER 0x75736572ULL   /* ku_hash's seed for a user stack ("user") */

#define KU_WALK_MAPS                                                                                    \
    KU_MAPS;                                                                                            \
    BPF_PERCPU_ARRAY(ku_counters, u64, KU_COUNTERS);                                                    \
    BPF_PROG_ARRAY(ku_progs, 1)   /* [0]: ku_walk_more, set by user space (bcctool/kunwind.py) */

static __always_inline u32 *ku_proc_state(u32 tgid);                      /* ku_procs.lookup */
static __always_inline void ku_proc_set(u32 tgid, u32 state);             /* ku_procs.update */
static __always_inline void ku_proc_drop(u32 tgid);                       /* ku_procs.delete */
static __always_inline long ku_send(struct ku_event_t *e);                /* ku_events.ringbuf_output */
static __always_inline void ku_count(int slot, u64 n);                    /* ku_counters[slot] += n */
static __always_inline int ku_stack_stored(u64 hash);                     /* the stacks map holds it */
static __always_inline long ku_stack_insert(u64 hash, struct ku_stack *s); /* the stacks map's insert */
static __always_inline u32 parent_of(u32 tgid);   /* a fork child that has not exec'd: its parent; else 0 */

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
    long bytes = bpf_get_stack(ctx, w->user.pcs, KU_FRAMES * 8, BPF_F_USER_STACK);
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
 * or a fork child's own). */
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
    if (owner != tgid && !state) {
        ku_ask_new(tgid);
    } else if (owner == tgid && state && *state == KU_READY) {
        *state = KU_STALE;
        if (ku_ask(tgid, KU_STALE, 0))
            *state = KU_READY;
    }
}

/* `s` stored under the hash of its first `words` pcs unless it is there already: the hash, or 0 when the
 * stacks map is full */
static __always_inline u64 ku_store(struct ku_stack *s, u32 words, u64 seed)
{
    u64 h = ku_hash(s, words, seed);
    if (ku_stack_stored(h))
        return h;
    long err = ku_stack_insert(h, s);
    return err && err != -17 ? 0 : h;   /* -EEXIST: another CPU stored it meanwhile */
}

#endif
