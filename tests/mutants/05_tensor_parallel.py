"""Plausible wrong answers for 05_tensor_parallel. Each mutant replaces whole solution cells (keyed by
grade_id); the graded cell ``<grade_id>_tests`` of every replaced cell must then lose points.

The issue's list: f and f̄ swapped, the row-parallel bias added on every rank before the reduction,
heads split along the wrong axis, the LayerNorm gradients not summed (or averaged), a gather where
a reduce-scatter belongs, a memory formula that divides all of 34 by t under plain TP. And the lazy
versions a check must not let through: f̄ reducing again in backward, a row layer that ignores its
`reduce`, f applied to q, k and v separately (right values, 3 all-reduces where 1 belongs), a
reduce-scatter built from an all-reduce (right values, wrong collective), no ValueError for shapes
that do not split, the row-parallel biases left out of the sequence-parallel sum, the byte formula
without backward or without the ring, the attention core not divided by t.

Letters as Korthikanti et al. (2022, figures 4 and 5) name them: Megatron's f (identity forward,
all-reduce backward) and f̄ (all-reduce forward, identity backward); sequence parallelism's g
(all-gather forward, reduce-scatter backward) and ḡ (reduce-scatter forward, all-gather backward).

Wrong answers that once passed, each graded in its own exercise's cell: a ValueError tested on the
dimension a layer does not split (only square layers were tried); shards that are views of the
full weight (or `.contiguous()` of a slice that already is), so every rank keeps the whole matrix;
the causal mask used whole, not cut to T (every run had T = block size); the sequence length read
before `enter` (the block exercise never ran sequence parallelism); the heads tested by their size
or against the number of ranks instead of for divisibility. And more: f and f̄ all-reducing in
place the tensor autograd or the caller handed them; torch's autograd-aware collectives
(`torch.distributed.nn.functional`) instead of one's own autograd Functions; the all-gather
concatenated along the batch instead of the sequence; the parameters outside the blocks
(embeddings, ln_f, lm_head), which already saw the whole sequence, summed over the ranks too.
"""

import equals_everything
from mutation_run import solution_with


def _solution_with(grade_id: str, *changes: str) -> str:
    return solution_with("05_tensor_parallel", grade_id, *changes)


# A column layer that keeps the other ranks' rows and computes the whole product where torch's FLOP
# counter does not look (elementwise, or with the dispatch modes suspended), beside a shard-sized
# product it throws away (a fifth red-team pass): the bytes its construction keeps tell.
_WHOLE_COLUMN = '''
class ColumnParallelLinear(torch.nn.Module):
    """Claimed column shard: keeps the whole weight (the other ranks' rows as plain tensors), computes
    the whole layer's product and keeps its slice."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        lo, hi = rank * n // world, (rank + 1) * n // world
        self._lo, self._hi = lo, hi
        self.weight = torch.nn.Parameter(linear.weight.detach()[lo:hi].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[lo:hi].clone())
        self._w_before, self._w_after = linear.weight.detach()[:lo].clone(), linear.weight.detach()[hi:].clone()
        self._b_before = None if linear.bias is None else linear.bias.detach()[:lo].clone()
        self._b_after = None if linear.bias is None else linear.bias.detach()[hi:].clone()

    def _whole(self):
        w = torch.cat([self._w_before, self.weight, self._w_after])
        b = None if self.bias is None else torch.cat([self._b_before, self.bias, self._b_after])
        return w, b
'''
_ROW_LAYER = _solution_with('linears')[_solution_with('linears').index("class RowParallelLinear"):]

