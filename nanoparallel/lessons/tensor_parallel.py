"""Megatron's tensor-parallel layout of `TinyGPT`, as data: which parameter is split which way.

    split_of("blocks.0.attn.q.weight")            # "column"
    split_of("blocks.0.mlp.proj.weight")          # "row"

Shoeybi et al. 2019, section 3: in each block, the first linear layers of attention (q, k, v)
and of the MLP (fc) are split by columns of A in Y = XA, i.e. by rows of PyTorch's
``Linear.weight`` (out_features, in_features), and their biases with them; the second ones
(attention's and the MLP's proj) by rows of A, i.e. by columns of ``weight``, their bias kept
whole and added once after the reduction. Everything else (embeddings, LayerNorms, lm_head) is
replicated. A pure function, no processes: checks, pictures and the 3D notebook share it.

Which rank holds which slice is notebook 05's exercise 2, so the engine (which students can
import) does not compute it: the notebooks' checks put the ranks' pieces back together instead.
"""
from __future__ import annotations

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
