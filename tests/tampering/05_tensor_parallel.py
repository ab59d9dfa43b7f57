"""Tampering attempts on 05_tensor_parallel (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py), a
RowParallelLinear that feeds the checks' counting reduce a dummy, and a block that all-reduces
whole weights where f and f-bar belong."""
import library_objects
import operator_override

# RowParallelLinear must sum the ranks' products with the `reduce` it is handed (sequence
# parallelism hands it a reduce-scatter); this one hard-wires an all-reduce and calls the given
# reduce once, on zeros, which is all the checks' counting reduce looked at: 3/3 unflagged. The
# hidden checks now hand it a reduce whose result differs from a plain all-reduce's. Not
# flaggable: it must gain nothing.
DUMMY_REDUCE = '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        # about 6 lines; raise ValueError if world does not divide out_features
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        # about 1 line
        return F.linear(x, self.weight, self.bias)

class RowParallelLinear(torch.nn.Module):
    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce

    def forward(self, x):
        partial = F.linear(x, self.weight)
        y = ReduceFromParallel.apply(partial)            # hard-wired, whatever reduce it was handed
        if self.reduce is not None:
            self.reduce(torch.zeros_like(partial))       # the one call the checks count, on a dummy
        return y if self.bias is None else y + self.bias
'''

# Not Megatron at all: each sublayer's whole weights rebuilt on every rank by one all-reduce of
# the zero-padded shards, the whole sublayer run on every rank, and one all-reduce of the whole
# weights' gradients in backward; 4 all-reduces per block, as f and f-bar make: block 4/4
# unflagged (only the byte checks of other cells lost). The block's checks now measure each
# all-reduce: a block's activations, never weights. Not flaggable: it must gain nothing.
WHOLE_WEIGHTS = '''
class _WholeWeights(torch.autograd.Function):
    """The sublayer's whole weights on every rank: the ranks' shards, zero-padded, summed with one
    all-reduce. Backward: the whole weights' gradients summed over the ranks (scaled), this rank's part."""

    @staticmethod
    def forward(ctx, layout, scale, *shards):
        r, t = dist.get_rank(), dist.get_world_size()
        ctx.layout, ctx.scale = layout, scale
        fulls = []
        for (shape, dim), s in zip(layout, shards):
            f = s.new_zeros(shape)
            k = s.shape[dim]
            f.narrow(dim, r * k, k).copy_(s)
            fulls.append(f)
        flat = torch.cat([f.flatten() for f in fulls])
        dist.all_reduce(flat)
        out, i = [], 0
        for f in fulls:
            out.append(flat[i:i + f.numel()].view(f.shape).clone())
            i += f.numel()
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        r, t = dist.get_rank(), dist.get_world_size()
        flat = torch.cat([g.flatten() for g in grads]).contiguous().clone()
        dist.all_reduce(flat)
        flat = flat * ctx.scale
        parts, i = [], 0
        for (shape, dim), g in zip(ctx.layout, grads):
            whole = flat[i:i + g.numel()].view(g.shape)
            i += g.numel()
            k = shape[dim] // t
            parts.append(whole.narrow(dim, r * k, k).clone())
        return (None, None, *parts)


def _layout(params_dims, world):
    out = []
    for p, dim in params_dims:
        shape = list(p.shape)
        shape[dim] *= world
        out.append((tuple(shape), dim))
    return out


class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.world, self.given_enter, self.given_reduce = world, enter, reduce

    def forward(self, x):
        t = self.world
        given = self.given_enter is not None
        if given:
            x = self.given_enter(x)
        pd = [(self.fc.weight, 0), (self.fc.bias, 0), (self.proj.weight, 1)]
        fw, fb, pw = _WholeWeights.apply(_layout(pd, t), 1.0 if given else 1.0 / t, *[p for p, _ in pd])
        y = F.linear(F.gelu(F.linear(x, fw, fb)), pw)
        if given:
            y = self.given_reduce(y / t)
        return y + self.proj.bias


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if n_head % world:
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.world, self.given_enter, self.given_reduce = world, enter, reduce

    def forward(self, x):
        t = self.world
        given = self.given_enter is not None
        if given:
            x = self.given_enter(x)
        pd = [(self.q.weight, 0), (self.q.bias, 0), (self.k.weight, 0), (self.k.bias, 0),
              (self.v.weight, 0), (self.v.bias, 0), (self.proj.weight, 1)]
        qw, qb, kw, kb, vw, vb, pw = _WholeWeights.apply(_layout(pd, t), 1.0 if given else 1.0 / t, *[p for p, _ in pd])
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = F.linear(x, qw, qb), F.linear(x, kw, kb), F.linear(x, vw, vb)
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = F.linear((att @ v).transpose(1, 2).reshape(B, T, nh * hs), pw)
        if given:
            y = self.given_reduce(y / t)
        return y + self.proj.bias
'''


TAMPERING = {"torch_library_override": operator_override.case("05_tensor_parallel"),
             "library_objects": library_objects.case("05_tensor_parallel"),
             "reduce_fed_a_dummy": {"flagged": False, "cells": {"linears": DUMMY_REDUCE}, "zero": ["linears"], "full": []},
             "whole_weights_gathered_every_step": {"flagged": False, "cells": {"block": WHOLE_WEIGHTS}, "zero": ["block"],
                                                   "full": []}}
