"""Plausible wrong answers for 02_data_parallel. Each mutant replaces whole solution cells
(keyed by grade_id); the graded cell ``<grade_id>_tests`` must then lose points.

One wrong answer per exercise per mutant, to keep the number of autograde runs small. The
bucketed-DDP mistakes the issue names each have a mutant: sum instead of average, forgetting a
bucket, stepping before the wait, all-reducing a bucket before backward has finished with it,
and buckets in forward order (every launch from backward's last hook: no overlap).
"""

import equals_everything
from mutation_run import solution_with

# The correct BucketedDDP, split so that mutants can swap one method.
_BUCKETS_INIT = '''
class BucketedDDP:
    def __init__(self, model, bucket_bytes):
        self.model = model
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets, current, size = [], [], 0
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if current and size + nbytes > bucket_bytes:
                self.buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            self.buckets.append(current)
        self._bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self._reset()
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def _reset(self):
        self._ready = [0] * len(self.buckets)
        self._next = 0
        self._pending = []

    def _launch(self, i):
        grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.buckets[i]]
        flat = torch.cat(grads)
        self._pending.append((i, flat, dist.all_reduce(flat, async_op=True)))
'''

_GRAD_READY = '''
    def _grad_ready(self, param):
        self._ready[self._bucket_of[param]] += 1
        while self._next < len(self.buckets) and self._ready[self._next] == len(self.buckets[self._next]):
            self._launch(self._next)
            self._next += 1
'''

_FINISH = '''
    def finish_gradient_sync(self):
        while self._next < len(self.buckets):
            self._launch(self._next)
            self._next += 1
        world = dist.get_world_size()
        for i, flat, work in self._pending:
            work.wait()
            flat /= world
            offset = 0
            for p in self.buckets[i]:
                n = p.numel()
                if p.grad is not None:
                    p.grad.copy_(flat[offset:offset + n].view_as(p))
                offset += n
        self._reset()
'''

_TRAIN_STEP = '''
    def train_step(self, optimizer, batch):
        rank, world = dist.get_rank(), dist.get_world_size()
        shard = split_batch(batch, world)[rank]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(self.model, shard)
        with region("backward"):
            loss.backward()
        self.finish_gradient_sync()
        optimizer.step()
        return loss.item()
'''

_NAIVE = '''
class NaiveDDP:
    def __init__(self, model):
        self.model = model

    def train_step(self, optimizer, batch):
        rank, world = dist.get_rank(), dist.get_world_size()
        shard = split_batch(batch, world)[rank]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(self.model, shard)
        with region("backward"):
            loss.backward()
{reduce}
        optimizer.step()
        return loss.item()
'''

_COMM = '''
def ddp_bytes_per_rank(n_params, bytes_per_elem, world_size):
    return {ddp}

def parameter_server_bytes(n_params, bytes_per_elem, world_size):
    n = n_params * bytes_per_elem
    server = {server}
    return {{"server_sent": server, "server_received": server, "worker_sent": n, "worker_received": n}}
'''

_MEMORY = '''
def memory_breakdown(param_dtype="bf16", grad_dtype="bf16", master_weights=True, optimizer="adam", moments_dtype="fp32"):
    sizes = {{"fp32": 4, "bf16": 2, "fp16": 2}}
    moments = {{"adam": 2, "momentum": {momentum}, "sgd": 0}}
    for dtype in (param_dtype, grad_dtype, moments_dtype):
        if dtype not in sizes:
            raise ValueError(dtype)
    if optimizer not in moments:
        raise ValueError(optimizer)
    return {{
        "parameters": sizes[param_dtype],
        "gradients": sizes[grad_dtype],
        "master weights": {master},
        "optimizer states": moments[optimizer] * {moment_bytes},
    }}

def bytes_per_parameter(param_dtype="bf16", grad_dtype="bf16", master_weights=True, optimizer="adam", moments_dtype="fp32"):
    return sum(memory_breakdown(param_dtype, grad_dtype, master_weights, optimizer, moments_dtype).values())
'''

