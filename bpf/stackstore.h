/* Stacks stored once each, by the 64-bit hash of their pcs, in a BPF hash map of struct ku_stack
 * (depth, outcome, pcs), which user space reads once per new stack (bcctool/kstacks.py StoredStacks).
 * Where a stack map (BPF_STACK_TRACE) keeps one stack a bucket and refuses a second stack whose hash
 * lands in a taken bucket (-EEXIST: a few per cent of the stacks at a few thousand, more under load),
 * a 64-bit key does not collide in practice, and the map's memory is taken as stacks arrive
 * (BPF_F_NO_PREALLOC), not 1 KiB a bucket up front.
 *
 * The main file declares the map and defines its two calls (BCC rewrites map calls there only):
 * ku_stack_at (its lookup) and ku_stack_insert (its insert). kunwind.h's walk stores its stacks so;
 * cpuprofile's counted mode stores the kernel's own walks (bpf_get_stack) so. */
#ifndef PROFILER_STACKSTORE_H
#define PROFILER_STACKSTORE_H

#define KU_STACK 128         /* pcs a stored stack holds */

#define KU_SEED_USER 0x75736572ULL       /* ku_hash's seed for a user stack ("user") */
#define KU_SEED_KERNEL 0x6b65726e656cULL /* for a kernel stack ("kernel") */

struct ku_stack {        /* a stack as stored once per unique stack (the kernel's or Python's too) */
    u32 depth;
    s32 outcome;
    u64 pcs[KU_STACK];   /* innermost first */
};

static __always_inline struct ku_stack *ku_stack_at(u64 hash);           /* the stacks map's lookup */
static __always_inline long ku_stack_insert(u64 hash, struct ku_stack *s); /* the stacks map's insert */

/* A stack's key in the table of unique stacks: its first `words` pcs, depth and outcome hashed (64 bits:
 * a collision is as likely as not only past 4e9 distinct stacks); never 0, which says "no stack". A
 * Python stack (struct pystack_t) has two words a frame. */
static __always_inline u64 ku_hash(struct ku_stack *s, u32 words, u64 seed)
{
    u64 h = seed ^ ((u64)s->depth << 32) ^ (u32)s->outcome;
#pragma clang loop unroll(disable)
    for (int i = 0; i < KU_STACK; i++) {
        if (i >= words)
            break;
        h = (h ^ s->pcs[i]) * 0x100000001b3ULL;
        h ^= h >> 32;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return h ? h : 1;
}

/* `s` stored under the hash of its first `words` pcs unless it is there already: the hash, or 0 when the
 * stacks map is full */
static __always_inline u64 ku_store(struct ku_stack *s, u32 words, u64 seed)
{
    u64 h = ku_hash(s, words, seed);
    if (ku_stack_at(h))
        return h;
    long err = ku_stack_insert(h, s);
    return err && err != -17 ? 0 : h;   /* -EEXIST: another CPU stored it meanwhile */
}

#endif
