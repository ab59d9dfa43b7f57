"""Tiny models and single-process references: determinism, shapes, causality, tying, parity."""
import math

import pytest
import torch

from nanoparallel.lessons.models import (Centred, GPTConfig, MLPConfig, TinyGPT, TinyMLP, count_parameters,
                                 make_gpt_batch, make_mlp_batch)
from nanoparallel.lessons.reference import ReferenceRun, fresh_batches, loss_fn, own_rows, rows_by_rank, split_batch, train_reference

MODELS = [(TinyMLP, MLPConfig, make_mlp_batch), (TinyGPT, GPTConfig, make_gpt_batch)]
IDS = ["mlp", "gpt"]


def same_params(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# -----------------------------------------------------------------------------
# models

@pytest.mark.parametrize("Model, Config, _", MODELS, ids=IDS)
def test_same_seed_is_bit_identical_and_other_seed_differs(Model, Config, _):
    assert same_params(Model(Config(seed=3)), Model(Config(seed=3)))
    assert not same_params(Model(Config(seed=3)), Model(Config(seed=4)))


@pytest.mark.parametrize("Model, Config, _", MODELS, ids=IDS)
def test_construction_leaves_global_rng_alone(Model, Config, _):
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    model = Model(Config())
    assert torch.equal(torch.random.get_rng_state(), before)
    # and the global seed does not leak into the init either
    torch.manual_seed(999)
    assert same_params(model, Model(Config()))


def test_mlp_layers_are_linear_and_shapes_flow():
    cfg = MLPConfig(d_in=5, d_hidden=7, d_out=3, n_layers=4)
    model = TinyMLP(cfg)
    assert len(model.layers) == 4
    assert all(isinstance(layer, torch.nn.Linear) for layer in model.layers)
    x, y = make_mlp_batch(6, cfg, seed=0)
    assert x.shape == (6, 5) and y.shape == (6, 3)
    assert model(x).shape == (6, 3)
    # running the layers one by one (as pipeline stages do) gives the same output
    h = x
    for i, layer in enumerate(model.layers):
        h = layer(h) if i == len(model.layers) - 1 else torch.nn.functional.gelu(layer(h))
    assert torch.equal(h, model(x))


def test_batches_are_deterministic_per_seed():
    for make, cfg in [(make_mlp_batch, MLPConfig()), (make_gpt_batch, GPTConfig())]:
        a, b, c = make(4, cfg, seed=1), make(4, cfg, seed=1), make(4, cfg, seed=2)
        assert all(torch.equal(s, t) for s, t in zip(a, b))
        assert not torch.equal(a[0], c[0])


def test_gpt_batch_targets_are_inputs_shifted_by_one():
    cfg = GPTConfig()
    idx, targets = make_gpt_batch(5, cfg, seed=0)
    assert idx.shape == targets.shape == (5, cfg.block_size)
    assert idx.dtype == torch.long
    assert int(idx.min()) >= 0 and int(idx.max()) < cfg.vocab_size
    assert torch.equal(idx[:, 1:], targets[:, :-1])


def test_gpt_shapes_and_initial_loss_near_uniform():
    cfg = GPTConfig()
    idx, targets = make_gpt_batch(4, cfg, seed=0)
    logits, loss = TinyGPT(cfg)(idx, targets)
    assert logits.shape == (4, cfg.block_size, cfg.vocab_size)  # (B, T, vocab)
    assert loss.dim() == 0
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.1
    logits, loss = TinyGPT(cfg)(idx[:, :5])  # shorter than block_size, no targets
    assert logits.shape == (4, 5, cfg.vocab_size) and loss is None


def test_gpt_attention_is_causal():
    cfg = GPTConfig()
    model = TinyGPT(cfg)
    idx, _ = make_gpt_batch(2, cfg, seed=0)
    t = 9
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % cfg.vocab_size
    with torch.no_grad():
        before, _ = model(idx)
        after, _ = model(changed)
    assert torch.equal(before[:, :t], after[:, :t])    # the past cannot see the future
    assert not torch.allclose(before[:, t:], after[:, t:])  # but position t onwards does


def test_tied_weights_share_storage_and_count_once():
    tied, untied = TinyGPT(GPTConfig()), TinyGPT(GPTConfig(tie_weights=False))
    assert tied.lm_head.weight is tied.wte.weight
    assert tied.lm_head.weight.data_ptr() == tied.wte.weight.data_ptr()
    assert untied.lm_head.weight.data_ptr() != untied.wte.weight.data_ptr()
    cfg = GPTConfig()
    assert count_parameters(untied) - count_parameters(tied) == cfg.vocab_size * cfg.n_embd
    expected_mlp = 16 * 32 + 32 + 32 * 32 + 32 + 32 * 16 + 16
    assert count_parameters(TinyMLP(MLPConfig())) == expected_mlp


def test_gpt_init_follows_nanogpt():
    model = TinyGPT(GPTConfig())
    block = model.blocks[0]
    assert torch.count_nonzero(block.attn.q.bias) == 0
    assert torch.equal(block.ln_1.weight, torch.ones_like(block.ln_1.weight))
    assert abs(block.mlp.fc.weight.std().item() - 0.02) < 0.002
    assert block.mlp.fc.weight.shape == (4 * 32, 32)  # column-split dim first
    assert block.mlp.proj.weight.shape == (32, 4 * 32)


# -----------------------------------------------------------------------------
# reference training

@pytest.mark.parametrize("Model, Config, make", MODELS, ids=IDS)
def test_train_reference_leaves_model_alone_and_learns(Model, Config, make):
    model = Model(Config())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run = train_reference(model, [make(16, Config(), seed=0)], steps=20, lr=1e-2)
    assert isinstance(run, ReferenceRun)
    assert len(run.states) == len(run.losses) == len(run.grads) == 20
    assert sorted(run.grads[0]) == sorted(n for n, _ in model.named_parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert run.losses[-1] < 0.6 * run.losses[0]
    # states are snapshots, not live references to one model
    name = next(iter(run.states[0]))
    assert not torch.equal(run.states[0][name], run.states[-1][name])

@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_train_reference_is_bit_identical_across_calls(optimizer):
    cfg = GPTConfig()
    batches = [make_gpt_batch(4, cfg, seed=s) for s in range(3)]
    a = train_reference(TinyGPT(cfg), batches, optimizer=optimizer)
    b = train_reference(TinyGPT(cfg), batches, optimizer=optimizer)
    assert a.losses == b.losses
    assert all(torch.equal(sa[k], sb[k]) for sa, sb in zip(a.states, b.states) for k in sa)


# Adam's first update is lr * g / (|g| + 1e-8): gradient entries that are ~1e-8 (a few exist in
# the GPT's attention weights at init) turn float rounding into updates of ~1e-5. SGD and the
# MLP stay at rounding level.
PARITY = [("mlp", "adam", 1e-6), ("mlp", "sgd", 1e-6), ("gpt", "sgd", 1e-6), ("gpt", "adam", 1e-4)]


@pytest.mark.parametrize("which, optimizer, atol", PARITY)
def test_accumulation_equals_one_big_batch(which, optimizer, atol):
    Model, Config, make = MODELS[IDS.index(which)]
    k = 4
    big = [make(16, Config(), seed=s) for s in range(3)]
    micro = [piece for batch in big for piece in split_batch(batch, k)]
    one = train_reference(Model(Config()), big, optimizer=optimizer)
    acc = train_reference(Model(Config()), micro, optimizer=optimizer, accumulate=k)
    assert len(one.states) == len(acc.states) == 3
    for step, (s1, s2) in enumerate(zip(one.states, acc.states)):
        for name in s1:
            err = (s1[name] - s2[name]).abs().max().item()
            assert err <= atol, f"step {step}, {name}: max error {err:.2e} > {atol:.0e}"
    assert one.losses == pytest.approx(acc.losses, abs=1e-6)


def test_loss_fn_is_the_mean_over_equal_shards():
    for Model, Config, make in MODELS:
        model, batch = Model(Config()), make(8, Config(), seed=0)
        shards = [loss_fn(model, s) for s in split_batch(batch, 4)]
        assert torch.stack(shards).mean().item() == pytest.approx(loss_fn(model, batch).item(),
                                                                  abs=1e-6)


def test_train_reference_cycles_batches_and_rejects_bad_arguments():
    cfg = MLPConfig()
    batches = [make_mlp_batch(4, cfg, seed=s) for s in range(2)]
    cycled = train_reference(TinyMLP(cfg), batches, steps=4, optimizer="sgd")
    twice = train_reference(TinyMLP(cfg), batches * 2, optimizer="sgd")
    assert cycled.losses == twice.losses
    with pytest.raises(ValueError, match="optimizer"):
        train_reference(TinyMLP(cfg), batches, optimizer="lamb")
    with pytest.raises(ValueError, match="accumulate"):
        train_reference(TinyMLP(cfg), batches, accumulate=0)
    with pytest.raises(ValueError, match="empty"):
        train_reference(TinyMLP(cfg), [])
    with pytest.raises(ValueError, match="shards"):
        train_reference(TinyMLP(cfg), batches, shards=0)


def test_shards_average_their_own_gradients_which_differ_from_the_whole_batch_only_where_samples_meet():
    cfg = MLPConfig()
    batches = [make_mlp_batch(8, cfg, seed=s) for s in range(2)]
    plain, sharded = (train_reference(TinyMLP(cfg), batches, shards=P) for P in (1, 4))
    assert plain.losses == pytest.approx(sharded.losses, abs=1e-6)
    meet = Centred(TinyMLP(cfg))
    whole, by_shard = (train_reference(meet, batches, shards=P, optimizer="sgd") for P in (1, 4))
    model = TinyMLP(cfg)
    by_hand = sum(loss_fn(Centred(model), shard) for shard in split_batch(batches[0], 4)) / 4
    assert by_shard.losses[0] == pytest.approx(by_hand.item(), abs=1e-6)
    assert abs(whole.losses[0] - by_shard.losses[0]) > 1e-3  # centring on 2 samples, not 8


# -----------------------------------------------------------------------------
# split_batch

def test_split_batch_gives_contiguous_equal_pieces():
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    pieces = split_batch((x, y), 3)
    assert len(pieces) == 3
    assert [p[1].tolist() for p in pieces] == [[0, 1], [2, 3], [4, 5]]
    assert torch.equal(torch.cat([p[0] for p in pieces]), x)
    pieces[0][0].zero_()  # pieces are copies: the batch is untouched
    assert x[0, 1] == 1


@pytest.mark.parametrize("parts", [4, 5, 0])
def test_split_batch_rejects_uneven_or_empty_parts(parts):
    batch = make_mlp_batch(6, MLPConfig(), seed=0)
    with pytest.raises(ValueError, match="divisible" if parts else ">= 1"):
        split_batch(batch, parts)


# -----------------------------------------------------------------------------
# own_rows: what a data-parallel rank is handed

def test_own_rows_keeps_the_ranks_shard_and_blanks_every_other_row():
    x, tokens = torch.randn(6, 2), torch.arange(6)
    for rank in range(3):
        view = own_rows((x, tokens), rank, 3)
        assert [t.shape for t in view] == [x.shape, tokens.shape]
        shard = split_batch((x, tokens), 3)[rank]
        assert all(torch.equal(v[2 * rank:2 * rank + 2], s) for v, s in zip(view, shard))
        others = [r for r in range(6) if r // 2 != rank]
        assert torch.isnan(view[0][others]).all() and (view[1][others] == -1).all()
    assert torch.equal(own_rows((x,), 0, 1)[0], x)  # one rank owns the whole batch


def test_own_rows_of_a_batch_parts_do_not_divide_is_all_blank():
    view = own_rows(make_mlp_batch(10, MLPConfig(), seed=0), 1, 4)
    assert all(torch.isnan(t).all() for t in view)
    with pytest.raises(ValueError, match="rank must be in"):
        own_rows(make_mlp_batch(4, MLPConfig(), seed=0), 4, 4)


def test_fresh_batches_are_new_each_call_and_take_no_gradient_near_zero():
    cfg = MLPConfig(d_hidden=24)
    make = lambda seed: make_mlp_batch(6, cfg, seed=seed)
    first, second = fresh_batches(make, TinyMLP(cfg), 2), fresh_batches(make, TinyMLP(cfg), 2)
    assert len(first) == 2 and not torch.equal(first[0][0], second[0][0])
    for grads in train_reference(TinyMLP(cfg), first).grads:
        assert all(((g == 0) | (g.abs() >= 1e-6)).all() for g in grads.values())
    with pytest.raises(RuntimeError, match="3 draws all held"):
        fresh_batches(make, TinyMLP(cfg), 1, tiny=1e3, attempts=3)


def test_rows_by_rank_gives_each_rank_every_batch():
    batches = [make_mlp_batch(4, MLPConfig(), seed=s) for s in range(3)]
    views = rows_by_rank(batches, 2)
    assert len(views) == 2 and all(len(v) == 3 for v in views)
    assert torch.equal(views[1][2][0][2:], batches[2][0][2:]) and torch.isnan(views[1][2][0][:2]).all()