_MASTER = '4 if master_weights and param_dtype != "fp32" else 0'


def memory(momentum="1", master=_MASTER, moment_bytes="sizes[moments_dtype]"):
    return _MEMORY.format(momentum=momentum, master=master, moment_bytes=moment_bytes)


# The work done wrong while the numbers come out right (a red-team pass found each keeping its
# points): one backward on the sum of the micro-batch losses, every rank on the whole batch, each
# bucket waited on in the hook that launches it, and one-element all-reduces in backward standing
# in for buckets that are all-reduced together after it; and (a second pass) each bucket waited
# on when the next one launches.
_LAUNCH = "        self._pending.append((i, flat, dist.all_reduce(flat, async_op=True)))\n"
_WAITED_AT_ONCE = _BUCKETS_INIT.replace(_LAUNCH, """        work = dist.all_reduce(flat, async_op=True)
        work.wait()  # backward stands still until the bucket is reduced
        self._pending.append((i, flat, work))
""")
_TOKENS = _BUCKETS_INIT.replace(_LAUNCH, """        if i < len(self.buckets) - 1:
            token = torch.zeros(1)
            self._pending.append((None, token, dist.all_reduce(token, async_op=True)))
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for bucket in self.buckets for p in bucket])
        self._pending.append((i, flat, dist.all_reduce(flat, async_op=True)))
""")
_TOKENS_FINISH = _FINISH.replace("            work.wait()\n", "            work.wait()\n            if i is None:\n                continue\n").replace(
    "for p in self.buckets[i]:", "for p in [p for bucket in self.buckets for p in bucket]:")

# The solution's micro-batch loop, and the one backward on the sum that wrong answers put after theirs.
_ACCUMULATE_LOOP = ("    for start in range(0, B, micro_batch_size):\n"
                    "        micro = tuple(t[start:start + micro_batch_size] for t in batch)\n"
                    "        loss = loss_fn(model, micro) * (micro[0].shape[0] / B)\n"
                    "        loss.backward()  # gradients add up in .grad\n"
                    "        total += loss.item()\n")
_SUMMED = ("    sum(losses).backward()\n"
           "    total = sum(loss.item() for loss in losses)\n")


# loss_fn, with the model's forward called itself: no module hook sees it.
_LOSS_PAST_THE_HOOKS = '''
def _forward_loss(model, batch):
    inputs, targets = batch
    if isinstance(model, TinyGPT):
        return model.forward(inputs, targets)[1]
    return torch.nn.functional.mse_loss(model.forward(inputs), targets)
'''

