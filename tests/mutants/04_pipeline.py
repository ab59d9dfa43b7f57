"""Plausible wrong answers for 04_pipeline. Each mutant replaces whole solution cells (keyed by
grade_id); the graded cell ``<grade_id>_tests`` of every replaced cell must then lose points.

One wrong answer per exercise per mutant keeps the number of autograde runs small. They cover
the issue's list: a loss not scaled by 1/m, a warm-up off by one, W before its B, neighbours
sending to each other with blocking sends (a deadlock the engine names), activations sent without
a gradient path, a schedule that works only while m >= p; and the lazy versions a check must
not let through: a receive inside an op's region, activations kept after their backward (the graph retained and referenced), an
executor that ignores its schedule, weight gradients computed in B, W's not postponed, W's work
done inside B, F and B device times swapped (caught only because the checks' op times differ), a
deferred W that builds an autograd graph, and a weight kept through save_for_backward (breaks
under the saved-tensor hooks that measure memory), every micro-batch's input and output kept
until the step ends, and a layer input kept on ctx out of the memory count's sight; a forward
recomputed in backward (also out of the FLOP counter's sight, with torch's dispatch modes suspended),
one op doing every micro-batch's backward, a bias gradient computed in B.
"""

import equals_everything
from mutation_run import solution_with


def _solution_with(grade_id: str, *changes: str) -> str:
    return solution_with("04_pipeline", grade_id, *changes)


