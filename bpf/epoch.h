/* Interval epochs: every event is accounted to the interval (epoch) in which it ends, and user space
 * reads an interval only once no program can write to it any more (bcctool/epochs.py).
 *
 * `epochs[0]` says which interval is being gathered and when it and the one before began. A program
 * reads it before it takes its own clock, and keys what it adds by EPOCH_SLOT(epoch) (the epoch's
 * parity): user space advances the epoch at a cut, waits out an RCU grace period (every program that
 * saw the old epoch has returned), then reads and clears the old slot, which nothing writes until the
 * epoch after next.
 *
 * A span (a block, a run) that is still open at a cut is charged up to the cut by user space, which
 * reads the open spans after the grace period; the program that ends it charges only its part since its
 * own epoch began (epoch_part). One that ends after the cut but before user space has read the open
 * spans (`collected` is still behind) may already be gone from the map user space reads, so its program
 * also records its part before the cut (epoch_crossed_part) under (tid, start): user space charges it
 * from there unless it saw the span open itself. */
#ifndef PROFILER_EPOCH_H
#define PROFILER_EPOCH_H

struct epoch_t {
    u64 epoch;        /* the interval being gathered: 1, 2, ... */
    u64 began;        /* bpf_ktime_get_ns() when it began (the last cut) */
    u64 prev_began;   /* when the interval before it began */
    u64 collected;    /* the last interval whose open spans user space has read */
};

#define EPOCH_SLOT(e) ((u32)((e)->epoch & 1))

/* the part of a span [start, end] that falls in the current epoch */
static __always_inline u64 epoch_part(struct epoch_t *e, u64 start, u64 end)
{
    u64 from = start > e->began ? start : e->began;
    return end > from ? end - from : 0;
}

/* the part of a span that began before the current epoch and that user space has not charged, nor will:
 * its open spans for the epoch before are not read yet, and this one is about to leave the map */
static __always_inline u64 epoch_crossed_part(struct epoch_t *e, u64 start)
{
    if (start >= e->began || e->collected + 1 >= e->epoch)
        return 0;
    u64 from = start > e->prev_began ? start : e->prev_began;
    return e->began > from ? e->began - from : 0;
}

#endif