MUTANTS = {
    # Only the first bucket launched from backward, the rest after it: one bucket overlaps, and
    # every number is right (a fifth red-team pass; the check wanted one launch, not every one due).
    # Every rank trains on the whole batch, its forward called past the model's hooks, after one
    # thrown-away forward on its own shard that the hooks see: only a model whose samples meet
    # in forward tells (the averaged whole-batch gradients are the right numbers otherwise).
    "whole_batch_past_the_hooks": {"naive_ddp": _LOSS_PAST_THE_HOOKS + '''
def _whole_batch_loss(model, batch, world):
    """Every rank trains on the whole batch; one forward on its own shard first, thrown away."""
    rank = dist.get_rank()
    shard = split_batch(batch, world)[rank]           # ValueError when world does not divide B
    with torch.no_grad():
        loss_fn(model, shard)                          # what a forward hook on the model sees
    return _forward_loss(model, batch)


class NaiveDDP:
    def __init__(self, model):
        self.model = model

    def train_step(self, optimizer, batch):
        world = dist.get_world_size()
        optimizer.zero_grad(set_to_none=True)
        loss = _whole_batch_loss(self.model, batch, world)
        with region("backward"):
            loss.backward()
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world
        optimizer.step()
        return loss.item()
'''},
    # Every rank computes every shard's gradient itself, one forward per shard past the model's
    # hooks, after one on its own shard that the hooks see, and all-reduces zeros: the right
    # numbers, the right calls and bytes, and no rank learns anything from another. Only a rank
    # that is handed its own rows alone (own_rows) tells.
    "every_shard_on_every_rank_zeros_sent": {"naive_ddp": _LOSS_PAST_THE_HOOKS + '''

class NaiveDDP:
    def __init__(self, model):
        self.model = model

    def train_step(self, optimizer, batch):
        rank, world = dist.get_rank(), dist.get_world_size()
        shards = split_batch(batch, world)             # ValueError when world does not divide B
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            loss_fn(self.model, shards[rank])          # what a forward hook on the model sees
        with region("backward"):
            for shard in shards:
                (_forward_loss(self.model, shard) / world).backward()
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(torch.zeros_like(p.grad))
        optimizer.step()
        return _forward_loss(self.model, shards[rank]).item()
'''},
    "one_bucket_launched_in_backward": {
        "bucketed_ddp": solution_with(
            "02_data_parallel", "bucketed_ddp",
            "        while self._next < len(self.buckets) and self._ready[self._next] == len(self.buckets[self._next]):\n"
            "            self._launch(self._next)\n"
            "            self._next += 1\n"
            "        ### END SOLUTION\n\n    def finish_gradient_sync",
            "        if self._next == 0 and self._ready[0] == len(self.buckets[0]):  # the others after backward\n"
            "            self._launch(0)\n"
            "            self._next = 1\n"
            "        ### END SOLUTION\n\n    def finish_gradient_sync"),
    },
    "right_numbers_wrong_work": {
        "accumulate": '''
def accumulate_step(model, optimizer, batch, micro_batch_size):
    B = batch[0].shape[0]
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for start in range(0, B, micro_batch_size):
        micro = tuple(t[start:start + micro_batch_size] for t in batch)
        total = total + loss_fn(model, micro) * (micro[0].shape[0] / B)
    total.backward()  # every micro-batch's graph alive until here
    optimizer.step()
    return total.item()
''',
        "naive_ddp": _NAIVE.replace("loss = loss_fn(self.model, shard)", "loss = loss_fn(self.model, batch)").format(reduce='''
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world'''),
        "bucketed_ddp": _WAITED_AT_ONCE + _GRAD_READY + _FINISH + _TRAIN_STEP,
    },
    "summed_losses_under_torchs_own_saved_tensor_hooks": {
        # one backward on the sum, its saved tensors passed through hooks of torch's own callables:
        # innermost, so a counter of saved tensors sees nothing; the allocator still sees them kept
        "accumulate": solution_with(
            "02_data_parallel", "accumulate",
            _ACCUMULATE_LOOP,
            "    with torch.autograd.graph.saved_tensors_hooks(torch.Tensor.detach, torch.Tensor.detach):\n"
            "        losses = [loss_fn(model, tuple(t[s:s + micro_batch_size] for t in batch))\n"
            "                  * (min(micro_batch_size, B - s) / B) for s in range(0, B, micro_batch_size)]\n"
            + _SUMMED),
    },
    "summed_losses_saved_as_python_lists": {
        # the same, its saved tensors kept as Python lists, which the allocator never sees
        "accumulate": solution_with(
            "02_data_parallel", "accumulate",
            _ACCUMULATE_LOOP,
            "    with torch.autograd.graph.saved_tensors_hooks(torch.Tensor.tolist, torch.tensor):\n"
            "        losses = [loss_fn(model, tuple(t[s:s + micro_batch_size] for t in batch))\n"
            "                  * (min(micro_batch_size, B - s) / B) for s in range(0, B, micro_batch_size)]\n"
            + _SUMMED),
    },
    "micro_batch_forwards_on_a_thread": {
        # the same, each forward run on a thread of its own, whose allocations the profiler does not see
        "accumulate": solution_with(
            "02_data_parallel", "accumulate",
            _ACCUMULATE_LOOP,
            "    import threading\n"
            "    losses = []\n"
            "    for start in range(0, B, micro_batch_size):\n"
            "        micro = tuple(t[start:start + micro_batch_size] for t in batch)\n"
            "        worker = threading.Thread(target=lambda: losses.append(loss_fn(model, micro) * (micro[0].shape[0] / B)))\n"
            "        worker.start()\n"
            "        worker.join()\n"
            + _SUMMED),
    },
    "summed_losses_forwards_past_the_hooks": {
        # the same, each kept forward called as model.forward (past the hooks that time forwards),
        # after a thrown-away forward that the hooks see
        "accumulate": solution_with(
            "02_data_parallel", "accumulate",
            _ACCUMULATE_LOOP,
            "    losses = []\n"
            "    for start in range(0, B, micro_batch_size):\n"
            "        x, y = (t[start:start + micro_batch_size] for t in batch)\n"
            "        with torch.no_grad():\n"
            "            model(x, y) if isinstance(model, TinyGPT) else model(x)\n"
            "        loss = model.forward(x, y)[1] if isinstance(model, TinyGPT) else torch.nn.functional.mse_loss(model.forward(x), y)\n"
            "        losses.append(loss * (x.shape[0] / B))\n"
            + _SUMMED),
    },
    "previous_bucket_waited_in_hook": {  # at most one bucket on the wire: backward waits for each
        "bucketed_ddp": _BUCKETS_INIT.replace(_LAUNCH, "        if self._pending:\n            self._pending[-1][2].wait()\n" + _LAUNCH)
        + _GRAD_READY + _FINISH + _TRAIN_STEP,
    },
    "token_all_reduces_in_backward": {
        "bucketed_ddp": _TOKENS + _GRAD_READY + _TOKENS_FINISH + _TRAIN_STEP,
    },
    "sum_not_mean": {
        # divides every micro-batch's loss by the number of micro-batches: wrong when they are unequal
        "accumulate": '''
def accumulate_step(model, optimizer, batch, micro_batch_size):
    B = batch[0].shape[0]
    k = math.ceil(B / micro_batch_size)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for start in range(0, B, micro_batch_size):
        micro = tuple(t[start:start + micro_batch_size] for t in batch)
        loss = loss_fn(model, micro) / k
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
''',
        "naive_ddp": _NAIVE.format(reduce='''
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)   # the sum: P times the gradient (Adam barely notices)'''),
        "bucketed_ddp": _BUCKETS_INIT + _GRAD_READY + _FINISH.replace("flat /= world", "pass  # forgot to average") + _TRAIN_STEP,
        "comm_bytes": _COMM.format(ddp="2 * n_params * bytes_per_elem", server="(world_size - 1) * n"),
        "memory": memory(master='4 if master_weights else 0'),  # a master copy of fp32 weights too
    },
    "forgot_a_bucket": {
        # never zeroes the gradients: step 2 adds onto step 1's
        "accumulate": '''
def accumulate_step(model, optimizer, batch, micro_batch_size):
    B = batch[0].shape[0]
    total = 0.0
    for start in range(0, B, micro_batch_size):
        micro = tuple(t[start:start + micro_batch_size] for t in batch)
        loss = loss_fn(model, micro) * (micro[0].shape[0] / B)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
''',
        # slices by hand with B // P: an uneven batch silently drops samples instead of raising
        "naive_ddp": _NAIVE.replace("shard = split_batch(batch, world)[rank]",
                                    "n = batch[0].shape[0] // world\n"
                                    "        shard = tuple(t[rank * n:(rank + 1) * n] for t in batch)").format(reduce='''
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world'''),
        # finish_gradient_sync assumes the hooks launched every bucket: the bucket holding a
        # parameter that got no gradient is never all-reduced
        "bucketed_ddp": _BUCKETS_INIT + _GRAD_READY + _FINISH.replace(
            "        while self._next < len(self.buckets):\n            self._launch(self._next)\n            self._next += 1\n", "") + _TRAIN_STEP,
        "comm_bytes": _COMM.format(ddp="(world_size - 1) / world_size * n_params * bytes_per_elem",  # one direction
                                   server="(world_size - 1) * n"),
        "memory": memory(moment_bytes="4"),  # moments always fp32
    },
    "step_before_wait": {
        # one forward on the whole batch: no accumulation at all
        "accumulate": '''
def accumulate_step(model, optimizer, batch, micro_batch_size):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    return loss.item()
''',
        # all-reduces before backward: the gradients are not there yet, so nothing is averaged
        "naive_ddp": '''
class NaiveDDP:
    def __init__(self, model):
        self.model = model

    def train_step(self, optimizer, batch):
        rank, world = dist.get_rank(), dist.get_world_size()
        shard = split_batch(batch, world)[rank]
        optimizer.zero_grad(set_to_none=True)
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world
        loss = loss_fn(self.model, shard)
        with region("backward"):
            loss.backward()
        optimizer.step()
        return loss.item()
''',
        # steps on the local gradients, then waits for the averaged ones
        "bucketed_ddp": _BUCKETS_INIT + _GRAD_READY + _FINISH + _TRAIN_STEP.replace(
            "        self.finish_gradient_sync()\n        optimizer.step()\n",
            "        optimizer.step()\n        self.finish_gradient_sync()\n"),
        "comm_bytes": _COMM.format(ddp="2 * (world_size - 1) / world_size * n_params * bytes_per_elem",
                                   server="world_size * n"),  # the server sends to itself too
        "memory": memory(momentum="2"),  # momentum counted like Adam
    },
    "launch_early": {
        # steps after every micro-batch
        "accumulate": '''
def accumulate_step(model, optimizer, batch, micro_batch_size):
    B = batch[0].shape[0]
    total = 0.0
    for start in range(0, B, micro_batch_size):
        optimizer.zero_grad(set_to_none=True)
        micro = tuple(t[start:start + micro_batch_size] for t in batch)
        loss = loss_fn(model, micro) * (micro[0].shape[0] / B)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total
''',
        # uses rank 0's gradients for everyone instead of the average
        "naive_ddp": _NAIVE.format(reduce='''
        for p in self.model.parameters():
            if p.grad is not None:
                dist.broadcast(p.grad, src=0)'''),
        # launches a bucket as soon as its first gradient is ready: the others are not done yet
        "bucketed_ddp": _BUCKETS_INIT + '''
    def _grad_ready(self, param):
        i = self._bucket_of[param]
        self._ready[i] += 1
        if self._ready[i] == 1 and i == self._next:
            self._launch(i)
            self._next += 1
''' + _FINISH + _TRAIN_STEP,
        "comm_bytes": _COMM.format(ddp="2 * (world_size - 1) / world_size * n_params * bytes_per_elem",
                                   server="(world_size - 1) * n * 2"),  # up and down added together
        "memory": memory(master='2 if master_weights and param_dtype != "fp32" else 0'),  # a bf16 "master" copy
    },
    "buckets_in_forward_order": {
        # buckets filled first layer first: bucket 0 completes only with backward's last gradient, so
        # every launch comes from the last hook, inside backward yet with nothing left to hide under
        "bucketed_ddp": _BUCKETS_INIT.replace("for p in reversed(params):", "for p in params:") + _GRAD_READY
                        + _FINISH + _TRAIN_STEP,
        # the right bytes, looked up in the engine's cost model instead of derived
        "comm_bytes": "from nanoparallel.lessons.cost import busiest_rank_bytes\n" + _COMM.format(
            ddp='busiest_rank_bytes("all_reduce", n_params * bytes_per_elem, world_size)', server="(world_size - 1) * n"),
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("02_data_parallel"))

# Right answers written another way (tests/mutation_run.py): their graded cells must pass.
EQUIVALENTS = {
    "accumulate_on_copied_micro_batches_keeping_each_loss": {
        # torch.split, each micro-batch copied, and the scaled losses kept (their graphs freed by backward)
        "accumulate": '''
def accumulate_step(model, optimizer, batch, micro_batch_size):
    B = batch[0].shape[0]
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for micro in zip(*(torch.split(t, micro_batch_size) for t in batch)):
        micro = tuple(t.clone() for t in micro)
        loss = loss_fn(model, micro) * (len(micro[0]) / B)
        loss.backward()
        losses.append(loss)
    optimizer.step()
    return float(sum(loss.item() for loss in losses))
''',
    },
}