MUTANTS = {
    # The work done in the wrong op while every number comes out right (a red-team pass found each
    # keeping its points): a forward run again in backward (layerwise, executor), the last stage's
    # backward of every micro-batch in its first op (GPipe), the bias gradient computed in B.
    'work_out_of_place': {
        'layerwise': '''
def layerwise_step(stage, batch, times):
    """One step of layer-wise model parallelism on this rank's `stage`.

    batch: (inputs (B, d_in), targets (B, d_out)); times: {"F", "B", "W"} device seconds.
    Returns the loss (float) on the last rank, None on the others.
    """
    rank, P = dist.get_rank(), dist.get_world_size()
    x, targets = batch
    if rank > 0:
        x = torch.empty(x.shape[0], stage.in_features)
        dist.recv(x, rank - 1)
    with region("F0", device_time=times["F"]):
        with torch.no_grad():  # keep nothing: backward recomputes
            out = stage(x)
            loss = F.mse_loss(out, targets).item() if rank == P - 1 else None
    if rank < P - 1:
        dist.send(out, rank + 1)
    grad = None
    if rank < P - 1:
        grad = torch.empty_like(out)
        dist.recv(grad, rank + 1)
    del out
    with region("BW0", device_time=times["B"] + times["W"]):
        x = x.detach().requires_grad_(rank > 0)
        out = stage(x)
        if rank == P - 1:
            out = F.mse_loss(out, targets)
        out.backward(grad)
    if rank > 0:
        dist.send(x.grad, rank - 1)
    return loss
''',
        'gpipe': '''
def gpipe_step(stage, batch, times, m):
    """One GPipe step: m micro-batch forwards, then m backwards, on this rank's `stage`.

    batch: (inputs (b, d_in), targets (b, d_out)), split with split_batch(batch, m); only send
    and recv. Returns the step's loss (sum of the m scaled losses) as a float on the last rank,
    None on the others.
    """
    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    micro = split_batch(batch, m)
    inputs, outputs = [], []
    for i, (x, targets) in enumerate(micro):
        if rank > 0:
            x = torch.empty(x.shape[0], stage.in_features)
            dist.recv(x, rank - 1)
            x.requires_grad_()
        with region(f"F{i}", device_time=times["F"]):
            out = stage(x)
        if not last:
            dist.send(out.detach(), rank + 1)
        inputs.append(x)
        outputs.append(out)
    total = None
    if last:  # the loss of the whole batch at once: one backward for all micro-batches
        with region("BW0", device_time=times["B"] + times["W"]):
            loss = F.mse_loss(torch.cat(outputs), torch.cat([t for _, t in micro]))
            outputs = [None] * m
            loss.backward()
            total = loss.item()
            del loss
        if rank > 0:
            dist.send(inputs[0].grad, rank - 1)
        inputs[0] = None
        for i in range(1, m):
            with region(f"BW{i}", device_time=times["B"] + times["W"]):
                pass
            if rank > 0:
                dist.send(inputs[i].grad, rank - 1)
            inputs[i] = None
        return total
    for i in range(m):
        grad = torch.empty_like(outputs[i])
        dist.recv(grad, rank + 1)
        with region(f"BW{i}", device_time=times["B"] + times["W"]):
            outputs[i].backward(grad)
        outputs[i] = None
        if rank > 0:
            dist.send(inputs[i].grad, rank - 1)
        inputs[i] = None
    return None
''',
        'executor': '''
def run_schedule(stage, batch, times, ops, m, store):
    """Run this rank's `ops` (a list of Op) of a pipeline schedule on `stage`; one step on `batch`.

    Receive (dist.recv) just before the op that needs the data; send with dist.isend and wait on
    every send before returning. Each op runs inside region(str(op), device_time=...).
    Returns the step's loss as a float on the last rank, None on the others.
    """
    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    micro = split_batch(batch, m)
    inputs, sends, total = {}, [], 0.0
    for kind, i in ops:
        if kind == "F":
            x, targets = micro[i]
            if rank > 0:
                x = torch.empty(x.shape[0], stage.in_features)
                dist.recv(x, rank - 1)
            with region(f"F{i}", device_time=times["F"]):
                with torch.no_grad():  # keep only the input; backward rebuilds the graph (less memory)
                    out = stage(x)
                    if last:
                        total += (F.mse_loss(out, targets) / m).item()
            inputs[i] = x
            if not last:
                sends.append(dist.isend(out, rank + 1))
            del out
        elif kind in ("B", "BW"):
            x = inputs.pop(i)
            grad = None
            if not last:
                grad = torch.empty(x.shape[0], stage.out_features)
                dist.recv(grad, rank + 1)
            seconds = times["B"] + (times["W"] if kind == "BW" else 0.0)
            with region(f"{kind}{i}", device_time=seconds):
                x = x.detach().requires_grad_(rank > 0)
                out = stage(x)
                if last:
                    out = F.mse_loss(out, micro[i][1]) / m
                torch.autograd.backward(out, grad)
                store.flush(i)
                if kind == "BW":
                    store.pop(i)
            if rank > 0:
                sends.append(dist.isend(x.grad, rank - 1))
            del out, x
        else:  # "W"
            with region(f"W{i}", device_time=times["W"]):
                store.pop(i)
    for work in sends:
        work.wait()
    return total if last else None
''',
        'split': '''
def accumulate_grad(param, grad):
    """param.grad += grad, creating param.grad when it is None."""
    param.grad = grad if param.grad is None else param.grad + grad


class SplitLinearFunction(torch.autograd.Function):
    """y = x @ weight.T + bias whose backward returns the input gradient and defers the weight gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias, store):
        ctx.save_for_backward(x)
        ctx.weight, ctx.bias, ctx.store = weight, bias, store
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        weight, bias = ctx.weight, ctx.bias
        g = grad_out.reshape(-1, grad_out.shape[-1])
        if bias is not None:  # a sum, no matrix product: cheap enough to do now
            accumulate_grad(bias, g.sum(0))

        @torch.no_grad()
        def weight_grad():
            accumulate_grad(weight, g.T @ x.reshape(-1, x.shape[-1]))

        ctx.store.put(weight_grad)
        return (grad_out @ weight if ctx.needs_input_grad[0] else None), None, None, None
''',
    },
    'slips': {
        'layerwise': _solution_with(
            'layerwise',
            '        x.requires_grad_()  # backward will fill x.grad: the gradient rank - 1 waits for\n',
            '',
            '        dist.send(x.grad, rank - 1)\n',
            '        dist.send(x.grad if x.grad is not None else torch.zeros_like(x), rank - 1)  # no gradient path: zeros\n'),
        'gpipe': _solution_with(
            'gpipe',
            "                out = F.mse_loss(out, targets) / m  # the m scaled losses add up to the batch's mean\n",
            '                out = F.mse_loss(out, targets)  # forgot the 1/m\n'),
        'schedules': _solution_with(
            'schedules',
            '        warmup = min(p - 1 - s, m)\n',
            '        warmup = min(p - s, m)  # one forward too many\n'),
        'executor': _solution_with(
            'executor',
            '                sends.append(dist.isend(out.detach(), rank + 1))\n',
            '                dist.send(out.detach(), rank + 1)  # blocking: neighbours send to each other\n',
            '                sends.append(dist.isend(x.grad, rank - 1))\n',
            '                dist.send(x.grad, rank - 1)\n'),
        'split': _solution_with(
            'split',
            "        @torch.no_grad()  # a gradient, not a new graph: nothing may keep B's tensors alive after W\n",
            '',
            '        ctx.store.put(weight_grad)\n',
            '        weight_grad()  # computed in B after all\n'
            '        ctx.store.put(lambda: None)\n'),
        'zb_h1': '''
def zb_h1_schedule(p, m):
    """ZB-H1 (Qi et al. 2024): 1F1B with split backwards; stage s postpones its W's by s micro-batches."""
    schedule = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        ops, done_w = [Op("F", i) for i in range(warmup)], 0
        for i in range(m):
            if warmup + i < m:
                ops.append(Op("F", warmup + i))
            ops.append(Op("B", i))
            if True:  # W straight after its B: nothing postponed
                ops.append(Op("W", done_w))
                done_w += 1
        ops += [Op("W", i) for i in range(done_w, m)]
        schedule.append(ops)
    return schedule
''',
        'formulas': _solution_with(
            'formulas',
            '    """Idle time per stage of one flushed step (gpipe, 1f1b, zb-h1), or ZB-H2\'s steady-state idle\n'
            '    time per step (zb-h2), in the units of t_f, t_b, t_w; m >= p for the zero-bubble rows."""\n',
            '    """Idle time of one pipeline step (per stage), in the units of t_f, t_b, t_w."""\n',
            '    return bubble_time(schedule, p, m, t_f, t_b, t_w) / (m * (t_f + t_b + t_w))\n',
            '    return bubble_time(schedule, p, m, t_f, t_b, t_w) / ((m + p - 1) * (t_f + t_b + t_w))  # over total time\n'),
    },
    'shortcuts': {
        'layerwise': '''
def layerwise_step(stage, batch, times):
    """One step of layer-wise model parallelism on this rank's `stage`.

    batch: (inputs (B, d_in), targets (B, d_out)); times: {"F", "B", "W"} device seconds.
    Returns the loss (float) on the last rank, None on the others.
    """
    rank, P = dist.get_rank(), dist.get_world_size()
    x, targets = batch
    with region("F0", device_time=times["F"]):
        if rank > 0:  # waiting inside the op's region
            x = torch.empty(x.shape[0], stage.in_features)
            dist.recv(x, rank - 1)
            x.requires_grad_()
        out = stage(x)
        if rank == P - 1:
            out = F.mse_loss(out, targets)
    if rank < P - 1:
        dist.send(out.detach(), rank + 1)
    grad = None
    if rank < P - 1:
        grad = torch.empty_like(out)
        dist.recv(grad, rank + 1)
    with region("BW0", device_time=times["B"] + times["W"]):
        out.backward(grad)
    if rank > 0:
        dist.send(x.grad, rank - 1)
    return out.item() if rank == P - 1 else None
''',
        'gpipe': _solution_with(
            'gpipe',
            '    for i in range(m):\n',
            '    for i in reversed(range(m)):  # backwards newest first\n'),
        'schedules': _solution_with(
            'schedules',
            '        warmup = min(p - 1 - s, m)\n',
            '        warmup = p - 1 - s  # fine while m >= p\n'),
        'executor': _solution_with(
            'executor',
            '            out, x = outputs.pop(i), inputs.pop(i)  # after this op nothing keeps them alive\n',
            '            out, x = outputs[i], inputs[i]  # kept to the end of the step\n',
            '                torch.autograd.backward(out, grad)\n',
            '                torch.autograd.backward(out, grad, retain_graph=True)  # and with them every saved activation\n'),
        'split': _solution_with(
            'split',
            '    """param.grad += grad, creating param.grad when it is None."""\n'
            '    param.grad = grad if param.grad is None else param.grad + grad\n',
            '    param.grad = grad  # overwrites what earlier micro-batches added\n',
            "        @torch.no_grad()  # a gradient, not a new graph: nothing may keep B's tensors alive after W\n",
            ''),
        'zb_h1': _solution_with(
            'zb_h1',
            '    """ZB-H1 (Qi et al. 2024): 1F1B\'s order with split backwards, W\'s held back to fill the waits."""\n',
            '    """ZB-H1 (Qi et al. 2024): 1F1B with split backwards; stage s postpones its W\'s by s micro-batches."""\n',
            '        warmup = min(p - 1 - s, m)\n',
            '        warmup = min(p - s, m)  # one more forward in flight\n'),
        'formulas': _solution_with(
            'formulas',
            '    """Idle time per stage of one flushed step (gpipe, 1f1b, zb-h1), or ZB-H2\'s steady-state idle\n'
            '    time per step (zb-h2), in the units of t_f, t_b, t_w; m >= p for the zero-bubble rows."""\n',
            '    """Idle time of one pipeline step (per stage), in the units of t_f, t_b, t_w."""\n',
            '    peaks = {"gpipe": m, "1f1b": min(p, m), "zb-h1": min(p, m), "zb-h2": min(2 * p - 1, m)}\n',
            '    peaks = {"gpipe": m, "1f1b": min(p, m), "zb-h1": min(p, m), "zb-h2": min(2 * p, m)}\n'),
    },
    'ignored_schedule_w_before_b': {
        'executor': '''
def run_schedule(stage, batch, times, ops, m, store):
    # ignores the schedule: always GPipe's order
    return gpipe_step(stage, batch, times, m)
''',
        'formulas': '''
def bubble_time(schedule, p, m, t_f, t_b, t_w):
    """Idle time of one pipeline step (per stage), in the units of t_f, t_b, t_w."""
    per_slot = {"gpipe": t_f + t_b + t_w, "1f1b": t_f + t_b + t_w, "zb-h1": t_f + t_b + t_w, "zb-h2": t_f + t_b - 2 * t_w}
    if schedule not in per_slot:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {sorted(per_slot)}")
    return (p - 1) * per_slot[schedule]


def bubble_fraction(schedule, p, m, t_f, t_b, t_w):
    """Bubble over one stage's compute m (t_f + t_b + t_w): (p-1)/m for GPipe and 1F1B."""
    return bubble_time(schedule, p, m, t_f, t_b, t_w) / (m * (t_f + t_b + t_w))


def peak_activations(schedule, p, m):
    """Most micro-batches whose activations stage 0 holds at once (units of M_B)."""
    peaks = {"gpipe": m, "1f1b": min(p, m), "zb-h1": min(p, m), "zb-h2": min(2 * p - 1, m)}
    if schedule not in peaks:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {sorted(peaks)}")
    return peaks[schedule]
''',
        'zb_h1': '''
def zb_h1_schedule(p, m):
    """ZB-H1 (Qi et al. 2024): 1F1B with split backwards; stage s postpones its W's by s micro-batches."""
    schedule = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        ops, done_w = [Op("F", i) for i in range(warmup)], 0
        for i in range(m):
            if warmup + i < m:
                ops.append(Op("F", warmup + i))
            if i >= s:  # the W placed before the B it needs
                ops.append(Op("W", done_w))
                done_w += 1
            ops.append(Op("B", i))
        ops += [Op("W", i) for i in range(done_w, m)]
        schedule.append(ops)
    return schedule
''',
    },
    'w_in_b': {  # W's work inside B with the right device times; W built as a graph
        'executor': _solution_with(
            'executor',
            '                if kind == "BW":\n'
            '                    store.pop(i)\n',
            '                store.pop(i)  # the weight gradients at once: W is left with nothing to do\n'),
        'split': _solution_with(
            'split',
            "        @torch.no_grad()  # a gradient, not a new graph: nothing may keep B's tensors alive after W\n",
            ''),
    },
    'swapped_times': {  # F and B device times swapped; the weight kept through save_for_backward
        'executor': _solution_with(
            'executor',
            '            with region(f"F{i}", device_time=times["F"]):\n',
            '            with region(f"F{i}", device_time=times["B"]):\n',
            '            seconds = times["B"] + (times["W"] if kind == "BW" else 0.0)\n',
            '            seconds = times["F"] + (times["W"] if kind == "BW" else 0.0)\n'),
        'split': _solution_with(
            'split',
            '        ctx.save_for_backward(x)\n'
            '        ctx.weight, ctx.bias, ctx.store = weight, bias, store  # the parameters themselves\n',
            '        ctx.save_for_backward(x, weight)\n'
            '        ctx.bias, ctx.store = bias, store\n',
            '        (x,) = ctx.saved_tensors\n'
            '        weight, bias = ctx.weight, ctx.bias\n',
            '        x, weight = ctx.saved_tensors\n'
            '        bias = ctx.bias\n'),
    },
    'kept_outputs': {  # every micro-batch's input and output kept until the step ends; x kept on ctx, not saved for backward
        'split': _solution_with(
            'split',
            '        ctx.save_for_backward(x)\n'
            '        ctx.weight, ctx.bias, ctx.store = weight, bias, store  # the parameters themselves\n',
            "        ctx.x = x  # kept on ctx, out of autograd's sight\n"
            '        ctx.weight, ctx.bias, ctx.store = weight, bias, store\n',
            '        (x,) = ctx.saved_tensors\n',
            '        x = ctx.x\n'),
        'gpipe': _solution_with(
            'gpipe',
            '        outputs[i] = None  # its activations are no longer needed\n',
            '',
            '        inputs[i] = None\n',
            ''),
        'executor': _solution_with(
            'executor',
            '            out, x = outputs.pop(i), inputs.pop(i)  # after this op nothing keeps them alive\n',
            '            out, x = outputs[i], inputs[i]  # kept in the dicts until the step ends\n',
            '            del out, x\n',
            ''),
    },
}


