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

MUTANTS = {
    # Right numbers from work a rank should not do (a red-team pass found each keeping its points):
    # the whole layer multiplied on every rank, its part kept (a full copy held outside the
    # parameters); the MLP's whole fc the same way; the sequence-parallel sync as an all-gather of
    # every rank's gradients, summed.
    'whole_products_kept_part': {
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        self.lo, self.hi = rank * n // world, (rank + 1) * n // world
        self.weight = torch.nn.Parameter(linear.weight.detach()[self.lo:self.hi].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[self.lo:self.hi].clone())
        # the whole layer, to compute Y = X A and keep this rank's features
        self.full_weight = linear.weight.detach().clone()
        self.full_bias = None if linear.bias is None else linear.bias.detach().clone()

    def forward(self, x):
        w = torch.cat([self.full_weight[:self.lo], self.weight, self.full_weight[self.hi:]])
        b = None if self.bias is None else torch.cat([self.full_bias[:self.lo], self.bias, self.full_bias[self.hi:]])
        return F.linear(x, w, b)[..., self.lo:self.hi]


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        y = self.reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
''',
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        # about 3 lines
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply
        n = mlp.fc.out_features
        self.lo, self.hi = rank * n // world, (rank + 1) * n // world
        self.full_fc = copy.deepcopy(mlp.fc).requires_grad_(False)  # the whole fc: all of X W_in, then my features
        self.__dict__["full_fc"] = self._modules.pop("full_fc")    # not one of the block's parameters

    def forward(self, x):
        # about 1 line
        x = self.enter(x)
        w = torch.cat([self.full_fc.weight[:self.lo], self.fc.weight, self.full_fc.weight[self.hi:]])
        b = torch.cat([self.full_fc.bias[:self.lo], self.fc.bias, self.full_fc.bias[self.hi:]])
        return self.proj(F.gelu(F.linear(x, w, b)[..., self.lo:self.hi]))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        # about 9 lines; attn.head_size is hs, attn.mask the causal mask (a buffer)
        n_head = attn.q.out_features // attn.head_size
        if n_head % world:
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        # about 12 lines: CausalSelfAttention.forward (nanoparallel/lessons/models.py) on your heads
        x = self.enter(x)
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
        
''',
        'sequence_parallel': '''
class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        parts = [torch.empty_like(x) for _ in range(t)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        out = torch.empty_like(grad.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in grad.chunk(t, dim=1)])
        return out


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
        return out

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        parts = [torch.empty_like(grad) for _ in range(t)]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, dim=1)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard: the blocks' LayerNorm weights and biases and the row-parallel
    biases (`split_of(name)` names those "row"), not the embeddings, ln_f or lm_head, which see
    the whole sequence (read the TPBlock and the model's entry and exit above)."""
    t = dist.get_world_size()
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            parts = [torch.empty_like(p.grad) for _ in range(t)]  # every rank's gradient, then their sum
            dist.all_gather(parts, p.grad.contiguous())
            p.grad = torch.stack(parts).sum(0)
''',
    },
    'row_layer_zero_padded_whole_product': {
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        self.lo, self.hi, self.n = rank * n // world, (rank + 1) * n // world, n
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, self.lo:self.hi].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply
        self.full_weight = linear.weight.detach().clone()  # the whole layer: X A with X zero outside my features

    def forward(self, x):
        whole = x.new_zeros(*x.shape[:-1], self.n)
        whole[..., self.lo:self.hi] = x
        w = torch.cat([self.full_weight[:, :self.lo], self.weight, self.full_weight[:, self.hi:]], dim=1)
        y = self.reduce(F.linear(whole, w))
        return y if self.bias is None else y + self.bias
''',
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
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        return self.reduce(F.linear(x, self.weight, self.bias))
''',
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if n_head % world:
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        x = self.enter(x)
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, hs, nh).permute(0, 3, 1, 2)
        k = k.view(B, T, hs, nh).permute(0, 3, 1, 2)
        v = v.view(B, T, hs, nh).permute(0, 3, 1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
        'comm': '''
def tp_comm_bytes(b, s, h, t, bytes_per_value):
    """Bytes each rank sends per transformer layer per training step (forward and backward)
    under Megatron tensor parallelism over t ranks, with the course's convention for an
    all-reduce of N bytes (ring: 2(t-1)/t N sent per rank). b batch, s sequence, h hidden."""
    return 2 * 2 * (t - 1) / t * b * s * h * bytes_per_value  # forgot backward
''',
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
        'memory': '''
def activation_memory(s, b, h, a, t=1, sequence_parallel=False):
    """Bytes of activations one transformer layer keeps for backward on each of t ranks, in
    Korthikanti et al.'s convention (16-bit activations, 1-byte dropout masks): no tensor
    parallelism (t = 1), Megatron tensor parallelism, and tensor + sequence parallelism."""
    attention_core = 5 * a * s / h  # softmax output, its dropout mask and output: sharded by heads
    if sequence_parallel:
        return s * b * h * (34 / t + attention_core / t)
    return s * b * h * (34 / t + attention_core / t)  # all of it divided by t
''',
    },
    'shortcuts': {
        'f_g': '''
class CopyToParallel(torch.autograd.Function):
    """Megatron's f: the identity forward; backward, the sum of the gradient over all ranks."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()  # all-reduce works in place: leave autograd's tensor alone
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's f̄: forward, the sum of the input over all ranks; the identity backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad
''',
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        y = F.linear(x, self.weight).contiguous()
        dist.all_reduce(y)
        return y if self.bias is None else y + self.bias
''',
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if n_head % world:
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(self.enter(x)), self.k(self.enter(x)), self.v(self.enter(x))  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
        'comm': '''
def tp_comm_bytes(b, s, h, t, bytes_per_value):
    """Bytes each rank sends per transformer layer per training step (forward and backward)
    under Megatron tensor parallelism over t ranks, with the course's convention for an
    all-reduce of N bytes (ring: 2(t-1)/t N sent per rank). b batch, s sequence, h hidden."""
    return 4 * (t - 1) * b * s * h * bytes_per_value  # every rank sends its tensor to every other
''',
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
        'memory': '''
def activation_memory(s, b, h, a, t=1, sequence_parallel=False):
    """Bytes of activations one transformer layer keeps for backward on each of t ranks, in
    Korthikanti et al.'s convention (16-bit activations, 1-byte dropout masks): no tensor
    parallelism (t = 1), Megatron tensor parallelism, and tensor + sequence parallelism."""
    attention_core = 5 * a * s / h  # softmax output, its dropout mask and output: sharded by heads
    if sequence_parallel:
        return s * b * h * (34 / t + attention_core)
    return s * b * h * (10 + 24 / t + attention_core)  # the heads' attention is split too
''',
    },
    'no_checks_and_gathers': {
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        y = self.reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
''',
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        x = self.enter(x)
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
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
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if linear.in_features % world:  # the other dimension
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if linear.out_features % world:  # the other dimension
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        y = self.reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
''',
    },
    'shards_are_views': {
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows])
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows])

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols])
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        y = self.reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
''',
    },
    'contiguous_instead_of_clone': {
        'linears': '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].contiguous())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].contiguous())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Rank `rank`'s row shard of `linear`: its input is this rank's slice of X's features, A is
    split by rows (the columns of PyTorch's weight). The partial products are summed with
    `reduce` (default: f̄, ReduceFromParallel.apply); the bias, whole, is added once, after."""

    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].contiguous())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce if reduce is not None else ReduceFromParallel.apply

    def forward(self, x):
        y = self.reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
''',
    },
    'mask_not_cut_to_T': {
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if n_head % world:
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        x = self.enter(x)
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask == 0, float("-inf"))  # the whole block_size mask
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
    },
    'sequence_length_before_enter': {
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if n_head % world:
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        B, T, _ = x.shape  # read before enter
        x = self.enter(x)
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
    },
    'heads_checked_by_head_size': {
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if attn.head_size % world:  # the head size, not the number of heads
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        x = self.enter(x)
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
    },
    'heads_checked_against_world': {
        'block': '''
class TPMLP(torch.nn.Module):
    """The block's MLP under tensor parallelism: enter (default f), fc column-parallel, GeLU,
    proj row-parallel with `reduce` (default f̄)."""

    def __init__(self, mlp, rank, world, enter=None, reduce=None):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, rank, world)
        self.proj = RowParallelLinear(mlp.proj, rank, world, reduce=reduce)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        return self.proj(F.gelu(self.fc(self.enter(x))))


class TPAttention(torch.nn.Module):
    """The block's causal self-attention under tensor parallelism: enter (default f); q, k and v
    column-parallel, so each rank holds whole heads; attention over this rank's heads; proj
    row-parallel with `reduce` (default f̄). ValueError if the heads do not split over `world`."""

    def __init__(self, attn, rank, world, enter=None, reduce=None):
        super().__init__()
        n_head = attn.q.out_features // attn.head_size
        if n_head < world:  # fewer heads than ranks, instead of heads that do not divide
            raise ValueError(f"TPAttention: {n_head} heads do not split over {world} ranks; "
                             f"choose a tensor-parallel size that divides the number of heads")
        self.head_size = attn.head_size
        self.q = ColumnParallelLinear(attn.q, rank, world)
        self.k = ColumnParallelLinear(attn.k, rank, world)
        self.v = ColumnParallelLinear(attn.v, rank, world)
        self.proj = RowParallelLinear(attn.proj, rank, world, reduce=reduce)
        self.register_buffer("mask", attn.mask, persistent=False)
        self.enter = enter if enter is not None else CopyToParallel.apply

    def forward(self, x):
        x = self.enter(x)
        B, T, _ = x.shape
        hs = self.head_size
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, nh/t * hs): this rank's heads
        nh = q.size(-1) // hs
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        return self.proj(y)
''',
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
        'sequence_parallel': '''
from torch.distributed.nn.functional import all_gather as _autograd_all_gather, reduce_scatter as _autograd_reduce_scatter


class AllGatherSequence:
    """torch's autograd-aware all-gather, in place of an autograd Function of one's own."""

    @staticmethod
    def apply(x):
        return torch.cat(_autograd_all_gather(x.contiguous()), dim=1)


class ReduceScatterSequence:
    """torch's autograd-aware reduce-scatter, in place of an autograd Function of one's own."""

    @staticmethod
    def apply(x):
        t = dist.get_world_size()
        out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
        return _autograd_reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])


class _UnusedGather(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        parts = [torch.empty_like(x) for _ in range(t)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        out = torch.empty_like(grad.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in grad.chunk(t, dim=1)])
        return out


class _UnusedScatter(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
        return out

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        parts = [torch.empty_like(grad) for _ in range(t)]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, dim=1)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard: the blocks' LayerNorm weights and biases and the row-parallel
    biases (`split_of(name)` names those "row"), not the embeddings, ln_f or lm_head, which see
    the whole sequence (read the TPBlock and the model's entry and exit above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            dist.all_reduce(p.grad)
''',
    },
    'gathers_the_batch_dim': {
        'sequence_parallel': '''
class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        parts = [torch.empty_like(x) for _ in range(t)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)  # the batch dimension, not the sequence

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        out = torch.empty_like(grad.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in grad.chunk(t, dim=1)])
        return out


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
        return out

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        parts = [torch.empty_like(grad) for _ in range(t)]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, dim=1)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard: the blocks' LayerNorm weights and biases and the row-parallel
    biases (`split_of(name)` names those "row"), not the embeddings, ln_f or lm_head, which see
    the whole sequence (read the TPBlock and the model's entry and exit above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if in_blocks and (split_of(name) is None or row_bias) and p.grad is not None:
            dist.all_reduce(p.grad)
''',
    },
    'sums_whole_sequence_params_too': {
        'sequence_parallel': '''
class AllGatherSequence(torch.autograd.Function):
    """g under sequence parallelism: forward, all-gather the sequence shards (dim 1) into the
    whole sequence; backward, reduce-scatter the gradient back to this rank's shard."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        parts = [torch.empty_like(x) for _ in range(t)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        out = torch.empty_like(grad.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in grad.chunk(t, dim=1)])
        return out


class ReduceScatterSequence(torch.autograd.Function):
    """ḡ under sequence parallelism: forward, reduce-scatter the partial sums into this rank's
    sequence shard; backward, all-gather the gradient of the whole sequence."""

    @staticmethod
    def forward(ctx, x):
        t = dist.get_world_size()
        out = torch.empty_like(x.chunk(t, dim=1)[0]).contiguous()
        dist.reduce_scatter(out, [c.contiguous() for c in x.chunk(t, dim=1)])
        return out

    @staticmethod
    def backward(ctx, grad):
        t = dist.get_world_size()
        parts = [torch.empty_like(grad) for _ in range(t)]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, dim=1)


def sync_sequence_parallel_grads(model):
    """After backward: sum over the ranks the gradient of every replicated parameter that saw only
    this rank's sequence shard: the blocks' LayerNorm weights and biases and the row-parallel
    biases (`split_of(name)` names those "row"), not the embeddings, ln_f or lm_head, which see
    the whole sequence (read the TPBlock and the model's entry and exit above)."""
    for name, p in model.named_parameters():
        in_blocks = name.startswith("blocks.")
        row_bias = split_of(name) == "row" and name.endswith(".bias")
        if (split_of(name) is None or row_bias) and p.grad is not None:  # embeddings, ln_f and lm_head too
            dist.all_reduce(p.grad)
''',
    },
})

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("05_tensor_parallel", returns_nothing=("sync_sequence_parallel_grads",)))
