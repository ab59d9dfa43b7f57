"""Notebook 06's engine pieces: the MoE layer's parameters, the toy task, the expert-parallel
layout. The layer itself is the learner's: its reference lives in the notebook's hidden tests."""

import pytest
import torch

import nanoparallel.lessons.moe
from nanoparallel.lessons.moe import Expert, MoE, MoEConfig, make_moe_batch, owner_of, shard_experts


def test_same_config_same_parameters_and_global_rng_untouched():
    state = torch.random.get_rng_state()
    a, b = MoE(MoEConfig(noisy=True, shared=True, seed=3)), MoE(MoEConfig(noisy=True, shared=True, seed=3))
    assert torch.equal(torch.random.get_rng_state(), state)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n
    c = MoE(MoEConfig(seed=4))
    assert not torch.equal(a.router.weight, c.router.weight)
    assert a.noise is not None and a.shared is not None and c.noise is None and c.shared is None


def test_the_layer_has_no_forward_of_its_own():
    with pytest.raises(TypeError, match="moe_layer"):
        MoE(MoEConfig())(torch.zeros(2, 16))
    with pytest.raises(ValueError, match="k=5"):
        MoE(MoEConfig(n_experts=4, k=5))


def test_experts_are_laid_out_in_consecutive_blocks_named_globally():
    moe = MoE(MoEConfig(n_experts=8, shared=True))
    shard = shard_experts(moe, 2, 4)
    assert shard.first == 4 and sorted(shard.experts) == ["4", "5"]
    assert torch.equal(shard.expert(5).fc.weight, moe.experts[5].fc.weight)
    assert shard.expert(5).fc.weight is not moe.experts[5].fc.weight          # a copy, like a rank's own
    names = {n for n, _ in shard.named_parameters()}
    assert "experts.4.fc.weight" in names and "router.weight" in names and "shared.proj.bias" in names
    assert [owner_of(e, 8, 4) for e in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(KeyError, match="holds experts 4..5"):
        shard.expert(0)
    with pytest.raises(ValueError, match="6 experts do not split evenly over 4 ranks"):
        shard_experts(MoE(MoEConfig(n_experts=6)), 0, 4)


def test_the_toy_batch_is_deterministic_and_skewed():
    cfg = MoEConfig()
    x, y = make_moe_batch(64, cfg, seed=1)
    assert x.shape == y.shape == (64, 16)
    assert torch.equal(x, make_moe_batch(64, cfg, seed=1)[0]) and not torch.equal(x, make_moe_batch(64, cfg, seed=2)[0])
    assert x.mean(0).norm() > 1.5                       # the shared offset that skews a fresh router
    assert make_moe_batch(64, cfg, seed=1, skew=0.0)[0].mean(0).norm() < 0.8


def test_the_engine_ships_no_moe_layer():
    """The student bundle ships the engine: a function there that computes the layer answers
    exercises 2-5 (the reference the checks use lives in the notebook's hidden tests)."""
    assert not hasattr(nanoparallel.lessons.moe, "reference_layer")
    public = [name for name in dir(nanoparallel.lessons.moe) if not name.startswith("_")]
    assert not [name for name in public if "layer" in name.lower() or "gating" in name.lower()], public
    assert isinstance(MoE(MoEConfig()).experts[0], Expert)
