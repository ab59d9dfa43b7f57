"""Plausible wrong answers for 03_zero. Each mutant replaces whole solution cells (keyed by
grade_id); the graded cell ``<grade_id>_tests`` of every replaced cell must then lose points."""

import equals_everything
from mutation_run import solution_with


def _solution_with(grade_id: str, *changes: str) -> str:
    return solution_with("03_zero", grade_id, *changes)


# ZeRO-1 stepping a full Adam kept in a closure beside the shard's Adam the checks read.
_FULL_ADAM_IN_A_CLOSURE = '''
class Zero1Adam:
    """ZeRO stage 1 (claimed): the shard's Adam for the checks, a full Adam over every parameter in a closure."""

    def __init__(self, model, lr=1e-2):
        self.params = list(model.parameters())
        self.shard = nn.Parameter(shard_of(flatten(self.params)))
        self.adam = torch.optim.Adam([self.shard], lr=lr)
        def make(params):
            full = torch.optim.Adam(params, lr=lr)   # full Adam state on every rank, kept in a closure
            return lambda: full.step()
        self._full_step = make(self.params)

    def step(self):
        flat = flatten(p.grad for p in self.params)
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        self.shard.grad = shard_of(flat)
        self.adam.step()
        load_flat([p.grad for p in self.params], flat)
        self._full_step()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.shard.grad = None
'''

