"""Plausible wrong answers for 06_moe. Each mutant replaces whole solution cells (keyed by grade_id);
the graded cell ``<grade_id>_tests`` of every replaced cell must then lose points.

The issue's list: softmax over all experts where the weights must be renormalised over the top-k,
the balance loss without the N factor, dropping the first tokens (keeping the last) where the
spec keeps the first, a combine that forgets the gate weight, split sizes not swapped on the way
back, an all-to-all replaced by all-gathers. And the lazy versions a check must not let through:
FLOPs counted with one FFN matrix, causal attention or per-layer logits; noise without softplus;
TopK(Softmax) renormalised; experts sorted by index; f computed from the probabilities (a
gradient through f) or over tokens instead of assignments; capacity rounded down or without k;
token-major dropping; every expert run on every token; dropped tokens still computed; a shared
expert scaled or left out of the active count; the router left out of the total; dropped tokens
sent over the network anyway; a rank that skips its idle experts (its backward all-to-all then
never happens: a deadlock the check must turn into lost points); the counts exchanged as int32
where the spec says int64 (the values still come out right).
"""
import equals_everything
from mutation_run import solution_with


def _solution_with(grade_id: str, *changes: str) -> str:
    return solution_with("06_moe", grade_id, *changes)


MUTANTS = {
    'conventions': {
        'flops': '''
def flop_shares(h, s, n_layer, vocab):
    """Shares of a transformer's matmul FLOPs: {"mha", "ffn", "attn", "logit"}, summing to 1."""
    mha, ffn, attn = 8 * h * h * n_layer, 8 * h * h * n_layer, 4 * s * h * n_layer
    logit = 2 * h * vocab
    total = mha + ffn + attn + logit
    return {"mha": mha / total, "ffn": ffn / total, "attn": attn / total, "logit": logit / total}
''',
        'gating': _solution_with(
            'gating',
            '    if softmax_first:\n'
            '        weights, experts = probs.topk(k, dim=-1)\n'
            '    else:\n'
            '        top, experts = logits.topk(k, dim=-1)\n'
            '        weights = top.softmax(dim=-1)\n',
            '    weights, experts = probs.topk(k, dim=-1)  # one convention for both\n'),
        'balance': _solution_with(
            'balance',
            '    return alpha * n_experts * (f * probs.mean(dim=0)).sum()\n',
            '    return alpha * (f * probs.mean(dim=0)).sum()\n'),
        'capacity': '''
def expert_capacity(n_tokens, n_experts, capacity_factor, k=1):
    """ceil(capacity_factor * k * n_tokens / n_experts), as an int."""
    return int(capacity_factor * k * n_tokens / n_experts)


def keep_mask(experts, n_experts, capacity):
    """Bool (T, k): which assignments the experts keep, first come, first served: every token's
    first choice in token order, then every second choice, ..."""
    n_tokens, k = experts.shape
    order = experts.t().reshape(-1).flip(0)  # last come, first served
    position = F.one_hot(order, n_experts).cumsum(dim=0).gather(1, order[:, None]).squeeze(1) - 1
    return (position < capacity).flip(0).reshape(k, n_tokens).t()
''',
        'layer': _solution_with(
            'layer',
            '            y = y.index_add(0, tokens, weights[tokens, slots, None] * expert(x[tokens]))\n',
            '            y = y.index_add(0, tokens, expert(x[tokens]))\n'),
        'shared': _solution_with(
            'shared',
            '    return router + (n_experts + n_shared) * expert, router + (k + n_shared) * expert\n',
            '    return router + (n_experts + n_shared) * expert, router + k * expert\n'),
        'expert_parallel': _solution_with(
            'expert_parallel',
            '        out = grad.new_empty(sum(send_counts), *grad.shape[1:])\n'
            '        dist.all_to_all_single(out, grad.contiguous(), output_split_sizes=send_counts, input_split_sizes=recv_counts)\n',
            '        out = grad.new_empty(sum(recv_counts), *grad.shape[1:])\n'
            '        dist.all_to_all_single(out, grad.contiguous(), output_split_sizes=recv_counts, input_split_sizes=send_counts)\n'),
    },
    'lazy': {
        'flops': '''
def flop_shares(h, s, n_layer, vocab):
    """Shares of a transformer's matmul FLOPs: {"mha", "ffn", "attn", "logit"}, summing to 1."""
    mha, ffn, attn = 8 * h * h * n_layer, 16 * h * h * n_layer, 2 * s * h * n_layer
    logit = 2 * h * vocab
    total = mha + ffn + attn + logit
    return {"mha": mha / total, "ffn": ffn / total, "attn": attn / total, "logit": logit / total}
''',
        'gating': _solution_with(
            'gating',
            '        logits = logits + noise * F.softplus(x @ w_noise)\n',
            '        logits = logits + noise * (x @ w_noise)\n',
            '        weights, experts = probs.topk(k, dim=-1)\n',
            '        weights, experts = probs.topk(k, dim=-1)\n'
            '        weights = weights / weights.sum(dim=-1, keepdim=True)\n'),
        'balance': _solution_with(
            'balance',
            '    f = torch.bincount(experts.reshape(-1), minlength=n_experts).to(probs.dtype) / experts.numel()\n',
            '    f = probs.mean(dim=0)\n'),
        'capacity': _solution_with(
            'capacity',
            '    order = experts.t().reshape(-1)  # choice-major\n',
            '    order = experts.reshape(-1)  # token-major\n',
            '    return (position < capacity).reshape(k, n_tokens).t()\n',
            '    return (position < capacity).reshape(n_tokens, k)\n'),
        'layer': _solution_with(
            'layer',
            '    for e, expert in enumerate(moe.experts):\n',
            '    for e, expert in enumerate(moe.experts):\n'
            '        everyone = expert(x)  # compute for all tokens, keep the routed ones\n',
            '        if len(tokens):\n'
            '            y = y.index_add(0, tokens, weights[tokens, slots, None] * expert(x[tokens]))\n',
            '        y = y.index_add(0, tokens, weights[tokens, slots, None] * everyone[tokens])\n'),
        'shared': _solution_with(
            'shared',
            '        y = y + moe.shared(x)\n',
            '        y = y + moe.shared(x) * 0.5  # halfway between shared and routed\n'),
        'expert_parallel': '''
class AllToAll(torch.autograd.Function):
    """Sends send_counts[q] rows of x to rank q; returns the rows received, recv_counts[q] from
    rank q. Backward: each received row's gradient goes back to the rank and row it came from."""

    @staticmethod
    def forward(ctx, x, send_counts, recv_counts):
        ctx.counts = send_counts, recv_counts
        out = x.new_empty(sum(recv_counts), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), output_split_sizes=recv_counts, input_split_sizes=send_counts)
        return out

    @staticmethod
    def backward(ctx, grad):
        send_counts, recv_counts = ctx.counts
        out = grad.new_empty(sum(send_counts), *grad.shape[1:])
        dist.all_to_all_single(out, grad.contiguous(), output_split_sizes=send_counts, input_split_sizes=recv_counts)
        return out, None, None


def ep_moe_layer(shard, x, noise=None):
    """The MoE layer on this rank's tokens x, experts spread over the ranks: (y, balance)."""
    cfg, world = shard.config, shard.world
    n_experts = cfg.n_experts
    per = n_experts // world
    w_noise = None if shard.noise is None else shard.noise.weight.t()
    logits = gate_logits(x, shard.router.weight.t(), w_noise, noise)
    weights, experts, probs = top_k_gating(logits, cfg.k, cfg.softmax_first)
    keep = keep_mask(experts, n_experts, expert_capacity(x.shape[0], n_experts, cfg.capacity_factor, cfg.k))
    tokens, slots = torch.nonzero(keep, as_tuple=True)
    order = torch.argsort(experts[tokens, slots], stable=True)  # grouped by expert, hence by rank
    tokens, slots = tokens[order], slots[order]

    # everyone gets everything: gather the tokens, compute my experts' part, sum over ranks
    contribution = torch.zeros_like(x)
    for e in range(shard.first, shard.first + per):
        t, j = torch.nonzero((experts == e) & keep, as_tuple=True)
        contribution = contribution.index_add(0, t, weights[t, j, None] * shard.expert(e)(x[t]))
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach())
    y = x + contribution  # only this rank's experts: wrong, and made of all-gathers
    return y, load_balancing_loss(probs, experts, alpha=1.0)
''',
    },
    'subtle': {
        'flops': _solution_with(
            'flops',
            '    logit = 2 * h * vocab\n',
            '    logit = 2 * h * vocab * n_layer\n'),
        'gating': _solution_with(
            'gating',
            '    return weights, experts, probs\n',
            '    experts, order = experts.sort(dim=-1)\n'
            '    return weights.gather(-1, order), experts, probs\n'),
        'balance': '''
def load_balancing_loss(probs, experts, alpha=0.01):
    """Switch's alpha * E * sum_i f_i * P_i: f_i the fraction of the T*k assignments that chose
    expert i, P_i the mean of probs[:, i]. The gradient flows through P only."""
    n_experts = probs.shape[-1]
    f = torch.bincount(experts.reshape(-1), minlength=n_experts).to(probs.dtype) / experts.shape[0]
    return alpha * n_experts * (f * probs.mean(dim=0)).sum()
''',
        'capacity': _solution_with(
            'capacity',
            '    return math.ceil(capacity_factor * k * n_tokens / n_experts)\n',
            '    return math.ceil(capacity_factor * n_tokens / n_experts)\n'),
        'layer': _solution_with(
            'layer',
            '        tokens, slots = torch.nonzero((experts == e) & keep, as_tuple=True)\n',
            '        tokens, slots = torch.nonzero(experts == e, as_tuple=True)\n'),
        'shared': _solution_with(
            'shared',
            '    router = d_model * n_experts\n',
            '    router = 0\n'),
        'expert_parallel': _solution_with(
            'expert_parallel',
            '    tokens, slots = torch.nonzero(keep, as_tuple=True)\n',
            '    tokens, slots = torch.nonzero(torch.ones_like(keep), as_tuple=True)\n',
            '    y = x.index_add(0, tokens, weights[tokens, slots, None] * back)\n',
            '    y = x.index_add(0, tokens, (weights * keep)[tokens, slots, None] * back)\n'),
    },
    'skips_idle_experts': {
        'expert_parallel': _solution_with(
            'expert_parallel',
            '        out = out.index_add(0, mine, shard.expert(shard.first + i)(rows[mine]))\n',
            '        if len(mine):\n'
            '            out = out.index_add(0, mine, shard.expert(shard.first + i)(rows[mine]))\n'),
    },
    # Self-drawn noise from the wrong distribution: uniform on [0, 1) (rand for randn).
    'noise_uniform': {
        'gating': '''
def gate_logits(x, w_gate, w_noise=None, noise=None):
    logits = x @ w_gate
    if w_noise is not None:
        if noise is None:
            noise = torch.rand(logits.shape, dtype=logits.dtype)
        logits = logits + noise * F.softplus(x @ w_noise)
    return logits


def top_k_gating(logits, k, softmax_first=False):
    probs = logits.softmax(dim=-1)
    if softmax_first:
        weights, experts = probs.topk(k, dim=-1)
    else:
        top, experts = logits.topk(k, dim=-1)
        weights = top.softmax(dim=-1)
    return weights, experts, probs
''',
    },
    # One draw per expert, shared by every token.
    'noise_shared_by_tokens': {
        'gating': '''
def gate_logits(x, w_gate, w_noise=None, noise=None):
    logits = x @ w_gate
    if w_noise is not None:
        if noise is None:
            noise = torch.randn(logits.shape[-1], dtype=logits.dtype)
        logits = logits + noise * F.softplus(x @ w_noise)
    return logits


def top_k_gating(logits, k, softmax_first=False):
    probs = logits.softmax(dim=-1)
    if softmax_first:
        weights, experts = probs.topk(k, dim=-1)
    else:
        top, experts = logits.topk(k, dim=-1)
        weights = top.softmax(dim=-1)
    return weights, experts, probs
''',
    },
    'counts_int32': {
        'expert_parallel': _solution_with(
            'expert_parallel', "per_expert = torch.bincount(experts[tokens, slots], minlength=n_experts)",
            "per_expert = torch.bincount(experts[tokens, slots], minlength=n_experts).int()"),
    },
    # Every expert run on every token and masked by a dense gate matrix: right values from E times
    # the experts' work (moe_layer's checks catch that; shared_moe_layer's once did not).
    'shared_layer_dense': {
        'shared': _solution_with(
            'shared',
            '    y, balance = moe_layer(moe, x, noise)\n',
            '    cfg = moe.config\n'
            '    w_noise = None if moe.noise is None else moe.noise.weight.t()\n'
            '    weights, experts, probs = top_k_gating(gate_logits(x, moe.router.weight.t(), w_noise, noise), cfg.k, cfg.softmax_first)\n'
            '    keep = keep_mask(experts, cfg.n_experts, expert_capacity(x.shape[0], cfg.n_experts, cfg.capacity_factor, cfg.k))\n'
            '    gate = torch.zeros(x.shape[0], cfg.n_experts, dtype=x.dtype).scatter_add(1, experts, weights * keep)\n'
            '    outs = torch.stack([expert(x) for expert in moe.experts], dim=1)  # (T, E, h): every expert, every token\n'
            '    y, balance = x + (gate[..., None] * outs).sum(1), load_balancing_loss(probs, experts, alpha=1.0)\n'),
    },
}


