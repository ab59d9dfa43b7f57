"""The alpha-beta cost model against hand-computed values, limits and orderings."""
import math

import numpy as np
import pytest

from nanoparallel.lessons import cost
from nanoparallel.lessons.cost import (ACCELERATORS, ALGORITHMS, COLLECTIVES, LINKS, Accelerator, Link,
                               busiest_rank_bytes, collective_steps, collective_time,
                               crossover_size, send_time, total_traffic)

GB = 1e9
BANDWIDTH_ONLY = Link("no latency, 1 GB/s", bandwidth=1 * GB, latency=0.0)
LATENCY_ONLY = Link("1 us, infinite bandwidth", bandwidth=math.inf, latency=1e-6)
BOTH = Link("10 us, 1 GB/s", bandwidth=1 * GB, latency=10e-6)


def test_presets_have_the_documented_keys_and_orders_of_magnitude():
    assert set(LINKS) == {"nvlink", "pcie", "infiniband", "infiniband_hdr"}
    assert LINKS["nvlink"].bandwidth == 400e9
    assert LINKS["infiniband"].bandwidth == 50e9 and LINKS["infiniband_hdr"].bandwidth == 25e9
    assert LINKS["nvlink"].bandwidth > LINKS["pcie"].bandwidth > LINKS["infiniband"].bandwidth
    assert set(ACCELERATORS) == {"B200", "H100", "H200", "A100"}
    assert ACCELERATORS["B200"] == Accelerator("NVIDIA B200", flops=2.25e15, memory=192e9, nvlink=900e9)
    # NVLink per GPU and direction, by generation
    assert [ACCELERATORS[g].nvlink for g in ("A100", "H100", "H200", "B200")] == [300e9, 450e9, 450e9, 900e9]


def test_send_time_is_alpha_plus_n_over_beta():
    assert send_time(2e6, BOTH) == pytest.approx(10e-6 + 2e6 / 1e9)
    assert BOTH.time(0) == pytest.approx(10e-6)


def test_ring_all_reduce_by_hand():
    # P=4, N=4e6: 2(P-1) rounds of N/P = 1e6 bytes each at 1 GB/s.
    assert collective_time("all_reduce", 4e6, 4, BANDWIDTH_ONLY, "ring") == pytest.approx(
        2 * 3 * (1e6 / 1e9))
    assert collective_steps("all_reduce", 4, "ring") == 6
    assert busiest_rank_bytes("all_reduce", 4e6, 4, "ring") == pytest.approx(6e6)
    assert total_traffic("all_reduce", 4e6, 4, "ring") == pytest.approx(4 * 6e6)


def test_busiest_rank_bytes_counts_a_root_both_ways():
    # The naive root receives (P-1)N, then sends (P-1)N, one after the other: both count.
    assert busiest_rank_bytes("all_reduce", 1e6, 4, "naive") == pytest.approx(2 * 3 * 1e6)
    # A ring rank receives while it sends: what it sends, 2(P-1)/P N.
    assert busiest_rank_bytes("all_reduce", 1e6, 4, "ring") == pytest.approx(1.5e6)
    assert not hasattr(cost, "bytes_sent_per_rank"), "one name, one meaning"


@pytest.mark.parametrize("P", [2, 3, 8, 64])
def test_ring_all_reduce_without_latency_is_2_p_minus_1_over_p_n_over_b(P):
    N = 1e8
    assert collective_time("all_reduce", N, P, BANDWIDTH_ONLY) == pytest.approx(
        2 * (P - 1) / P * N / 1e9)


@pytest.mark.parametrize("op, algorithm, steps, share", [
    # (steps, share of N on the busiest rank), by hand for P = 8
    ("broadcast", "naive", 7, 7), ("scatter", "naive", 7, 7 / 8),
    ("all_reduce", "naive", 14, 14), ("all_gather", "naive", 14, 7 / 8 + 7),
    ("broadcast", "tree", 3, 3), ("gather", "tree", 3, 7 / 8), ("all_reduce", "tree", 6, 6),
    ("reduce_scatter", "tree", 6, 3 + 7 / 8),
    ("all_gather", "ring", 7, 7 / 8), ("broadcast", "ring", 14, 14 / 8),
    ("reduce", "ring", 14, 14 / 8), ("scatter", "ring", 7, 7 / 8),
    ("reduce_scatter", "halving_doubling", 3, 7 / 8),
    ("all_reduce", "halving_doubling", 6, 14 / 8),
    ("broadcast", "halving_doubling", 6, 14 / 8), ("scatter", "halving_doubling", 3, 7 / 8),
])
def test_formulas_by_hand_at_p8(op, algorithm, steps, share):
    N = 8e6
    assert collective_steps(op, 8, algorithm) == steps
    assert busiest_rank_bytes(op, N, 8, algorithm) == pytest.approx(share * N)
    assert collective_time(op, N, 8, BOTH, algorithm) == pytest.approx(
        steps * 10e-6 + share * N / 1e9)


def test_tree_rounds_round_up_for_non_powers_of_two():
    assert collective_steps("broadcast", 5, "tree") == 3
    assert collective_steps("broadcast", 2, "tree") == 1


def test_total_traffic_by_hand():
    N = 8e6
    assert total_traffic("broadcast", N, 8, "naive") == pytest.approx(7 * N)
    assert total_traffic("broadcast", N, 8, "tree") == pytest.approx(7 * N)
    # binomial scatter: N/2 in round one, then 2 x N/4, then 4 x N/8
    assert total_traffic("scatter", N, 8, "tree") == pytest.approx(1.5 * N)
    assert total_traffic("all_gather", N, 8, "ring") == pytest.approx(7 * N)
    assert total_traffic("all_reduce", N, 8, "halving_doubling") == pytest.approx(14 * N)


