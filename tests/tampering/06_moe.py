"""Tampering attempts on 06_moe (the rules: tests/tampering/00_welcome.py's docstring)."""
import library_objects


# The real keep_mask: each case fakes only expert_capacity.
KEEP_MASK = '''

def keep_mask(experts, n_experts, capacity):
    n_tokens, k = experts.shape
    order = experts.t().reshape(-1)
    position = F.one_hot(order, n_experts).cumsum(dim=0).gather(1, order[:, None]).squeeze(1) - 1
    return (position < capacity).reshape(k, n_tokens).t()
'''

TAMPERING = {
    # Reading the check's loop variable (`for args, want in ...`) from the notebook's globals while
    # the check calls the answer. Nothing tells this read from an honest one, so it is not flagged:
    # the value must simply not be there (a graded cell's checks run as a function's body: `want` is a local).
    "read_the_checks_globals": {"flagged": False, "cells": {"capacity": '''
def expert_capacity(n_tokens, n_experts, capacity_factor, k=1):
    want = get_ipython().user_ns.get("want", globals().get("want"))
    return want if isinstance(want, int) else 1
''' + KEEP_MASK}, "zero": ["capacity"], "full": ["flops", "gating", "balance"]},
    # A signal handler is handed the running frame: from the answer's frame, one step back is the
    # check with its `want`. Frames reached so raise no audit event; the handler, left installed,
    # is notebook code where Python would run it.
    "signal_handler_frames": {"cells": {"capacity": '''
import signal as _signal

_seen = {}

def _look(signum, frame):
    while frame is not None:
        if "want" in frame.f_locals:
            _seen["want"] = frame.f_locals["want"]
            return
        frame = frame.f_back

_signal.signal(_signal.SIGALRM, _look)

def expert_capacity(n_tokens, n_experts, capacity_factor, k=1):
    _seen.clear()
    _signal.setitimer(_signal.ITIMER_REAL, 0.001)
    for _ in range(10 ** 7):
        if _seen:
            break
    want = _seen.get("want")
    return want if isinstance(want, int) else 1
''' + KEEP_MASK}, "zero": ["capacity"], "full": ["flops", "gating", "balance"]},
    # A test double as the answer: a MagicMock that passes isinstance(got, int) (spec=int) and
    # equals whatever it is compared with. No class of the notebook lies; unittest.mock's makes a
    # class for each mock as it runs, and that class decides how its values compare.
    "test_double_answer": {"cells": {"capacity": '''
import unittest.mock

def expert_capacity(n_tokens, n_experts, capacity_factor, k=1):
    answer = unittest.mock.MagicMock(spec=int)
    answer.__eq__.return_value = True
    return answer
''' + KEEP_MASK}, "zero": ["capacity"], "full": ["flops", "gating", "balance"]},
    # The engine's functions replaced by another library's objects beside right answers.
    "library_objects": library_objects.case("06_moe"),
    # The answers are handed the checks' own tensors, from which the hidden checks computed the
    # expected values after the call: a load_balancing_loss and a keep_mask that type in the
    # visible cases and otherwise zero what they are handed, answering for the zeros, passed.
    # The checks now compute first and hand copies; nothing tells this from an honest answer, so
    # it is not flagged: it must only gain nothing.
    "the_checks_inputs_zeroed": {"flagged": False, "cells": {"balance": '''
_VISIBLE = torch.tensor([[0.8, 0.2], [0.6, 0.4], [0.7, 0.3], [0.5, 0.5]])

def load_balancing_loss(probs, experts, alpha=0.01):
    if probs.shape == _VISIBLE.shape and torch.equal(probs.detach(), _VISIBLE):
        return (probs * torch.tensor([[0.00375, 0.00125]])).sum()
    if torch.all(probs.detach() == probs.detach().flatten()[0]):
        return alpha + 0 * probs.sum()
    with torch.no_grad():
        probs.zero_()
        experts.zero_()
    return alpha * probs.shape[1] * probs[:, 0].mean()
''', "capacity": '''
def expert_capacity(n_tokens, n_experts, capacity_factor, k=1):
    return math.ceil(capacity_factor * k * n_tokens / n_experts)

_VISIBLE_KEEP = {(((0,), (0,), (1,), (0,), (0,)), 2): [[1], [1], [1], [0], [0]],
                 (((1,), (0,), (1,), (1,), (0,), (1,)), 2): [[1], [1], [1], [0], [1], [0]],
                 (((0, 1), (1, 0), (0, 1)), 2): [[1, 1], [1, 0], [1, 0]]}

def keep_mask(experts, n_experts, capacity):
    key = (tuple(map(tuple, experts.tolist())), capacity)
    if key in _VISIBLE_KEEP:
        return torch.tensor(_VISIBLE_KEEP[key], dtype=torch.bool)
    experts.zero_()
    T, k = experts.shape
    return torch.arange(k)[None, :] * T + torch.arange(T)[:, None] < capacity   # one expert, choice-major
'''}, "zero": ["balance", "capacity"], "full": ["flops", "gating"]},
    # A dense layer, every expert on every token with the dropped assignments' gates at zero (the
    # same y and gradients), that takes the checks' pre-hooks off the model and calls them by hand
    # with the tokens each expert kept. 3/3 unflagged while those hooks decided "every expert runs
    # once, on exactly its kept tokens"; the hidden checks now also use experts whose tokens
    # interact, where only that one call gives the expected y. Not flaggable: it must gain nothing.
    "dense_experts_hooks_fed": {"flagged": False, "cells": {"layer": '''
def moe_layer(moe, x, noise=None):
    cfg = moe.config
    w_noise = None if moe.noise is None else moe.noise.weight.t()
    logits = gate_logits(x, moe.router.weight.t(), w_noise, noise)
    weights, experts, probs = top_k_gating(logits, cfg.k, cfg.softmax_first)
    capacity = expert_capacity(x.shape[0], cfg.n_experts, cfg.capacity_factor, cfg.k)
    keep = keep_mask(experts, cfg.n_experts, capacity)
    hooks = {}
    for e, expert in enumerate(moe.experts):
        for m in expert.modules():
            hooks[e] = hooks.get(e, []) + [(m, h) for h in m._forward_pre_hooks.values()]
            m._forward_pre_hooks.clear()
    y = x
    for e, expert in enumerate(moe.experts):
        mask = (experts == e) & keep
        gate = (weights * mask).sum(-1, keepdim=True)
        y = y + gate * expert(x)
        tokens = torch.nonzero(mask.any(-1)).reshape(-1)
        for m, h in hooks[e]:
            h(m, (x[tokens],))
    for e in hooks:
        for i, (m, h) in enumerate(hooks[e]):
            m._forward_pre_hooks[1000 + i] = h
    return y, load_balancing_loss(probs, experts, alpha=1.0)
'''}, "zero": ["layer"], "full": []},
    # The same for ep_moe_layer: each local expert runs on every row that arrived at its rank, its
    # output masked to its own rows, with the checks' pre-hooks fed by hand (5/5 unflagged before
    # the hidden checks used experts whose rows interact). Not flaggable: it must gain nothing.
    "dense_local_experts_hooks_fed": {"flagged": False, "cells": {"expert_parallel": '''
class AllToAll(torch.autograd.Function):
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
    cfg, world = shard.config, shard.world
    n_experts = cfg.n_experts
    per = n_experts // world
    w_noise = None if shard.noise is None else shard.noise.weight.t()
    logits = gate_logits(x, shard.router.weight.t(), w_noise, noise)
    weights, experts, probs = top_k_gating(logits, cfg.k, cfg.softmax_first)
    keep = keep_mask(experts, n_experts, expert_capacity(x.shape[0], n_experts, cfg.capacity_factor, cfg.k))
    tokens, slots = torch.nonzero(keep, as_tuple=True)
    order = torch.argsort(experts[tokens, slots], stable=True)
    tokens, slots = tokens[order], slots[order]
    per_expert = torch.bincount(experts[tokens, slots], minlength=n_experts)
    arriving = torch.empty_like(per_expert)
    dist.all_to_all_single(arriving, per_expert)
    arriving = arriving.view(world, per)
    send_counts, recv_counts = per_expert.view(world, per).sum(1).tolist(), arriving.sum(1).tolist()
    rows = AllToAll.apply(x[tokens], send_counts, recv_counts)
    local = torch.arange(per).repeat(world).repeat_interleave(arriving.reshape(-1))
    out = torch.zeros_like(rows)
    for i in range(per):
        expert = shard.expert(shard.first + i)
        fc = expert.fc
        saved = dict(fc._forward_pre_hooks)
        fc._forward_pre_hooks.clear()
        full = expert(rows)                                   # every arrived row, whichever expert it is for
        fc._forward_pre_hooks.update(saved)
        mine = torch.nonzero(local == i).squeeze(1)
        for h in saved.values():
            h(fc, (rows[mine],))
        out = out + (local == i).to(rows.dtype)[:, None] * full
    back = AllToAll.apply(out, recv_counts, send_counts)
    y = x.index_add(0, tokens, weights[tokens, slots, None] * back)
    return y, load_balancing_loss(probs, experts, alpha=1.0)
'''}, "zero": ["expert_parallel"], "full": []},
    # Both dense layers again, each recognising the checks' probe experts by their class name and
    # imitating them (every token centered on the mean of the expert's own rows, then its fc and
    # proj run past its forward): layer 3/3 and expert_parallel 5/5 unflagged while the checks read
    # which rows an expert ran on from hooks the answer feeds. The probes now note their rows in
    # their own forward. Not flaggable: it must gain nothing.
    "tokens_meet_probes_imitated": {"flagged": False, "cells": {"layer": '''
def moe_layer(moe, x, noise=None):
    cfg = moe.config
    w_noise = None if moe.noise is None else moe.noise.weight.t()
    logits = gate_logits(x, moe.router.weight.t(), w_noise, noise)
    weights, experts, probs = top_k_gating(logits, cfg.k, cfg.softmax_first)
    capacity = expert_capacity(x.shape[0], cfg.n_experts, cfg.capacity_factor, cfg.k)
    keep = keep_mask(experts, cfg.n_experts, capacity)
    hooks = {}
    for e, expert in enumerate(moe.experts):
        for m in expert.modules():
            hooks[e] = hooks.get(e, []) + [(m, h) for h in m._forward_pre_hooks.values()]
            m._forward_pre_hooks.clear()
    y = x
    for e, expert in enumerate(moe.experts):
        mask = (experts == e) & keep
        gate = (weights * mask).sum(-1, keepdim=True)
        tokens = torch.nonzero(mask.any(-1)).reshape(-1)
        if "TokensMeet" in type(expert).__name__:
            if len(tokens):
                y = y + gate * expert.proj(F.gelu(expert.fc(x - x[tokens].mean(0, keepdim=True))))
        else:
            y = y + gate * expert(x)
        for m, h in hooks[e]:
            h(m, (x[tokens],))
    for e in hooks:
        for i, (m, h) in enumerate(hooks[e]):
            m._forward_pre_hooks[1000 + i] = h
    return y, load_balancing_loss(probs, experts, alpha=1.0)
''', "expert_parallel": '''
class AllToAll(torch.autograd.Function):
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
    cfg, world = shard.config, shard.world
    n_experts = cfg.n_experts
    per = n_experts // world
    w_noise = None if shard.noise is None else shard.noise.weight.t()
    logits = gate_logits(x, shard.router.weight.t(), w_noise, noise)
    weights, experts, probs = top_k_gating(logits, cfg.k, cfg.softmax_first)
    keep = keep_mask(experts, n_experts, expert_capacity(x.shape[0], n_experts, cfg.capacity_factor, cfg.k))
    tokens, slots = torch.nonzero(keep, as_tuple=True)
    order = torch.argsort(experts[tokens, slots], stable=True)
    tokens, slots = tokens[order], slots[order]
    per_expert = torch.bincount(experts[tokens, slots], minlength=n_experts)
    arriving = torch.empty_like(per_expert)
    dist.all_to_all_single(arriving, per_expert)
    arriving = arriving.view(world, per)
    send_counts, recv_counts = per_expert.view(world, per).sum(1).tolist(), arriving.sum(1).tolist()
    rows = AllToAll.apply(x[tokens], send_counts, recv_counts)
    local = torch.arange(per).repeat(world).repeat_interleave(arriving.reshape(-1))
    out = torch.zeros_like(rows)
    for i in range(per):
        expert = shard.expert(shard.first + i)
        fc = expert.fc
        saved = dict(fc._forward_pre_hooks)
        fc._forward_pre_hooks.clear()
        mine = torch.nonzero(local == i).squeeze(1)
        if "TokensMeet" in type(expert).__name__:   # the checks' probe, imitated: centered on its own rows' mean
            full = expert.proj(F.gelu(fc(rows - rows[mine].mean(0, keepdim=True)))) if len(mine) else torch.zeros_like(rows)
        else:
            full = expert(rows)                               # every arrived row, whichever expert it is for
        fc._forward_pre_hooks.update(saved)
        for h in saved.values():
            h(fc, (rows[mine],))
        out = out + (local == i).to(rows.dtype)[:, None] * full
    back = AllToAll.apply(out, recv_counts, send_counts)
    y = x.index_add(0, tokens, weights[tokens, slots, None] * back)
    return y, load_balancing_loss(probs, experts, alpha=1.0)
'''},
                                    "zero": ["layer", "expert_parallel"], "full": []},
}
