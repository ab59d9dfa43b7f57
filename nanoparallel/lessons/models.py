"""Tiny models that every parallel notebook shards, pipelines or replicates.

    from nanoparallel.lessons.models import GPTConfig, TinyGPT, make_gpt_batch
    model = TinyGPT(GPTConfig())
    idx, targets = make_gpt_batch(8, GPTConfig(), seed=0)
    logits, loss = model(idx, targets)   # (8, 16, 64), ~ln(64)

`TinyMLP` is a stack of Linear layers in `self.layers`, so you can hand layers to pipeline
stages one by one. `TinyGPT` follows nanoGPT's model.py, with two changes for teaching: the
attention computes its causal mask by hand instead of calling a fused kernel, and q, k, v are
separate Linear layers, so tensor parallelism can split each one column-wise and `proj`
row-wise (Megatron-LM, Shoeybi et al. 2019, section 3).

Both models initialise from `config.seed` with their own generator: two models with the same
config are bit-identical on every rank, and building one leaves the global RNG untouched.
Notation: B batch, T time (sequence), C channels (n_embd), nh heads, hs head size (C // nh).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

# The MLP's regression targets come from this fixed teacher, the same for every batch seed.
_TEACHER_SEED = 1234


# -----------------------------------------------------------------------------
# TinyMLP

@dataclass
class MLPConfig:
    d_in: int = 16      # input features
    d_hidden: int = 32  # width of every hidden layer
    d_out: int = 16     # output features
    n_layers: int = 3   # number of Linear layers (GELU between them, none after the last)
    seed: int = 0       # initialisation seed; same seed -> bit-identical parameters


class TinyMLP(nn.Module):

    def __init__(self, config: MLPConfig):
        super().__init__()
        assert config.n_layers >= 1
        self.config = config
        dims = [config.d_in] + [config.d_hidden] * (config.n_layers - 1) + [config.d_out]
        # nn.Linear's default init draws from the global RNG; fork_rng puts it back afterwards,
        # and _init_weights then overwrites every draw from our own generator.
        with torch.random.fork_rng(devices=[]):
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self._init_weights(torch.Generator().manual_seed(config.seed))

    @torch.no_grad()
    def _init_weights(self, g: torch.Generator) -> None:
        # PyTorch's own Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from our generator
        for layer in self.layers:
            bound = 1.0 / math.sqrt(layer.in_features)
            layer.weight.uniform_(-bound, bound, generator=g)
            layer.bias.uniform_(-bound, bound, generator=g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, d_in)
        for i, layer in enumerate(self.layers):
            x = layer(x)  # (B, d_hidden), or (B, d_out) after the last layer
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return x  # (B, d_out)


class Centred(nn.Module):
    """`inner` run on its batch centred on the batch's mean: the samples of one forward meet.

    A sample's output then depends on which samples share its forward, so P ranks that each run
    their own B/P samples and average compute other numbers than one forward on the whole batch:
    only the mean of each shard's own gradient (`train_reference(..., shards=P)`) is theirs. A
    check needs such a model to tell a rank that trained on its shard from one that trained on
    everything."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x - x.mean(0, keepdim=True))


class MLPStage(nn.Module):
    """Layers ``[first, first + len(layers))`` of a `TinyMLP`, computing exactly that slice of its
    forward: GELU after every layer except the model's last. A pipeline stage.

    ``stage.full_name(name)`` gives a parameter's name in the whole model ("0.weight" of the
    stage that starts at layer 4 is "layers.4.weight"), so stages can be compared with it.
    """

    def __init__(self, layers, first: int, n_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.first, self.n_layers = first, n_layers  # n_layers: of the whole model
        self.in_features = self.layers[0].in_features
        self.out_features = self.layers[-1].out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, in_features)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.first + i < self.n_layers - 1:
                x = F.gelu(x)
        return x  # (B, out_features)

    def full_name(self, name: str) -> str:
        index, rest = name.split(".", 2)[1:]
        return f"layers.{self.first + int(index)}.{rest}"


def mlp_stage(model: TinyMLP, stage: int, n_stages: int) -> MLPStage:
    """A copy of stage ``stage`` of ``n_stages`` equal stages of ``model`` (layers split evenly)."""
    n = len(model.layers)
    if not 0 <= stage < n_stages:
        raise ValueError(f"stage must be in 0..{n_stages - 1}, got {stage}")
    if n % n_stages:
        raise ValueError(f"{n} layers do not split into {n_stages} equal stages; "
                         f"use MLPConfig(n_layers=...) with a multiple of {n_stages}")
    per = n // n_stages
    layers = [copy.deepcopy(layer) for layer in model.layers[stage * per:(stage + 1) * per]]
    return MLPStage(layers, stage * per, n)


