/* Sampling paced to a rate of stack walks per CPU, whatever the load (-DSTACK_RATE=R, walks a second).
 *
 * offcpu takes the stacks of one block in N, compmem of one allocation in about N bytes: their walks,
 * most of what either costs an event, grow with the events, so a busy server pays most where it can
 * least afford it. Paced, each CPU keeps the rate of its events over windows of PACE_WINDOW_NS, and the
 * next window draws with N doubled as often as needed for that rate to have taken at most R walks a
 * second. The divisor is fixed before any event of the window is drawn, so each kept event's weight (the
 * inverse of its chance, written with it) stays exact and the estimates unbiased; a power of two times
 * N, so a stack's events carry few distinct weights. Below the rate (a light load) N holds.
 *
 * The caller keeps one struct pace_t per CPU (a per-CPU array). A caller that has not read the clock for
 * the event passes now = 0: the window is looked at one event in PACE_CLOCK_EVERY (a clock read costs
 * about as much as the rest of an unsampled event here). */
#ifndef PROFILER_PACE_H
#define PROFILER_PACE_H

#define PACE_WINDOW_NS 100000000ull
#define PACE_CLOCK_EVERY 64
#define PACE_MAX_EVERY (1ull << 31)   /* compmem draws (u64)prandom * every: under 2^63 */

struct pace_t {
    u64 window;   /* when this CPU's window began */
    u64 units;    /* its events (offcpu: blocks drawn; compmem: bytes allocated) since */
    u64 events;   /* events since the last look at the clock (now = 0 callers) */
    u64 every;    /* the divisor in force: base << k (0: not set yet, the base) */
};

/* The divisor for this event, `units` more of this CPU's: `base` (N), or N doubled while the last
 * window's rate per second exceeds R walks at that divisor. */
static __always_inline u64 pace_every(struct pace_t *p, u64 units, u64 now, u64 base)
{
    p->units += units;
    if (!now) {
        if (++p->events < PACE_CLOCK_EVERY)
            return p->every ? p->every : base;
        p->events = 0;
        now = bpf_ktime_get_ns();
    }
    u64 elapsed = now - p->window;
    if (elapsed >= PACE_WINDOW_NS) {
        u64 per_s = p->units * 1000 / (elapsed / 1000000);
        u64 every = base;
#pragma unroll
        for (int i = 0; i < 24; i++) {
            if (per_s <= every * STACK_RATE || every * 2 > PACE_MAX_EVERY)
                break;
            every <<= 1;
        }
        p->every = every;
        p->units = 0;
        p->window = now;
    }
    return p->every ? p->every : base;
}

#endif