MUTANTS = {
    # Each answer computes the right numbers somewhere, but is not ZeRO.
    "full_update_keep_grads_never_free_no_prefetch": {
        "memory_formula": '''
def zero_memory_bytes(psi, k, n_d, stage, param_bytes=2, grad_bytes=2):
    params, grads, optimizer = param_bytes * psi, grad_bytes * psi, k * psi
    if stage == 0:
        return params + grads + optimizer
    if stage in (1, 2):                       # forgot that stage 2 shards the gradients too
        return params + grads + optimizer / n_d
    if stage == 3:
        return (params + grads + optimizer) / n_d
    raise ValueError(stage)
''',
        "zero1": '''
class Zero1Adam:
    def __init__(self, model, lr=1e-2):
        self.params = list(model.parameters())
        self.adam = torch.optim.Adam(self.params, lr=lr)   # full Adam state on every rank

    def step(self):
        for p in self.params:                               # every rank updates everything
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        self.adam.step()

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
''',
        "zero2": '''
class Zero2Adam:
    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        for layer, shard in zip(self.layers, self.shards):
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, layer, shard))

    def _on_grad(self, layer, shard, param):
        params = list(layer.parameters())
        if any(p.grad is None for p in params):
            return
        grad = reduce_scatter_mean(flatten(p.grad for p in params))
        shard.grad = grad if shard.grad is None else shard.grad + grad
        # forgot to free the full gradients

    def step(self):
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            load_flat(list(layer.parameters()), gather_shards(shard))

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
        for layer in self.layers:
            layer.zero_grad(set_to_none=True)
''',
        "zero3": '''
class ShardedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, full, shapes, index):
        w, b = unflatten(full, shapes)
        ctx.save_for_backward(x, shard)
        ctx.shapes = shapes
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        w, _ = unflatten(gather_shards(shard), ctx.shapes)
        grad_flat = flatten([grad_y.T @ x, grad_y.sum(0)])
        return grad_y @ w, reduce_scatter_mean(grad_flat), None, None, None


class Zero3MLP(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.shapes = [[p.shape for p in layer.parameters()] for layer in mlp.layers]
        self.shards = nn.ParameterList(nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in mlp.layers)

    def forward(self, x):
        last = len(self.shards) - 1
        self.gathered = []                     # every gathered layer kept: never freed
        for i, shard in enumerate(self.shards):
            self.gathered.append(gather_shards(shard))
            x = ShardedLinear.apply(x, shard, self.gathered[i], self.shapes[i], i)
            if i < last:
                x = F.gelu(x)
        return x
''',
        "prefetch": '''
class Zero3PrefetchMLP(Zero3MLP):
    def forward(self, x):
        last = len(self.shards) - 1
        for i, shard in enumerate(self.shards):
            full = gather_shards(shard)        # gathered when needed: no prefetch
            with region(f"forward layer {i}"):
                x = ShardedLinear.apply(x, shard, full, self.shapes[i], i)
                if i < last:
                    x = F.gelu(x)
            free(full, f"layer {i}")
        return x
''',
    },
    # Right ideas, wrong details: offsets, traffic, timing, lifetimes.
    "wrong_offset_three_psi_grads_in_step_free_late_gather_all": {
        "memory_formula": '''
def zero_memory_bytes(psi, k, n_d, stage, param_bytes=2, grad_bytes=2):
    params, grads, optimizer = param_bytes * psi, grad_bytes * psi, k * psi
    if stage == 0:
        return params + grads + optimizer
    if stage == 1:
        return params + grads + optimizer / n_d
    if stage in (2, 3):                       # forgot that stage 3 shards the parameters
        return params + (grads + optimizer) / n_d
    raise ValueError(stage)
''',
        "shards": '''
def shard_of(flat):
    world, rank = dist.get_world_size(), dist.get_rank()
    s = math.ceil(flat.numel() / world)
    padded = F.pad(flat, (0, s * world - flat.numel()))
    start = rank * (flat.numel() // world)   # offset from the unpadded size
    return padded[start:start + s].clone()


def gather_shards(shard):
    full = shard.new_empty(dist.get_world_size() * shard.numel())
    dist.all_gather_single(full, shard.detach())
    return full


def reduce_scatter_mean(flat):
    world = dist.get_world_size()
    s = math.ceil(flat.numel() / world)
    padded = F.pad(flat.detach(), (0, s * world - flat.numel()))
    shard = flat.new_empty(s)
    dist.reduce_scatter_single(shard, padded)
    return shard / world
''',
        "zero1": '''
class Zero1Adam:
    def __init__(self, model, lr=1e-2):
        self.params = list(model.parameters())
        self.shard = nn.Parameter(shard_of(flatten(self.params)))
        self.adam = torch.optim.Adam([self.shard], lr=lr)

    def step(self):
        grad = flatten(p.grad for p in self.params)
        dist.all_reduce(grad)                 # all-reduce + all-gather: 3Ψ, not 2Ψ
        self.shard.grad = shard_of(grad) / dist.get_world_size()
        self.adam.step()
        load_flat(self.params, gather_shards(self.shard))

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.shard.grad = None
''',
        "zero2": '''
class Zero2Adam:
    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)

    def step(self):
        for layer, shard in zip(self.layers, self.shards):   # reduce-scatter at the step: that is ZeRO-1
            params = list(layer.parameters())
            shard.grad = reduce_scatter_mean(flatten(p.grad for p in params))
            for p in params:
                p.grad = None
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            load_flat(list(layer.parameters()), gather_shards(shard))

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
''',
        "zero3": '''
class ShardedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, full, shapes, index):
        w, b = unflatten(full, shapes)
        ctx.save_for_backward(x, shard)
        ctx.shapes, ctx.index = shapes, index
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        full = gather_shards(shard)
        w, _ = unflatten(full, ctx.shapes)
        grad_x = grad_y @ w
        grad_flat = flatten([grad_y.T @ x, grad_y.sum(0)])
        free(full, f"layer {ctx.index}")
        return grad_x, reduce_scatter_mean(grad_flat), None, None, None


class Zero3MLP(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.shapes = [[p.shape for p in layer.parameters()] for layer in mlp.layers]
        self.shards = nn.ParameterList(nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in mlp.layers)

    def forward(self, x):
        last, gathered = len(self.shards) - 1, []
        for i, shard in enumerate(self.shards):
            full = gather_shards(shard)
            gathered.append(full)
            with region(f"forward layer {i}"):
                x = ShardedLinear.apply(x, shard, full, self.shapes[i], i)
                if i < last:
                    x = F.gelu(x)
        for i, full in enumerate(gathered):   # freed, but only once the whole forward is done
            free(full, f"layer {i}")
        return x
''',
        "prefetch": '''
class Zero3PrefetchMLP(Zero3MLP):
    def forward(self, x):
        world, last = dist.get_world_size(), len(self.shards) - 1
        pending = []
        for shard in self.shards:              # every layer's gather issued up front
            full = shard.new_empty(world * shard.numel())
            pending.append((full, dist.all_gather_single(full, shard.detach(), async_op=True)))
        for i, shard in enumerate(self.shards):
            full, handle = pending[i]
            handle.wait()
            with region(f"forward layer {i}"):
                x = ShardedLinear.apply(x, shard, full, self.shapes[i], i)
                if i < last:
                    x = F.gelu(x)
            free(full, f"layer {i}")
        return x
''',
    },
    # Each trains like one process under Adam, which hides a gradient P times too large.
    "sum_not_mean_wait_for_whole_model": {
        "zero1": '''
class Zero1Adam:
    def __init__(self, model, lr=1e-2):
        self.params = list(model.parameters())
        self.shard = nn.Parameter(shard_of(flatten(self.params)))
        self.adam = torch.optim.Adam([self.shard], lr=lr)

    def step(self):
        full = flatten(p.grad for p in self.params)
        world, s = dist.get_world_size(), self.shard.numel()
        self.shard.grad = torch.empty(s)
        dist.reduce_scatter_single(self.shard.grad, F.pad(full, (0, s * world - full.numel())))  # the sum: no 1/P
        self.adam.step()
        load_flat(self.params, gather_shards(self.shard))

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.shard.grad = None
''',
        "zero2": '''
class Zero2Adam:
    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.params = list(model.parameters())
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad)

    def _on_grad(self, param):
        if any(p.grad is None for p in self.params):
            return                                        # waits for the whole model's gradients:
        for layer, shard in zip(self.layers, self.shards):   # ZeRO-1's memory through backward
            params = list(layer.parameters())
            shard.grad = reduce_scatter_mean(flatten(p.grad for p in params))
            for p in params:
                p.grad = None

    def step(self):
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            load_flat(list(layer.parameters()), gather_shards(shard))

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
''',
    },
    # Found by a red team: each kept full points before its own cell measured what it hid.
    'prefetch_waited_at_once': {  # issued early, but waited on before layer i computes: nothing overlaps
        'prefetch': solution_with("03_zero", "prefetch", "  # prefetch: on the wire during layer i",
                                  "\n                handle.wait()  # waited on at once"),
    },
    # DDP with a full Adam on every rank, behind a sharded .adam that the checks read
    'zero1_ddp_behind_a_shard': {
        'zero1': '''
class Zero1Adam:
    """ZeRO stage 1 (claimed): Adam with its state sharded over the ranks."""

    def __init__(self, model, lr=1e-2):
        self.params = list(model.parameters())
        self.shard = nn.Parameter(shard_of(flatten(self.params)))
        self.adam = torch.optim.Adam([self.shard], lr=lr)          # this rank's shard
        self._replica = torch.optim.Adam(self.params, lr=lr)       # full Adam state on every rank

    def step(self):
        flat = flatten(p.grad for p in self.params)
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        self.shard.grad = shard_of(flat)
        self.adam.step()
        offset = 0
        for p in self.params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self._replica.step()                                         # DDP: every rank steps everything

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.shard.grad = None
''',
    },
    # ZeRO-2's backward, then full gradients gathered back and a full Adam stepped
    'zero2_grads_regathered_full_adam': {
        'zero2': '''
class Zero2Adam:
    """ZeRO stage 2 (claimed): reduce-scatter each layer's gradient in backward; then all-gather the
    gradient shards and step a full Adam on every rank."""

    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        self._replica = torch.optim.Adam(model.parameters(), lr=lr)  # full Adam state on every rank
        for layer, shard in zip(self.layers, self.shards):
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, layer, shard))

    def _on_grad(self, layer, shard, param):
        params = list(layer.parameters())
        if any(p.grad is None for p in params):
            return
        grad = reduce_scatter_mean(flatten(p.grad for p in params))
        shard.grad = grad if shard.grad is None else shard.grad + grad
        for p in params:
            p.grad = None

    def step(self):
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            params = list(layer.parameters())
            full = gather_shards(shard.grad)  # the mean gradient of the whole layer, on every rank
            for p, g in zip(params, unflatten(full, [p.shape for p in params])):
                p.grad = g.clone()
        self._replica.step()
        for layer in self.layers:
            for p in layer.parameters():
                p.grad = None

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
''',
    },
    # the first backward call gathers every layer and keeps them until backward ends
    'zero3_gather_all_for_backward': {
        'zero3': _solution_with(
            'zero3',
            '        ctx.shapes, ctx.index = shapes, index\n',
            '        ctx.shapes, (ctx.index, ctx.owner) = shapes, (index if isinstance(index, tuple) else (index, None))\n',
            '        full = gather_shards(shard)\n'
            '        with region(f"backward layer {ctx.index}"):  # the compute only: the timeline draws the messages apart\n',
            '        owner = ctx.owner\n'
            "        if owner is None:  # Zero3PrefetchMLP's layers: one layer at a time\n"
            '            full = gather_shards(shard)\n'
            '        else:\n'
            "            if not owner._backward_full:  # the last layer's backward: gather every layer at once, up front\n"
            '                owner._backward_full = {j: gather_shards(s) for j, s in enumerate(owner.shards)}\n'
            '            full = owner._backward_full.pop(ctx.index)\n'
            '        with region(f"backward layer {ctx.index}"):  # the compute only: the timeline draws the messages apart\n',
            '        last = len(self.shards) - 1\n',
            '        last = len(self.shards) - 1\n'
            '        self._backward_full = {}\n',
            '                x = ShardedLinear.apply(x, shard, full, self.shapes[i], i)  # (B, d_hidden) or (B, d_out)\n',
            '                x = ShardedLinear.apply(x, shard, full, self.shapes[i], (i, self))\n'),
    },
    # A fifth red-team pass: right numbers from memory that is not sharded, or overlap that is not
    # there. ZeRO-1 stepping a full Adam kept in a closure (the optimizer walk does not open
    # closures: the parameters must follow self.adam); ZeRO-2 keeping a full-size gradient buffer
    # for every layer, and ZeRO-3 every gathered layer, from step to step (allocated before
    # backward, so the peak during backward does not see them); prefetch issuing the next gather
    # after the layer's product.
    'full_adam_in_a_closure': {'zero1': _FULL_ADAM_IN_A_CLOSURE},
    # The same, its learning rate following self.adam's: the lr-0 step cannot tell, the state of every
    # optimizer alive on the rank can.
    'full_adam_in_a_closure_following_lr': {'zero1': _FULL_ADAM_IN_A_CLOSURE.replace(
        "            return lambda: full.step()\n",
        "            def step():\n"
        "                for g in full.param_groups:\n"
        "                    g[\"lr\"] = self.adam.param_groups[0][\"lr\"]\n"
        "                full.step()\n"
        "            return step\n")},
    'full_gradient_buffers_kept': {'zero2': '''
class Zero2Adam:
    """ZeRO stage 2 (claimed): but every layer's full gradient stays resident in a preallocated buffer."""

    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        world = dist.get_world_size()
        self.buffers = [torch.zeros(world * s.numel()) for s in self.shards]  # 4 Psi of full gradients, always held
        for layer, shard, buf in zip(self.layers, self.shards, self.buffers):
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, layer, shard, buf))

    def _on_grad(self, layer, shard, buf, param):
        params = list(layer.parameters())
        if any(p.grad is None for p in params):
            return
        offset = 0
        for p in params:
            buf[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
            offset += p.numel()
        for p in params:
            p.grad = None
        grad = buf.new_empty(shard.numel())
        dist.reduce_scatter_single(grad, buf)
        grad /= dist.get_world_size()
        shard.grad = grad if shard.grad is None else shard.grad + grad

    def step(self):
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            load_flat(list(layer.parameters()), gather_shards(shard))

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
'''},
    'every_layer_kept_gathered': {'zero3': '''
class ShardedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, full, shapes, index):
        if isinstance(index, tuple):
            index, ctx.buf = index
        else:
            ctx.buf = None
        w, b = unflatten(full, shapes)
        ctx.save_for_backward(x, shard)
        ctx.shapes, ctx.index = shapes, index
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        if ctx.buf is not None:
            full = ctx.buf
            dist.all_gather_single(full, shard.detach())   # into the resident buffer: nothing allocated
        else:
            full = gather_shards(shard)
        with region(f"backward layer {ctx.index}"):
            w, _ = unflatten(full, ctx.shapes)
            grad_x = grad_y @ w
            grad_flat = flatten([grad_y.T @ x, grad_y.sum(0)])
        if ctx.buf is None:
            free(full, f"layer {ctx.index}")
        return grad_x, reduce_scatter_mean(grad_flat), None, None, None


class Zero3MLP(nn.Module):
    """Claimed ZeRO-3: shards are the Parameters, but every full layer stays resident in a buffer."""

    def __init__(self, mlp):
        super().__init__()
        self.shapes = [[p.shape for p in layer.parameters()] for layer in mlp.layers]
        self.shards = nn.ParameterList(nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in mlp.layers)
        world = dist.get_world_size()
        self.full_layers = [torch.empty(world * s.numel()) for s in self.shards]  # 4 Psi, always held

    def forward(self, x):
        last = len(self.shards) - 1
        for shard, full in zip(self.shards, self.full_layers):   # every layer gathered up front
            dist.all_gather_single(full, shard.detach())
        for i, shard in enumerate(self.shards):
            with region(f"forward layer {i}"):
                x = ShardedLinear.apply(x, shard, self.full_layers[i], self.shapes[i], (i, self.full_layers[i]))
                if i < last:
                    x = F.gelu(x)
        return x
'''},
    'gather_issued_after_the_product': {
        'prefetch': _solution_with(
            'prefetch',
            '            if i < last:\n'
            '                next_full, handle = start_gather(self.shards[i + 1])  # prefetch: on the wire during layer i\n',
            '',
            '                x = ShardedLinear.apply(x, shard, full, self.shapes[i], i)\n',
            '                x = ShardedLinear.apply(x, shard, full, self.shapes[i], i)\n'
            '                if i < last:  # issued after the product: nothing overlaps it\n'
            '                    next_full, handle = start_gather(self.shards[i + 1])\n'),
    },
}