def make_mlp_batch(batch_size: int, config: MLPConfig,
                   seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression batch: x ~ N(0, 1), y = x @ W for a fixed random linear teacher W.

    W depends only on the config's shapes (not on `seed`), so every batch poses the same task.
    Returns x: (B, d_in) and y: (B, d_out).
    """
    teacher = torch.Generator().manual_seed(_TEACHER_SEED)
    W = torch.randn(config.d_in, config.d_out, generator=teacher) / math.sqrt(config.d_in)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, config.d_in, generator=g)  # (B, d_in)
    y = x @ W  # (B, d_out), unit variance per output
    return x, y


# -----------------------------------------------------------------------------
# TinyGPT

@dataclass
class GPTConfig:
    vocab_size: int = 64      # number of token ids
    block_size: int = 16      # longest sequence (T) the position embedding covers
    n_layer: int = 2          # number of transformer blocks
    n_head: int = 2           # attention heads per block; must divide n_embd
    n_embd: int = 32          # channels C of the residual stream
    dropout: float = 0.0      # keep 0.0: dropout draws from the global RNG and breaks parity
    seed: int = 0             # initialisation seed; same seed -> bit-identical parameters
    tie_weights: bool = True  # lm_head shares its weight with the token embedding


class CausalSelfAttention(nn.Module):

    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.head_size = config.n_embd // config.n_head  # hs
        # separate q, k, v (nanoGPT fuses them in c_attn): each is split column-wise under TP,
        # and since head h owns columns h*hs:(h+1)*hs, a column shard is a group of whole heads
        self.q = nn.Linear(config.n_embd, config.n_embd)
        self.k = nn.Linear(config.n_embd, config.n_embd)
        self.v = nn.Linear(config.n_embd, config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)  # split row-wise under TP
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        # mask[i, j] = 1 where query i may look at key j (j <= i); not persistent, so state
        # dicts hold only parameters and compare cleanly with sharded ones
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.size()  # (B, T, C)
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh * hs) each
        # nh from the output width, so a TP shard holding only its own heads works unchanged
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, T)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, nh * hs), heads side by side
        return self.resid_dropout(self.proj(y))  # (B, T, C)


class MLP(nn.Module):

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)    # split column-wise under TP
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)  # split row-wise under TP
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc(x))  # (B, T, 4C)
        return self.dropout(self.proj(x))  # (B, T, C)


class Block(nn.Module):

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))   # (B, T, C)
        return x


class TinyGPT(nn.Module):

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):  # see TinyMLP: leave the global RNG alone
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)  # token embedding
            self.wpe = nn.Embedding(config.block_size, config.n_embd)  # position embedding
            self.drop = nn.Dropout(config.dropout)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
            self.ln_f = nn.LayerNorm(config.n_embd)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            # weight tying (Press & Wolf 2017): one Parameter, two uses
            self.lm_head.weight = self.wte.weight
        self._init_weights(torch.Generator().manual_seed(config.seed))

    @torch.no_grad()
    def _init_weights(self, g: torch.Generator) -> None:
        # nanoGPT's init: N(0, 0.02) weights, zero biases; LayerNorm keeps its default (1, 0).
        # As in nanoGPT a tied weight is drawn twice (as Embedding, then as lm_head): harmless.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, 0.02, generator=g)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.zero_()

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.size()
        assert T <= self.config.block_size, f"sequence of {T} > block_size {self.config.block_size}"
        pos = torch.arange(T, dtype=torch.long, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C) + (T, C) -> (B, T, C)
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        x = self.ln_f(x)  # (B, T, C)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))  # mean over B*T
        return logits, loss


def make_gpt_batch(batch_size: int, config: GPTConfig,
                   seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A next-token batch of counting sequences: idx (B, T) and targets (B, T), T = block_size.

    Each row starts at a random token and counts up by a random stride in 1..4 (mod vocab);
    targets are the same stream shifted by one, as in nanoGPT's get_batch. From the second
    position on the next token is predictable, but only by looking back (attention) for the
    stride, so the loss falls well below ln(vocab_size) as the model learns.
    """
    g = torch.Generator().manual_seed(seed)
    T = config.block_size
    start = torch.randint(0, config.vocab_size, (batch_size, 1), generator=g)  # (B, 1)
    stride = torch.randint(1, 5, (batch_size, 1), generator=g)  # (B, 1)
    stream = (start + stride * torch.arange(T + 1)) % config.vocab_size  # (B, T+1)
    return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()


# -----------------------------------------------------------------------------

def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters; a tied weight counts once (parameters() yields it once)."""
    return sum(p.numel() for p in model.parameters())