MUTANTS = {
    'whole_product_elementwise': {'linears': _WHOLE_COLUMN + '''
    def forward(self, x):
        w, b = self._whole()
        y = (x.unsqueeze(-2) * w).sum(-1)               # the whole product, no matrix multiply
        if b is not None:
            y = y + b
        _ = F.linear(x.detach(), torch.zeros_like(self.weight))   # a shard-sized product, thrown away
        return y[..., self._lo:self._hi]
''' + "\n\n" + _ROW_LAYER},
    'whole_product_with_the_modes_suspended': {'linears': _WHOLE_COLUMN + '''
    def forward(self, x):
        from torch.utils._python_dispatch import _disable_current_modes
        w, b = self._whole()
        with _disable_current_modes():                  # whatever counts FLOPs is not looking
            y = F.linear(x, w, b)                       # the whole product
        _ = F.linear(x.detach(), torch.zeros_like(self.weight))   # a shard-sized product, thrown away
        return y[..., self._lo:self._hi]
''' + "\n\n" + _ROW_LAYER},
    # Right numbers from work a rank should not do (a red-team pass found each keeping its points):
    # the whole layer multiplied on every rank, its part kept (a full copy held outside the
    # parameters); the MLP's whole fc the same way; the sequence-parallel sync as an all-gather of
    # every rank's gradients, summed.
    'whole_products_kept_part': {
        'linears': _solution_with(
            'linears',
            '        rows = slice(rank * n // world, (rank + 1) * n // world)\n'
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())\n',
            '        self.lo, self.hi = rank * n // world, (rank + 1) * n // world\n'
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[self.lo:self.hi].clone())\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[self.lo:self.hi].clone())\n'
            "        # the whole layer, to compute Y = X A and keep this rank's features\n"
            '        self.full_weight = linear.weight.detach().clone()\n'
            '        self.full_bias = None if linear.bias is None else linear.bias.detach().clone()\n',
            '        return F.linear(x, self.weight, self.bias)\n',
            '        w = torch.cat([self.full_weight[:self.lo], self.weight, self.full_weight[self.hi:]])\n'
            '        b = None if self.bias is None else torch.cat([self.full_bias[:self.lo], self.bias, self.full_bias[self.hi:]])\n'
            '        return F.linear(x, w, b)[..., self.lo:self.hi]\n'),
        'block': _solution_with(
            'block',
            '        self.enter = enter if enter is not None else CopyToParallel.apply\n'
            '        ### END SOLUTION\n'
            '\n'
            '    def forward(self, x):\n'
            '        # about 1 line\n'
            '        ### BEGIN SOLUTION\n'
            '        return self.proj(F.gelu(self.fc(self.enter(x))))\n',
            '        self.enter = enter if enter is not None else CopyToParallel.apply\n'
            '        n = mlp.fc.out_features\n'
            '        self.lo, self.hi = rank * n // world, (rank + 1) * n // world\n'
            '        self.full_fc = copy.deepcopy(mlp.fc).requires_grad_(False)  # the whole fc: all of X W_in, then my features\n'
            '        self.__dict__["full_fc"] = self._modules.pop("full_fc")    # not one of the block\'s parameters\n'
            '\n'
            '    def forward(self, x):\n'
            '        return self.proj(F.gelu(self.fc(self.enter(x))))\n',
            '        return self.proj(F.gelu(self.fc(self.enter(x))))\n',
            '        x = self.enter(x)\n'
            '        w = torch.cat([self.full_fc.weight[:self.lo], self.fc.weight, self.full_fc.weight[self.hi:]])\n'
            '        b = torch.cat([self.full_fc.bias[:self.lo], self.fc.bias, self.full_fc.bias[self.hi:]])\n'
            '        return self.proj(F.gelu(F.linear(x, w, b)[..., self.lo:self.hi]))\n',
            '        return self.proj(y)\n',
            '        return self.proj(y)\n'
            '        \n'),
        'sequence_parallel': _solution_with(
            'sequence_parallel',
            '    the whole sequence (read the TPBlock and the model\'s entry and exit above)."""\n',
            '    the whole sequence (read the TPBlock and the model\'s entry and exit above)."""\n'
            '    t = dist.get_world_size()\n',
            '            dist.all_reduce(p.grad)\n',
            "            parts = [torch.empty_like(p.grad) for _ in range(t)]  # every rank's gradient, then their sum\n"
            '            dist.all_gather(parts, p.grad.contiguous())\n'
            '            p.grad = torch.stack(parts).sum(0)\n'),
    },
    'row_layer_zero_padded_whole_product': {
        'linears': _solution_with(
            'linears',
            '        cols = slice(rank * n // world, (rank + 1) * n // world)\n'
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())\n',
            '        self.lo, self.hi, self.n = rank * n // world, (rank + 1) * n // world, n\n'
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[:, self.lo:self.hi].clone())\n',
            '        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply\n',
            '        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply\n'
            '        self.full_weight = linear.weight.detach().clone()  # the whole layer: X A with X zero outside my features\n',
            '        y = self.reduce(F.linear(x, self.weight))\n',
            '        whole = x.new_zeros(*x.shape[:-1], self.n)\n'
            '        whole[..., self.lo:self.hi] = x\n'
            '        w = torch.cat([self.full_weight[:, :self.lo], self.weight, self.full_weight[:, self.hi:]], dim=1)\n'
            '        y = self.reduce(F.linear(whole, w))\n'),
    },
    'swaps': {
        'f_g': '''
class CopyToParallel(torch.autograd.Function):
    """Megatron's f: the identity forward; backward, the sum of the gradient over all ranks."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's f̄: forward, the sum of the input over all ranks; the identity backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad
''',
        'linears': _solution_with(
            'linears',
            '        y = self.reduce(F.linear(x, self.weight))\n'
            '        return y if self.bias is None else y + self.bias\n',
            '        return self.reduce(F.linear(x, self.weight, self.bias))\n'),
        'block': _solution_with(
            'block',
            '        q = q.view(B, T, nh, hs).transpose(1, 2)\n'
            '        k = k.view(B, T, nh, hs).transpose(1, 2)\n'
            '        v = v.view(B, T, nh, hs).transpose(1, 2)\n',
            '        q = q.view(B, T, hs, nh).permute(0, 3, 1, 2)\n'
            '        k = k.view(B, T, hs, nh).permute(0, 3, 1, 2)\n'
            '        v = v.view(B, T, hs, nh).permute(0, 3, 1, 2)\n'),
        'comm': _solution_with(
            'comm',
            '    return 4 * 2 * (t - 1) / t * b * s * h * bytes_per_value\n',
            '    return 2 * 2 * (t - 1) / t * b * s * h * bytes_per_value  # forgot backward\n'),
        'sequence_parallel': '''
def _all_gather_sequence(x):
    t = dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


def _reduce_scatter_sequence(x):
    t = dist.get_world_size()
    out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
    dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
    return out


class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        return _all_gather_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_sequence(grad)


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_sequence(grad)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard (use `split_of(name)`, and read the TPBlock above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()  # averaged, as data parallelism would
''',
        'memory': _solution_with(
            'memory',
            '    return s * b * h * (10 + 24 / t + attention_core / t)\n',
            '    return s * b * h * (34 / t + attention_core / t)  # all of it divided by t\n'),
    },
    'shortcuts': {
        'f_g': _solution_with(
            'f_g',
            '    def backward(ctx, grad):\n'
            '        # about 1 line\n'
            '        ### BEGIN SOLUTION\n'
            '        return grad\n',
            '    def backward(ctx, grad):\n'
            '        grad = grad.contiguous().clone()\n'
            '        dist.all_reduce(grad)\n'
            '        return grad\n'),
        'linears': _solution_with(
            'linears',
            '        y = self.reduce(F.linear(x, self.weight))\n',
            '        y = F.linear(x, self.weight).contiguous()\n'
            '        dist.all_reduce(y)\n'),
        'block': _solution_with(
            'block',
            '        x = self.enter(x)\n',
            '',
            "        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads\n",
            "        q, k, v = self.q(self.enter(x)), self.k(self.enter(x)), self.v(self.enter(x))  # (B, T, nh/t * hs): this rank's heads\n"),
        'comm': _solution_with(
            'comm',
            '    return 4 * 2 * (t - 1) / t * b * s * h * bytes_per_value\n',
            '    return 4 * (t - 1) * b * s * h * bytes_per_value  # every rank sends its tensor to every other\n'),
        'sequence_parallel': '''
def _all_gather_sequence(x):
    t = dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


def _reduce_scatter_sequence(x):
    t = dist.get_world_size()
    out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
    dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
    return out


class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        return _all_gather_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_sequence(grad)


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_sequence(grad)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard (use `split_of(name)`, and read the TPBlock above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and split_of(name) is None and p.grad is not None:  # LayerNorms only
            dist.all_reduce(p.grad)
''',
        'memory': _solution_with(
            'memory',
            '        return s * b * h * (34 / t + attention_core / t)\n'
            '    return s * b * h * (10 + 24 / t + attention_core / t)\n',
            '        return s * b * h * (34 / t + attention_core)\n'
            "    return s * b * h * (10 + 24 / t + attention_core)  # the heads' attention is split too\n"),
    },
    'no_checks_and_gathers': {
        'linears': _solution_with(
            'linears',
            '        if n % world:\n'
            '            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")\n',
            '',
            '        if n % world:\n'
            '            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")\n',
            ''),
        'block': _solution_with(
            'block',
            '        if n_head % world:\n'
            '            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "\n'
            '                             f"choose a tensor-parallel size that divides the number of heads")\n',
            ''),
        'sequence_parallel': '''
def _all_gather_sequence(x):
    t = dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


def _reduce_scatter_sequence(x):
    t = dist.get_world_size()
    out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
    dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
    return out


class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        return _all_gather_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(dist.get_world_size(), dim=1)[dist.get_rank()].contiguous()


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_sequence(grad)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard (use `split_of(name)`, and read the TPBlock above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            dist.all_reduce(p.grad)
''',
    },
    'all_reduce_inside': {
        'sequence_parallel': '''
def _all_gather_sequence(x):
    t = dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


def _reduce_scatter_sequence(x):
    x = x.contiguous().clone()
    dist.all_reduce(x)
    return x.chunk(dist.get_world_size(), dim=1)[dist.get_rank()].contiguous()


class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        return _all_gather_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_sequence(grad)


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_sequence(grad)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard (use `split_of(name)`, and read the TPBlock above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            dist.all_reduce(p.grad)
''',
    },
    'replicas_drift': {
        'sequence_parallel': '''
def _all_gather_sequence(x):
    t = dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


def _reduce_scatter_sequence(x):
    t = dist.get_world_size()
    out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
    dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
    return out


class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        return _all_gather_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_sequence(grad)


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_sequence(grad)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard (use `split_of(name)`, and read the TPBlock above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            pass  # the replicas see different tokens, and drift apart
''',
    },
}


