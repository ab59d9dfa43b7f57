"""What notebook 06 builds its Mixture-of-Experts on: a layer's parameters, a toy task, and the
expert-parallel layout. The routing, the capacity and the layers themselves are the learner's.

    cfg = MoEConfig(d_model=16, d_ff=32, n_experts=4, k=2)
    moe = MoE(cfg)                         # router, noise router, experts, shared expert
    x, y = make_moe_batch(64, cfg, seed=0) # 64 tokens of d_model features and their targets
    mine = shard_experts(moe, rank, world) # experts [rank E/P, (rank+1) E/P); the rest replicated

Conventions (the notebook states them where the learner meets them):
- tokens are rows: x is (T, d_model); the router's logits are H = x W_g, W_g = router.weight.T;
- the layer includes its residual, y = x + sum of the kept experts' weighted outputs, so a token
  every expert dropped leaves unchanged (Switch Transformer, Fedus et al. 2022, section 2.2);
- expert e lives on rank e // (E / P): consecutive blocks, like torch's and Megatron's layouts.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

# The toy task's targets come from this fixed teacher, the same for every batch seed.
_TEACHER_SEED = 4321


@dataclass(frozen=True)
class MoEConfig:
    d_model: int = 16             # token features (h)
    d_ff: int = 32                # each expert's hidden width
    n_experts: int = 4            # routed experts (E)
    k: int = 2                    # experts per token
    capacity_factor: float = 1.25
    softmax_first: bool = False   # False: Softmax(KeepTopK(H)); True: TopK(Softmax(H)), not renormalised
    noisy: bool = False           # a second router adds N(0, 1) * softplus(x W_noise) to the logits
    shared: bool = False          # one dense expert that every token goes through as well
    seed: int = 0                 # initialisation seed; same seed -> bit-identical parameters


class Expert(nn.Module):
    """One feed-forward expert: Linear, GELU, Linear, like a transformer's MLP."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.proj = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class MoE(nn.Module):
    """The parameters of one MoE layer. It has no forward of its own: notebook 06 writes the
    layer as functions of this module (`moe_layer`, `ep_moe_layer`)."""

    def __init__(self, config: MoEConfig):
        super().__init__()
        if config.k < 1 or config.k > config.n_experts:
            raise ValueError(f"MoEConfig: k={config.k} must be between 1 and n_experts={config.n_experts}")
        self.config = config
        h, e = config.d_model, config.n_experts
        with torch.random.fork_rng(devices=[]):  # leave the global RNG as it was
            self.router = nn.Linear(h, e, bias=False)
            self.noise = nn.Linear(h, e, bias=False) if config.noisy else None
            self.experts = nn.ModuleList(Expert(h, config.d_ff) for _ in range(e))
            self.shared = Expert(h, config.d_ff) if config.shared else None
        g = torch.Generator().manual_seed(config.seed)
        with torch.no_grad():
            for p in self.parameters():  # PyTorch's Linear default U(-1/sqrt(fan_in), ...), ours
                bound = 1 / p.shape[-1] ** 0.5
                p.copy_(torch.rand(p.shape, generator=g) * 2 * bound - bound)

    def forward(self, x):
        raise TypeError("MoE holds parameters only: call your moe_layer(moe, x) instead")


def make_moe_batch(n_tokens: int, config: MoEConfig, seed: int = 0,
                   skew: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y): `n_tokens` tokens and a fixed teacher's targets. Every token shares one offset
    direction of length `skew`, as real hidden states share common directions, so a fresh
    router tends to send most tokens to the same few experts."""
    h = config.d_model
    teacher = torch.Generator().manual_seed(_TEACHER_SEED + h)
    offset = torch.randn(h, generator=teacher)
    offset = skew * offset / offset.norm()
    w1, w2 = torch.randn(h, 2 * h, generator=teacher) / h ** 0.5, torch.randn(2 * h, h, generator=teacher) / (2 * h) ** 0.5
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, h, generator=g) + offset
    y = x + torch.tanh(x @ w1) @ w2
    return x, y


def experts_per_rank(n_experts: int, world: int) -> int:
    if n_experts % world:
        raise ValueError(f"{n_experts} experts do not split evenly over {world} ranks: "
                         f"use a number of experts that is a multiple of the world size")
    return n_experts // world


def owner_of(expert: int, n_experts: int, world: int) -> int:
    """The rank that holds `expert`: consecutive blocks of E / P experts per rank."""
    return expert // experts_per_rank(n_experts, world)


class ExpertShard(nn.Module):
    """What one rank holds under expert parallelism: a copy of the router (and noise router and
    shared expert, replicated like data-parallel weights) and its own experts, named as in the
    whole layer (`experts.<global index>.fc.weight`) so that parameters compare by name."""

    def __init__(self, moe: MoE, rank: int, world: int):
        super().__init__()
        self.config = moe.config
        per = experts_per_rank(moe.config.n_experts, world)
        self.rank, self.world, self.first = rank, world, rank * per
        self.router = copy.deepcopy(moe.router)
        self.noise = copy.deepcopy(moe.noise)
        self.experts = nn.ModuleDict({str(e): copy.deepcopy(moe.experts[e])
                                      for e in range(self.first, self.first + per)})
        self.shared = copy.deepcopy(moe.shared)

    def expert(self, e: int) -> Expert:
        """Global expert `e`, if this rank holds it."""
        if str(e) not in self.experts:
            raise KeyError(f"rank {self.rank} holds experts {self.first}..{self.first + len(self.experts) - 1}, not {e}")
        return self.experts[str(e)]

    def forward(self, x):
        raise TypeError("ExpertShard holds parameters only: call your ep_moe_layer(shard, x) instead")


def shard_experts(moe: MoE, rank: int, world: int) -> ExpertShard:
    """Rank `rank`'s part of `moe` under expert parallelism over `world` ranks."""
    return ExpertShard(moe, rank, world)