# Right answers written another way than the solution, where the spec allows it: each must keep
# every point (tests/mutation_run.py). Rows gathered slot-major (every token's first choice before
# any second choice) instead of token-major, experts visited in reverse, the residual added after
# the experts' sum: the sums come out in another order, and on skewed routing a gradient near
# Adam's eps once turned such a rounding difference into a failed check.
EQUIVALENTS = {
    'layer_slot_major_experts_reversed': {
        'layer': _solution_with(
            'layer',
            "    y = x\n    for e, expert in enumerate(moe.experts):\n"
            "        tokens, slots = torch.nonzero((experts == e) & keep, as_tuple=True)",
            "    y = torch.zeros_like(x)\n    for e, expert in reversed(list(enumerate(moe.experts))):\n"
            "        slots, tokens = torch.nonzero(((experts == e) & keep).t(), as_tuple=True)",
            "    return y, load_balancing_loss(probs, experts, alpha=1.0)",
            "    return x + y, load_balancing_loss(probs, experts, alpha=1.0)"),
    },
    'expert_parallel_slot_major_experts_reversed': {
        'expert_parallel': _solution_with(
            'expert_parallel',
            "    tokens, slots = torch.nonzero(keep, as_tuple=True)\n",
            "    slots, tokens = torch.nonzero(keep.t(), as_tuple=True)\n",
            "for i in range(per):",
            "for i in reversed(range(per)):",
            "    y = x.index_add(0, tokens, weights[tokens, slots, None] * back)",
            "    y = x + torch.zeros_like(x).index_add(0, tokens, weights[tokens, slots, None] * back)"),
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("06_moe"))
