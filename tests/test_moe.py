"""Notebook 06's engine pieces: the MoE layer's parameters, the toy task, the expert-parallel
layout, and the one-token-at-a-time reference layer the checks compare with."""
import math

import pytest
import torch

from nanoparallel.moe import (Expert, MoE, MoEConfig, make_moe_batch, owner_of, reference_layer,
                              shard_experts)


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


def reference_by_hand(moe, x):
    """k = 1, TopK(Softmax): y = x + p_e E_e(x) for each kept token, in a different style."""
    logits = x @ moe.router.weight.T
    probs = logits.softmax(-1)
    choice = logits.argmax(-1)
    capacity = math.ceil(moe.config.capacity_factor * len(x) / moe.config.n_experts)
    y, used = x.clone(), [0] * moe.config.n_experts
    for t, e in enumerate(choice.tolist()):
        if used[e] < capacity:
            used[e] += 1
            y[t] = x[t] + probs[t, e] * moe.experts[e](x[t:t + 1])[0]
    return y


def test_reference_layer_matches_a_switch_layer_written_out():
    moe = MoE(MoEConfig(n_experts=4, k=1, softmax_first=True, capacity_factor=1.0, seed=2))
    x, _ = make_moe_batch(20, moe.config, seed=0)
    y, balance, experts, keep = reference_layer(moe, x)
    assert torch.allclose(y, reference_by_hand(moe, x), atol=1e-6)
    assert experts.shape == keep.shape == (20, 1) and keep.dtype == torch.bool and not keep.all()
    for t in range(20):
        if not keep[t].any():
            assert torch.equal(y[t], x[t])                # dropped: unchanged, through the residual
    f = torch.bincount(experts[:, 0], minlength=4) / 20
    assert torch.allclose(balance, 4 * (f * (x @ moe.router.weight.T).softmax(-1).mean(0)).sum())


def test_reference_layer_top2_keeps_first_choices_before_second_ones():
    moe = MoE(MoEConfig(n_experts=4, k=2, capacity_factor=0.5, seed=1))
    x, _ = make_moe_batch(16, moe.config, seed=3)
    _, _, experts, keep = reference_layer(moe, x)
    capacity = math.ceil(0.5 * 2 * 16 / 4)
    for e in range(4):
        assert int(((experts == e) & keep).sum()) == min(capacity, int((experts == e).sum()))
        firsts = keep[:, 0][experts[:, 0] == e]
        seconds = keep[:, 1][experts[:, 1] == e]
        if seconds.any():                                 # a second choice got in: every first choice did
            assert firsts.all()
        assert firsts.tolist() == sorted(firsts.tolist(), reverse=True)   # first come, first served


def test_reference_layer_gradients_reach_router_and_kept_experts_only():
    moe = MoE(MoEConfig(n_experts=4, k=1, softmax_first=True, capacity_factor=1.0, noisy=True, seed=5))
    x, _ = make_moe_batch(12, moe.config, seed=4)
    noise = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
    y, balance, experts, keep = reference_layer(moe, x, noise)
    (y.sum() + balance).backward()
    assert moe.router.weight.grad is not None and moe.noise.weight.grad is not None
    used = set(experts[keep].tolist())
    for e in range(4):
        assert (moe.experts[e].fc.weight.grad is not None) == (e in used)
    assert isinstance(moe.experts[0], Expert)
