"""offcpu's figures of blocks, keyed by thread and stacks: one block's, merged, and (--stack-every) each
thread's exact totals shared among the stacks of its sampled blocks.

A figure is a dict: total_ns (blocked time inside the interval), length_ns (the blocks' whole lengths),
count, min_ns and max_ns, and the same three times each block's weight (w_ns, w_length, w_count): the
inverse of the chance its stacks had of being taken (bpf/offcpu.c's stack_weight: 1 for every block
without --stack-every, and for a thread's block after STACK_GAP_NS without stacks; N for one drawn at
random, one in N). Shares in proportion to weighted figures are unbiased whatever mix of the two rules
took a thread's stacks (the Horvitz-Thompson estimator)."""

from __future__ import annotations

UNSAMPLED = -4096   # bpf/offcpu.c's STACK_UNSAMPLED: a block whose stacks --stack-every did not take
WEIGHTED = ("w_ns", "w_length", "w_count")   # weighted(): the blocks' figures times their weights


def open_part(ns: int, weight: int) -> dict[str, int]:
    """A block's time in an interval it did not end in: time, no count, no length."""
    return {"total_ns": ns, "length_ns": 0, "count": 0, "min_ns": 0, "max_ns": 0, **weighted(ns, 0, 0, weight)}


def one_block(charged: int, length: int, weight: int) -> dict[str, int]:
    """One block that ended: its time in the interval and its whole length."""
    return {"total_ns": charged, "length_ns": length, "count": 1, "min_ns": length, "max_ns": length,
            **weighted(charged, length, 1, weight)}


def weighted(total_ns: int, length_ns: int, count: int, weight: int) -> dict[str, int]:
    """Blocks' time, lengths and count times their weight: what a stack's share of its thread is in
    proportion to."""
    weight = weight or 1   # a block without stacks (its own row, [not sampled])
    return {"w_ns": total_ns * weight, "w_length": length_ns * weight, "w_count": count * weight}


def merge(into: dict, v: dict) -> None:
    """Add v's blocks to into's; an open block's part (count 0) adds time but no min or max."""
    if not into or not into["count"]:
        into.update({**v, **{k: into.get(k, 0) + v[k] for k in ("total_ns", *WEIGHTED)}})
        return
    for k in ("total_ns", "length_ns", "count", *WEIGHTED):
        into[k] += v[k]
    if v["count"]:
        into["min_ns"] = min(into["min_ns"], v["min_ns"])
        into["max_ns"] = max(into["max_ns"], v["max_ns"])


def shared_among_sampled(blocks: dict[tuple, dict], per_thread: dict[tuple, dict]) -> dict[tuple, dict]:
    """--stack-every: each thread's blocks, keyed by stacks, with the thread's exact time and count (its
    per_thread totals) shared among its sampled stacks in proportion to their own weighted by the chance
    each block's stacks had of being taken (the time by time, the count by count; a stack's average block
    is its sampled blocks' weighted average, its min and max theirs). A thread with no sampled block in
    the interval, or what its sampled blocks cannot carry (time only from blocks still open), keeps the
    UNSAMPLED key."""
    sampled_of: dict[tuple, list] = {thread: [] for thread in per_thread}
    for key, v in blocks.items():
        if key[3] != UNSAMPLED:
            sampled_of[(key[0], key[1], key[2], key[5])].append((key, v))
    out: dict[tuple, dict] = {}
    for (tgid, tid, comm, cgid), sampled in sampled_of.items():
        exact = per_thread[(tgid, tid, comm, cgid)]
        time_ns = sum(v["w_ns"] for _, v in sampled)
        count = sum(v["w_count"] for _, v in sampled)
        by_time = exact["total_ns"] / time_ns if time_ns else 0.0
        by_count = exact["count"] / count if count else 0.0
        for key, v in sampled:
            out[key] = {**v, "total_ns": round(v["w_ns"] * by_time), "count": round(v["w_count"] * by_count),
                        "length_ns": round(v["w_length"] * by_count)}
        rest = {**exact, "total_ns": 0 if time_ns else exact["total_ns"],
                "count": 0 if count else exact["count"], "length_ns": 0 if count else exact["length_ns"]}
        if rest["total_ns"] or rest["count"]:
            out[(tgid, tid, comm, UNSAMPLED, -1, cgid)] = rest
    return out