# Wrong answers the checks used to let through, and others a student may write (see the module docstring).
MUTANTS.update({
    'wrong_dimension_checked': {
        'linears': _solution_with(
            'linears',
            '        if n % world:\n'
            '            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")\n',
            '        if linear.in_features % world:  # the other dimension\n'
            '            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")\n',
            '        if n % world:\n'
            '            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")\n',
            '        if linear.out_features % world:  # the other dimension\n'
            '            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")\n'),
    },
    'shards_are_views': {
        'linears': _solution_with(
            'linears',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())\n',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[rows])\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows])\n',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())\n',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols])\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach())\n'),
    },
    'contiguous_instead_of_clone': {
        'linears': _solution_with(
            'linears',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())\n',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].contiguous())\n'
            '        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].contiguous())\n',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())\n',
            '        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].contiguous())\n'),
    },
    'mask_not_cut_to_T': {
        'block': _solution_with(
            'block',
            '        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))\n',
            '        att = att.masked_fill(self.mask == 0, float("-inf"))  # the whole block_size mask\n'),
    },
    'sequence_length_before_enter': {
        'block': _solution_with(
            'block',
            '    def forward(self, x):\n'
            '        # about 12 lines: CausalSelfAttention.forward (nanoparallel/lessons/models.py) on your heads\n'
            '        ### BEGIN SOLUTION\n'
            '        x = self.enter(x)\n',
            '    def forward(self, x):\n'
            '        B, T, _ = x.shape  # read before enter\n'
            '        x = self.enter(x)\n',
            '        B, T, _ = x.shape\n',
            ''),
    },
    'heads_checked_by_head_size': {
        'block': _solution_with(
            'block',
            '        if n_head % world:\n',
            '        if attn.head_size % world:  # the head size, not the number of heads\n'),
    },
    'heads_checked_against_world': {
        'block': _solution_with(
            'block',
            '        if n_head % world:\n',
            '        if n_head < world:  # fewer heads than ranks, instead of heads that do not divide\n'),
    },
    'all_reduce_in_place': {
        'f_g': '''
class CopyToParallel(torch.autograd.Function):
    """Megatron's f: the identity forward; backward, the sum of the gradient over all ranks."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(grad)  # in place, on the tensor autograd handed over
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's f̄: forward, the sum of the input over all ranks; the identity backward."""

    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(x)  # in place, on the caller's input
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad
''',
    },
    'torch_autograd_collectives': {
        'sequence_parallel': _solution_with(
            'sequence_parallel',
            'class AllGatherSequence(torch.autograd.Function):\n',
            'from torch.distributed.nn.functional import all_gather as _autograd_all_gather, reduce_scatter as _autograd_reduce_scatter\n'
            '\n'
            '\n'
            'class AllGatherSequence:\n'
            '    """torch\'s autograd-aware all-gather, in place of an autograd Function of one\'s own."""\n'
            '\n'
            '    @staticmethod\n'
            '    def apply(x):\n'
            '        return torch.cat(_autograd_all_gather(x.contiguous()), dim=1)\n'
            '\n'
            '\n'
            'class ReduceScatterSequence:\n'
            '    """torch\'s autograd-aware reduce-scatter, in place of an autograd Function of one\'s own."""\n'
            '\n'
            '    @staticmethod\n'
            '    def apply(x):\n'
            '        t = dist.get_world_size()\n'
            '        out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()\n'
            '        return _autograd_reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])\n'
            '\n'
            '\n'
            'class _UnusedGather(torch.autograd.Function):\n',
            'class ReduceScatterSequence(torch.autograd.Function):\n',
            'class _UnusedScatter(torch.autograd.Function):\n'),
    },
    'gathers_the_batch_dim': {
        'sequence_parallel': _solution_with(
            'sequence_parallel',
            '        return torch.cat(parts, dim=1)\n'
            '        ### END SOLUTION\n'
            '\n'
            '    @staticmethod\n',
            '        return torch.cat(parts, dim=0)  # the batch dimension, not the sequence\n'
            '\n'
            '    @staticmethod\n'),
    },
    'sums_whole_sequence_params_too': {
        'sequence_parallel': _solution_with(
            'sequence_parallel',
            '        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:\n',
            '        if (split_of(name) is None or row_bias) and p.grad is not None:  # embeddings, ln_f and lm_head too\n'),
    },
})