# Right answers written another way than the solution, where the spec allows it: each must keep
# every point (tests/mutation_run.py). Stage 0's input marked requires_grad like every other stage's (one unneeded input gradient: allowed).
# The forward run again in backward (work_out_of_place's layerwise) with torch's dispatch modes
# suspended, so that a counter of FLOPs built on them sees one forward only: its F saved nothing,
# which the allocator shows.
_RECOMPUTE = """        x = x.detach().requires_grad_(rank > 0)
        out = stage(x)
        if rank == P - 1:
            out = F.mse_loss(out, targets)
"""
assert MUTANTS['work_out_of_place']['layerwise'].count(_RECOMPUTE) == 1
MUTANTS['recompute_out_of_the_counters_sight'] = {
    'layerwise': MUTANTS['work_out_of_place']['layerwise'].replace(_RECOMPUTE, """        x = x.detach().requires_grad_(rank > 0)
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            out = stage(x)
            if rank == P - 1:
                out = F.mse_loss(out, targets)
"""),
}
# The same, with F keeping filler of as many bytes as a forward saves, until backward begins.
_F0 = """            loss = F.mse_loss(out, targets).item() if rank == P - 1 else None
"""
assert MUTANTS['recompute_out_of_the_counters_sight']['layerwise'].count(_F0) == 1
MUTANTS['recompute_behind_filler'] = {
    'layerwise': MUTANTS['recompute_out_of_the_counters_sight']['layerwise'].replace(_F0, _F0 + """        filler = torch.ones(x.shape[0] * sum(layer.out_features for layer in stage.layers) * 2)
""").replace(_RECOMPUTE.splitlines()[0], "        del filler\n" + _RECOMPUTE.splitlines()[0]),
}

