"""offcpu --stack-every's sharing of a thread's exact totals among its sampled stacks (bcctool.blockfigures),
on blocks whose stacks two rules took: a thread's first block after a gap (weight 1) and one block in N
drawn at random (weight N). Shares weighted by the inverse of each block's chance are unbiased; shares
that count every sampled block alike favour whatever the gap rule happens to pick."""

import random

import pytest

from bcctool.blockfigures import UNSAMPLED, merge, one_block, open_part, shared_among_sampled

THREAD = (10, 11, "worker", 0)   # tgid, tid, comm, cgroup id
A, B = (10, 11, "worker", 1, 1, 0), (10, 11, "worker", 2, 2, 0)   # two stacks' keys: kstack, ustack differ


def gap_then_random(rounds: int, every: int, gap_ns: int, seed: int) -> tuple[dict, dict, dict]:
    """A thread that sleeps 12 ms (stack A) then selects 0.3 ms ten times (stack B), 60 us between
    blocks, its stacks taken as bpf/offcpu.c's stack_weight takes them: (sampled blocks by stack, the
    thread's exact totals, the true time and count of each stack)."""
    draw = random.Random(seed)
    now, last = 0, -gap_ns
    blocks: dict[tuple, dict] = {}
    exact: dict = {}
    truth = {A: [0, 0], B: [0, 0]}
    for _ in range(rounds):
        for key, length in [(A, 12_000_000)] + [(B, 300_000)] * 10:
            weight = 1 if now - last >= gap_ns else every if draw.randrange(every) == 0 else 0
            block = one_block(length, length, weight)
            merge(exact, block)
            truth[key][0] += length
            truth[key][1] += 1
            if weight:
                last = now
                merge(blocks.setdefault(key, {}), block)
            else:
                merge(blocks.setdefault((*key[:3], UNSAMPLED, -1, key[5]), {}), block)
            now += length + 60_000
    return blocks, {THREAD: exact}, truth


def test_weighted_shares_are_the_true_ones_and_add_up_to_the_thread():
    """Over 200 runs of 400 rounds, the weighted estimate of A's share of the time and of its count is
    unbiased (mean within 0.3 points and 1 block of the truth), while counting the sampled blocks alike
    is off by 4.5 points and 80 blocks (the gap rule takes the first select after every sleep)."""
    weighted_share, plain_share, weighted_count = [], [], []
    for seed in range(200):
        blocks, per_thread, truth = gap_then_random(400, 4, 10_000_000, seed)
        shared = shared_among_sampled(blocks, per_thread)
        assert set(shared) == {A, B}   # every block of this thread had a sampled stack to go to
        exact = per_thread[THREAD]
        assert sum(v["total_ns"] for v in shared.values()) == pytest.approx(exact["total_ns"], abs=2)
        assert sum(v["count"] for v in shared.values()) == pytest.approx(exact["count"], abs=2)
        weighted_share.append(shared[A]["total_ns"] / exact["total_ns"])
        weighted_count.append(shared[A]["count"])
        plain_share.append(blocks[A]["total_ns"] / (blocks[A]["total_ns"] + blocks[B]["total_ns"]))
        # a stack's average block is its own: every A block is 12 ms, every B block 0.3 ms
        assert shared[A]["length_ns"] / shared[A]["count"] == pytest.approx(12_000_000, rel=0.01)
        assert shared[B]["length_ns"] / shared[B]["count"] == pytest.approx(300_000, rel=0.01)
    true_share = truth[A][0] / (truth[A][0] + truth[B][0])
    mean = sum(weighted_share) / len(weighted_share)
    print(f"A's share: true {true_share:.4f}, weighted {mean:.4f}, plain {sum(plain_share) / len(plain_share):.4f}; "
          f"A's count: true {truth[A][1]}, weighted {sum(weighted_count) / len(weighted_count):.1f}")
    assert mean == pytest.approx(true_share, abs=0.003)
    assert sum(weighted_count) / len(weighted_count) == pytest.approx(truth[A][1], abs=5)
    assert sum(plain_share) / len(plain_share) < true_share - 0.03


def test_a_thread_without_sampled_blocks_keeps_its_time_unsampled():
    exact: dict = {}
    for _ in range(3):
        merge(exact, one_block(1_000, 1_000, 0))
    merge(exact, open_part(500, 0))
    blocks = {(*THREAD[:3], UNSAMPLED, -1, THREAD[3]): dict(exact)}
    shared = shared_among_sampled(blocks, {THREAD: exact})
    assert shared == {(*THREAD[:3], UNSAMPLED, -1, THREAD[3]): exact}
    assert exact["total_ns"] == 3_500 and exact["count"] == 3 and exact["length_ns"] == 3_000


def test_an_open_part_adds_time_and_weighted_time_but_no_block():
    into = open_part(2_000, 8)
    merge(into, one_block(5_000, 9_000, 8))
    assert (into["total_ns"], into["count"], into["length_ns"], into["min_ns"], into["max_ns"]) == (7_000, 1, 9_000,
                                                                                                    9_000, 9_000)
    assert (into["w_ns"], into["w_count"], into["w_length"]) == (56_000, 8, 72_000)