def test_halving_doubling_pays_a_fold_for_non_powers_of_two():
    N, a, b = 6e6, BOTH.latency, BOTH.bandwidth
    # P = 6 runs halving/doubling on p' = 4 ranks, after and before a fold of N.
    core = 2 * 2 * a + 2 * 3 / 4 * N / b
    assert collective_time("all_reduce", N, 6, BOTH, "halving_doubling") == pytest.approx(
        core + 2 * (a + N / b))
    assert collective_steps("all_reduce", 6, "halving_doubling") == 2 * 2 + 2
    assert collective_time("reduce_scatter", N, 6, BOTH, "halving_doubling") == pytest.approx(
        2 * a + 3 / 4 * N / b + (a + N / b))
    # so a sixth rank makes it slower than four, while the ring degrades gently
    assert collective_time("all_reduce", N, 6, BOTH, "halving_doubling") > collective_time(
        "all_reduce", N, 4, BOTH, "halving_doubling")


@pytest.mark.parametrize("op", COLLECTIVES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_one_rank_costs_nothing(op, algorithm):
    assert collective_time(op, 1e9, 1, BOTH, algorithm) == 0
    assert collective_steps(op, 1, algorithm) == 0
    assert busiest_rank_bytes(op, 1e9, 1, algorithm) == 0
    assert total_traffic(op, 1e9, 1, algorithm) == 0


@pytest.mark.parametrize("op", COLLECTIVES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_busiest_rank_never_carries_more_than_all_links(op, algorithm):
    for P in (2, 5, 8, 13):
        assert busiest_rank_bytes(op, 1.0, P, algorithm) <= total_traffic(op, 1.0, P,
                                                                            algorithm) + 1e-12


def test_ring_beats_naive_for_large_messages():
    link = LINKS["nvlink"]
    for op in ("all_reduce", "broadcast", "all_gather"):
        assert collective_time(op, 1e9, 8, link, "ring") < collective_time(op, 1e9, 8, link,
                                                                            "naive")


def test_tree_beats_ring_for_tiny_messages_at_64_ranks():
    # 2 ceil(lg 64) = 12 alphas against the ring's 2 x 63 = 126.
    link = LINKS["nvlink"]
    assert collective_time("all_reduce", 1024, 64, link, "tree") < collective_time(
        "all_reduce", 1024, 64, link, "ring")
    assert collective_time("all_reduce", 1e9, 64, link, "tree") > collective_time(
        "all_reduce", 1e9, 64, link, "ring")


def test_latency_only_counts_rounds():
    assert collective_time("all_reduce", 1e9, 16, LATENCY_ONLY, "ring") == pytest.approx(30e-6)


def test_curves_accept_numpy_arrays():
    sizes = np.logspace(0, 9, 10)
    times = collective_time("all_reduce", sizes, 8, BOTH, "tree")
    assert times.shape == (10,)
    assert times == pytest.approx([collective_time("all_reduce", n, 8, BOTH, "tree")
                                   for n in sizes])
    assert np.all(np.diff(times) > 0)
    assert busiest_rank_bytes("all_gather", sizes, 8).shape == (10,)
    assert send_time(sizes, BOTH).shape == (10,)


def test_crossover_is_where_the_curves_meet():
    link = LINKS["nvlink"]
    n = crossover_size("all_reduce", 64, link, "tree", "ring")
    tree = collective_time("all_reduce", n, 64, link, "tree")
    ring = collective_time("all_reduce", n, 64, link, "ring")
    assert tree == pytest.approx(ring, rel=0.01)
    # times are affine in N, so it must equal d(steps) alpha beta / d(share)
    d_steps = collective_steps("all_reduce", 64, "ring") - collective_steps("all_reduce", 64,
                                                                             "tree")
    d_share = busiest_rank_bytes("all_reduce", 1, 64, "tree") - busiest_rank_bytes(
        "all_reduce", 1, 64, "ring")
    assert n == pytest.approx(d_steps * link.latency * link.bandwidth / d_share, rel=1e-6)
    assert crossover_size("all_reduce", 64, link, "ring", "tree") == pytest.approx(n)


def test_no_crossover_gives_none():
    link = LINKS["nvlink"]
    # the ring never loses to naive all_reduce at P = 8: no more steps, fewer bytes
    assert crossover_size("all_reduce", 8, link, "ring", "naive") is None
    # identical algorithms never cross
    assert crossover_size("scatter", 8, link, "ring", "naive") is None
    # a crossover outside [lo, hi] does not count
    assert crossover_size("all_reduce", 64, link, "tree", "ring", lo=1, hi=1e6) is None


@pytest.mark.parametrize("call, message", [
    (lambda: collective_time("allreduce", 1, 4, BOTH), "all_reduce"),
    (lambda: collective_time("all_reduce", 1, 4, BOTH, "butterfly"), "halving_doubling"),
    (lambda: collective_steps("all_reduce", 0), "world_size"),
    (lambda: collective_steps("all_reduce", 2.5), "world_size"),
    (lambda: busiest_rank_bytes("all_reduce", -1, 4), "nbytes"),
    (lambda: total_traffic("all_reduce", np.array([1.0, -1.0]), 4), "nbytes"),
    (lambda: crossover_size("all_reduce", 8, BOTH, "ring", "tree", lo=0), "lo"),
])
def test_bad_input_says_what_is_valid(call, message):
    with pytest.raises(ValueError, match=message):
        call()