# Right answers written another way than the solution, where the spec allows it: each must keep
# every point (tests/mutation_run.py). ZeRO-2's step gathering every layer's updated shard before loading them (at once, or async), and a ZeRO-1 that keeps its padded gradient and gather buffers between steps: not optimizer state.
EQUIVALENTS = {
    # The parameters become views of the gathered flat tensor (torch's vector_to_parameters): the
    # old storage is freed, so nothing is kept beside the model's parameters.
    'z2_parameters_become_the_gathered_tensor': {
        'zero2': _solution_with(
            'zero2',
            '        for layer, shard in zip(self.layers, self.shards):\n'
            '            load_flat(list(layer.parameters()), gather_shards(shard))\n',
            '        for layer, shard in zip(self.layers, self.shards):\n'
            '            params = list(layer.parameters())\n'
            '            n = sum(p.numel() for p in params)\n'
            '            torch.nn.utils.vector_to_parameters(gather_shards(shard)[:n], params)\n'),
    },
    'z2_gather_all_then_load': {
        'zero2': '''
class Zero2Adam:
    """ZeRO stage 2: ZeRO-1 plus gradients sharded during backward, one shard per layer of model.layers."""

    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        for layer, shard in zip(self.layers, self.shards):
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, layer, shard))

    def _on_grad(self, layer, shard, param):
        params = list(layer.parameters())
        if any(p.grad is None for p in params):
            return
        grad = reduce_scatter_mean(flatten(p.grad for p in params))
        shard.grad = grad if shard.grad is None else shard.grad + grad
        for p in params:
            p.grad = None

    def step(self):
        self.adam.step()
        gathered = [gather_shards(shard) for shard in self.shards]   # every updated shard, then copy
        for layer, full in zip(self.layers, gathered):
            load_flat(list(layer.parameters()), full)

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
''',
    },
    'z2_async_gathers_then_wait': {
        'zero2': '''
class Zero2Adam:
    """ZeRO stage 2: ZeRO-1 plus gradients sharded during backward, one shard per layer of model.layers."""

    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        for layer, shard in zip(self.layers, self.shards):
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(functools.partial(self._on_grad, layer, shard))

    def _on_grad(self, layer, shard, param):
        params = list(layer.parameters())
        if any(p.grad is None for p in params):
            return
        grad = reduce_scatter_mean(flatten(p.grad for p in params))
        shard.grad = grad if shard.grad is None else shard.grad + grad
        for p in params:
            p.grad = None

    def step(self):
        self.adam.step()
        world = dist.get_world_size()
        pending = []
        for layer, shard in zip(self.layers, self.shards):   # all gathers on the wire at once
            full = shard.new_empty(world * shard.numel())
            pending.append((layer, full, dist.all_gather_single(full, shard.detach(), async_op=True)))
        for layer, full, handle in pending:
            handle.wait()
            load_flat(list(layer.parameters()), full)

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
''',
    },
    'z1_persistent_grad_and_gather_buffers': {
        'zero1': '''
class Zero1Adam:
    """ZeRO stage 1: Adam with its state sharded over the ranks."""

    def __init__(self, model, lr=1e-2):
        self.params = list(model.parameters())
        self.shard = nn.Parameter(shard_of(flatten(self.params)))
        self.adam = torch.optim.Adam([self.shard], lr=lr)
        self.full = None       # all-gather buffer, reused
        self.grads = None      # padded flat gradient buffer, reused (ZeRO-1 keeps full gradients anyway)

    def step(self):
        world = dist.get_world_size()
        s = self.shard.numel()
        if self.grads is None:
            self.grads = self.shard.new_zeros(world * s)
            self.full = self.shard.new_empty(world * s)
        offset = 0
        for p in self.params:
            self.grads[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
            offset += p.numel()
        g = self.shard.new_empty(s)
        dist.reduce_scatter_single(g, self.grads)
        self.shard.grad = g / world
        self.adam.step()
        dist.all_gather_single(self.full, self.shard.detach())
        load_flat(self.params, self.full)

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.shard.grad = None
''',
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("03_zero"))