# f and f-bar that all-reduce filler in the right phase and return what the sum would be, every
# rank's input and seed gradient rebuilt from the seeds the checks used to draw them from
# (100 + rank): f_g 2/2 on those checks. They now draw afresh and send each rank its own only.
SEEDS_REBUILT = '''
def _rebuilt(shape, transposed, q, second):
    """Rank q's input (or, second, its seed gradient) as the checks drew it from the seed 100 + q."""
    g = torch.Generator().manual_seed(100 + q)
    x = torch.randn(*(shape[::-1] if transposed else shape), generator=g)
    x = x.t() if transposed else x
    return torch.randn(x.shape, generator=g) if second else x


class CopyToParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.transposed = x.dim() == 2 and not x.is_contiguous()
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(torch.zeros(grad.shape))          # filler, in the right phase
        return sum(_rebuilt(tuple(grad.shape), ctx.transposed, q, True) for q in range(dist.get_world_size()))


class ReduceFromParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(torch.zeros(x.shape))             # filler, in the right phase
        transposed = x.dim() == 2 and not x.is_contiguous()
        return sum(_rebuilt(tuple(x.shape), transposed, q, False) for q in range(dist.get_world_size()))

    @staticmethod
    def backward(ctx, grad):
        return grad
'''
MUTANTS['inputs_rebuilt_from_seeds'] = {'f_g': SEEDS_REBUILT}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("05_tensor_parallel", returns_nothing=("sync_sequence_parallel_grads",)))


