"""Megatron's tensor-parallel layout of `TinyGPT`, as data: which rank holds which slice.

    split_of("blocks.0.attn.q.weight")            # "column"
    megatron_shard("blocks.0.mlp.proj.weight", w, rank=1, world=4)   # w[:, 4C/4 : 2·4C/4]

Shoeybi et al. 2019, section 3: in each block, the first linear layers of attention (q, k, v)
and of the MLP (fc) are split by columns of A in Y = XA, i.e. by rows of PyTorch's
``Linear.weight`` (out_features, in_features), and their biases with them; the second ones
(attention's and the MLP's proj) by rows of A, i.e. by columns of ``weight``, their bias kept
whole and added once after the reduction. Everything else (embeddings, LayerNorms, lm_head) is
replicated. Pure functions, no processes: checks, pictures and the 3D notebook share them.
"""
from __future__ import annotations

import torch

COLUMN_PARALLEL = ("attn.q", "attn.k", "attn.v", "mlp.fc")
ROW_PARALLEL = ("attn.proj", "mlp.proj")


def split_of(name: str) -> str | None:
    """"column", "row" or None (replicated) for a parameter name of `TinyGPT` or a `Block`."""
    module = name.rsplit(".", 1)[0]
    if module.endswith(COLUMN_PARALLEL):
        return "column"
    if module.endswith(ROW_PARALLEL):
        return "row"
    return None


def megatron_shard(name: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The part of parameter `name` (or of its gradient) that `rank` of `world` holds."""
    split = split_of(name)
    if split is None or world == 1 or (split == "row" and name.endswith(".bias")):
        return full
    dim = 0 if split == "column" else 1
    if full.shape[dim] % world:
        raise ValueError(f"{name}: dimension {dim} of size {full.shape[dim]} does not split over {world} ranks")
    return full.chunk(world, dim=dim)[rank]


def shard_state(state: dict, rank: int, world: int) -> dict:
    """{name: the rank's shard} for a whole state dict or gradient dict."""
    return {k: megatron_shard(k, v, rank, world) for k, v in state.items()}