EQUIVALENTS = {
    # written by a reviewer: a send buffer of its own kept to the end, torch.autograd.backward, chunk,
    # a small no_grad temporary, (x, out) kept per micro-batch until its backward
    'send_buffer_kept_and_chunked': {'layerwise': '''def layerwise_step(stage, batch, times):

    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    x, targets = batch
    if rank > 0:
        x = torch.zeros(x.shape[0], stage.in_features)
        dist.recv(tensor=x, src=rank - 1)
        x.requires_grad_(True)
    with region("F0", device_time=times["F"]):
        y = stage(x)
        loss = F.mse_loss(y, targets) if last else None
    sent = None
    if not last:
        sent = y.detach().clone()          # a send buffer of its own, kept to the end
        dist.send(sent, dst=rank + 1)
        g = torch.zeros_like(y)
        dist.recv(g, src=rank + 1)
    with region("BW0", device_time=times["B"] + times["W"]):
        torch.autograd.backward(loss if last else y, None if last else g)
    if rank > 0:
        dist.send(x.grad.contiguous(), dst=rank - 1)
    value = loss.item() if last else None
    del loss, y
    return value
''', 'gpipe': '''def gpipe_step(stage, batch, times, m):

    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    micro = list(zip(*(t.chunk(m) for t in batch)))       # chunk instead of split_batch
    saved, losses = [], []
    for i, (x, targets) in enumerate(micro):
        if rank > 0:
            x = torch.empty(x.shape[0], stage.in_features)
            dist.recv(x, rank - 1)
            x.requires_grad_()
        with region(f"F{i}", device_time=times["F"]):
            out = stage(x)
            if last:
                out = F.mse_loss(out, targets) / m
            with torch.no_grad():
                check = out.detach().abs().max()          # a small temporary
        if last:
            losses.append(out.item())
        else:
            dist.send(out.detach(), rank + 1)
        saved.append((x, out))
    for i in range(m):
        x, out = saved[i]
        saved[i] = None
        grad = None
        if not last:
            grad = torch.empty_like(out)
            dist.recv(grad, rank + 1)
        with region(f"BW{i}", device_time=times["B"] + times["W"]):
            torch.autograd.backward(out, grad)
        if rank > 0:
            dist.send(x.grad, rank - 1)
        del x, out
    return sum(losses) if last else None
'''},
    # the last stage's loss computed after the F region, outside it
    'gp_loss_outside_the_region': {
        'gpipe': _solution_with(
            'gpipe',
            """            out = stage(x)
            if last:
                out = F.mse_loss(out, targets) / m  # the m scaled losses add up to the batch's mean
                total += out.item()
        if not last:
""",
            """            out = stage(x)
        if last:
            out = F.mse_loss(out, targets) / m  # computed after the F region
            total += out.item()
        else:
"""),
    },
    'lw_input_requires_grad_on_rank0': {
        'layerwise': _solution_with(
            'layerwise',
            '        x.requires_grad_()  # backward will fill x.grad: the gradient rank - 1 waits for\n',
            "    x = x.detach().requires_grad_()  # every stage the same way: its input's gradient is what goes back\n"),
    },
    'gp_input_requires_grad_on_rank0': {
        'gpipe': '''
def gpipe_step(stage, batch, times, m):
    """One GPipe step: m micro-batch forwards, then m backwards, on this rank's `stage`."""
    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    inputs, outputs, total = [], [], 0.0
    for i, (x, targets) in enumerate(split_batch(batch, m)):
        if rank > 0:
            x = torch.empty(x.shape[0], stage.in_features)
            dist.recv(x, rank - 1)
        x = x.detach().requires_grad_()
        with region(f"F{i}", device_time=times["F"]):
            out = stage(x)
            if last:
                out = F.mse_loss(out, targets) / m
                total += out.item()
        if not last:
            dist.send(out.detach(), rank + 1)
        inputs.append(x)
        outputs.append(out)
    for i in range(m):
        grad = None
        if not last:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, rank + 1)
        with region(f"BW{i}", device_time=times["B"] + times["W"]):
            outputs[i].backward(grad)
        outputs[i] = None
        if rank > 0:
            dist.send(inputs[i].grad, rank - 1)
        inputs[i] = None
    return total if last else None
''',
    },
    'ex_input_requires_grad_on_rank0': {
        'executor': _solution_with(
            'executor',
            '    """Run this rank\'s `ops` (a list of Op) of a pipeline schedule on `stage`; one step on `batch`.\n'
            '\n'
            '    Receive (dist.recv) just before the op that needs the data; send with dist.isend and wait on\n'
            '    every send before returning. Each op runs inside region(str(op), device_time=...).\n'
            "    Returns the step's loss as a float on the last rank, None on the others.\n"
            '    """\n',
            '    """Run this rank\'s `ops` (a list of Op) of a pipeline schedule on `stage`; one step on `batch`."""\n',
            '                x.requires_grad_()\n',
            '            x = x.detach().requires_grad_()\n',
            '            out, x = outputs.pop(i), inputs.pop(i)  # after this op nothing keeps them alive\n',
            '            out, x = outputs.pop(i), inputs.pop(i)\n',
            '        else:  # "W"\n',
            '        else:\n'),
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("04_pipeline"))