# A TPMLP that keeps its shards as parameters but computes the whole MLP from the full block it was
# handed, training the other ranks' pieces alongside with the optimizer it tells from its own
# piece's first step, and all-reduces zeros where f and f̄ talk. While every rank was handed the
# whole model, it kept block_tests; now each holds only its own piece (held_by_rank), and the
# other ranks' parts are NaN.
WHOLE_MLP_ON_EVERY_RANK = '''
class _Zeros(torch.autograd.Function):
    """The identity, with an all-reduce of zeros of the tensor's size: in forward (f̄'s message)
    or in backward (f's)."""

    @staticmethod
    def forward(ctx, x, in_forward):
        ctx.in_forward = in_forward
        if in_forward:
            dist.all_reduce(torch.zeros(x.shape))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.in_forward:
            dist.all_reduce(torch.zeros(grad.shape))
        return grad, None


class TPMLP(torch.nn.Module):
    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply
        self.__dict__["_full"] = mlp  # not a submodule: the other ranks' pieces, read as they train
        n = mlp.fc.out_features
        self._lo, self._hi = rank * n // world, (rank + 1) * n // world
        self._plain = enter is not None or reduce is not None
        self._others = self._opt = self._seen = None

    def _whole(self):
        fc, proj, lo, hi = self._full.fc, self._full.proj, self._lo, self._hi
        if self._others is None:
            self._others = [t.detach().clone().requires_grad_() for t in (
                fc.weight[:lo], fc.weight[hi:], fc.bias[:lo], fc.bias[hi:], proj.weight[:, :lo], proj.weight[:, hi:])]
        elif not torch.equal(self.fc.weight.detach(), self._seen):  # the optimizer stepped: step the others too
            if self._opt is None:  # Adam's first step is about lr in size everywhere, SGD's lr times the gradient
                adam = (self.fc.weight.detach() - self._seen).abs().median() > 5e-3
                self._opt = (torch.optim.Adam if adam else torch.optim.SGD)(self._others, lr=1e-2)
            self._opt.step()
            self._opt.zero_grad(set_to_none=True)
        self._seen = self.fc.weight.detach().clone()
        a, b, c, d, e, f = self._others
        return torch.cat([a, self.fc.weight, b]), torch.cat([c, self.fc.bias, d]), torch.cat([e, self.proj.weight, f], dim=1)

    def forward(self, x):
        if self._plain or not torch.isfinite(self._full.fc.weight).any():  # checked one layer at a time: the honest way
            return self.proj(F.gelu(self.fc(self.enter(x))))
        w1, b1, w2 = self._whole()
        y = F.linear(F.gelu(F.linear(_Zeros.apply(x, False), w1, b1)), w2)
        return _Zeros.apply(y, True) + self.proj.bias


''' + _solution_with('block')[_solution_with('block').index("class TPAttention"):]
MUTANTS['whole_mlp_on_every_rank'] = {'block': WHOLE_MLP_ON_EVERY_RANK}
