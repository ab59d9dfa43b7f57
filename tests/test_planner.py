"""Notebook 07's planner data and search: the published GPT-NeoX-20B run as data, the plans the
search enumerates, and its ranking with given memory and time functions (stand-ins, not the
notebook's formulas)."""
import pytest

from nanoparallel.lessons.planner import (CLUSTERS, MODELS, NEOX_20B, NEOX_CLUSTER, NEOX_PLAN, ClusterSpec, ModelSpec,
                                  candidate_plans, search)


def test_neox_as_published():
    assert NEOX_20B.params == 12 * 44 * 6144 ** 2 + 2 * 50432 * 6144        # ~20.55 B; the model card: 20,556,201,984
    assert abs(NEOX_20B.params - 20_556_201_984) / 20_556_201_984 < 1e-3
    assert NEOX_CLUSTER.gpus == 96 and NEOX_CLUSTER.ib_per_gpu == 12.5e9
    assert NEOX_CLUSTER.hfu * NEOX_CLUSTER.flops == pytest.approx(117e12)   # Black et al. 2022, section 3
    p = NEOX_PLAN
    assert (p.tp, p.pp, p.dp, p.zero, p.micro_batch, p.n_micro) == (2, 4, 12, 1, 4, 32)
    assert p.tp * p.pp * p.dp == NEOX_CLUSTER.gpus and p.dp * p.micro_batch * p.n_micro == 1536
    assert "TP 2 x PP 4 x DP 12, ZeRO-1" in p.describe()
    assert set(MODELS) >= {NEOX_20B.name} and set(CLUSTERS) >= {NEOX_CLUSTER.name}


def test_candidates_use_every_gpu_and_divide_the_work():
    plans = candidate_plans(NEOX_20B, NEOX_CLUSTER, 1536)
    assert NEOX_PLAN in plans
    for p in plans:
        assert p.tp * p.pp * p.dp == 96 and 64 % p.tp == 0 and 44 % p.pp == 0
        assert p.dp * p.micro_batch * p.n_micro == 1536
    assert {p.zero for p in plans} == {0, 1, 2, 3} and {p.recompute for p in plans} == {False, True}
    assert all(p.zero <= 1 for p in plans if p.pp > 1)   # DeepSpeed refuses ZeRO-2/3 with a pipeline
    assert max(p.tp for p in plans) == 32          # powers of two dividing the 64 heads and the 96 GPUs


def test_search_keeps_what_fits_fastest_first_lower_zero_on_ties():
    model = ModelSpec("m", n_layer=4, hidden=8, heads=4, vocab=8, seq=4)
    cluster = ClusterSpec("c", machines=1, gpus_per_machine=4, memory=100.0, flops=1.0, hfu=1.0, nvlink=1.0,
                          nvlink_latency=0.0, ib_per_machine=1.0, ib_latency=0.0)
    memory = lambda m, p: {"all": 40.0 * p.tp + (0 if p.recompute else 30)}     # tp = 4 never fits
    time = lambda m, c, p: {"t": 10.0 / p.tp + p.pp + p.micro_batch}            # ZeRO stages tie
    ranked = search(model, cluster, 8, memory, time)
    assert ranked and all(r.bytes <= 100 for r in ranked) and all(r.plan.tp < 4 for r in ranked)
    seconds = [r.seconds for r in ranked]
    assert seconds == sorted(seconds)
    best = ranked[0]
    assert (best.plan.tp, best.plan.pp, best.plan.micro_batch, best.plan.zero) == (2, 1, 1, 0)
    assert best.memory == {"all": 80.0} and best.time == {"t": 7.0}


def test_search_passes_errors_of_the_given_functions_through():
    with pytest.raises(ZeroDivisionError):
        search(NEOX_20B, NEOX_CLUSTER, 1536, lambda m, p: {"x": 1 / 0}, lambda m, c, p: {})
