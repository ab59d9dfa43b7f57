"""Megatron's layout of TinyGPT as data: which parameter is split how, and each rank's slice."""
import pytest
import torch

from nanoparallel.models import GPTConfig, TinyGPT
from nanoparallel.tensor_parallel import megatron_shard, shard_state, split_of


def test_every_tinygpt_parameter_has_its_megatron_split():
    names = dict(TinyGPT(GPTConfig(n_layer=1)).named_parameters())
    splits = {n: split_of(n) for n in names}
    assert {n for n, s in splits.items() if s == "column"} == {
        f"blocks.0.{m}.{p}" for m in ("attn.q", "attn.k", "attn.v", "mlp.fc") for p in ("weight", "bias")}
    assert {n for n, s in splits.items() if s == "row"} == {
        f"blocks.0.{m}.{p}" for m in ("attn.proj", "mlp.proj") for p in ("weight", "bias")}
    assert splits["wte.weight"] is None and splits["blocks.0.ln_1.weight"] is None


def test_shards_are_the_papers_column_and_row_blocks():
    w = torch.arange(8 * 12.0).view(8, 12)  # (out, in)
    cols = [megatron_shard("mlp.fc.weight", w, r, 4) for r in range(4)]
    assert torch.equal(torch.cat(cols, dim=0), w) and cols[1].shape == (2, 12)  # columns of A = rows of W
    rows = [megatron_shard("mlp.proj.weight", w, r, 4) for r in range(4)]
    assert torch.equal(torch.cat(rows, dim=1), w) and rows[1].shape == (8, 3)   # rows of A = columns of W
    bias = torch.arange(8.0)
    assert torch.equal(megatron_shard("mlp.fc.bias", bias, 3, 4), bias[6:])
    assert megatron_shard("mlp.proj.bias", bias, 3, 4) is bias           # added once, after g: whole
    assert megatron_shard("ln_f.weight", bias, 2, 4) is bias
    assert megatron_shard("mlp.fc.weight", w, 0, 1) is w


def test_a_split_that_does_not_divide_is_an_error_naming_the_parameter():
    with pytest.raises(ValueError, match="attn.q.weight.*3 ranks"):
        megatron_shard("attn.q.weight", torch.zeros(8, 8), 0, 3)


def test_shard_state_slices_a_whole_state_dict():
    model = TinyGPT(GPTConfig(n_layer=1, n_head=4))
    state = shard_state(dict(model.named_parameters()), 1, 2)
    assert state["blocks.0.attn.q.weight"].shape == (16, 32)
    assert state["blocks.0.attn.proj.weight"].shape == (32, 16)
    assert state["wte.weight"].shape == (64, 32)
