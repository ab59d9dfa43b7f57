"""Tampering attempts on 04_pipeline (the rules: tests/tampering/00_welcome.py's docstring)."""
import library_objects


TAMPERING = {
    # A graded cell's hidden tests define helpers of their own (the executor's checks bring a
    # split layer, so that the executor is graded apart from exercise 5). A later answer looks for
    # any autograd Function left in the notebook's namespace and takes it for its own. Nothing
    # tells this read from an honest one, so it is not flagged: the helper must simply not be
    # there (a graded cell's checks leave behind only the names their visible part binds).
    "reuse_a_hidden_helper": {"flagged": False, "cells": {"split": '''
def accumulate_grad(param, grad):
    param.grad = grad if param.grad is None else param.grad + grad


SplitLinearFunction = next(value for name, value in list(globals().items())
                           if name.startswith("_") and isinstance(value, type)
                           and issubclass(value, torch.autograd.Function))
'''}, "zero": ["split"], "full": ["schedules", "executor"]},
    # A layerwise_step that only moves the messages (forward under no_grad, zeros sent back as
    # the gradient, an empty BW0) and returns the loss of a zero output, with a global forward
    # hook registered through torch's own API: every TinyMLP forward in the kernel then returns
    # zeros, so the one-process reference the checks compute there learns nothing either, as the
    # stub's ranks do. Nothing the checks read is replaced; the hook sits in torch's registry.
    "reference_rewritten_by_a_global_hook": {"cells": {"layerwise": '''
import torch.nn.modules.module as _mm
from nanoparallel.lessons import models as _models

def _no_learning(module, args, out):
    if type(module) is _models.TinyMLP:
        return out * 0

_mm.register_module_forward_hook(_no_learning)


def layerwise_step(stage, batch, times):
    rank, P = dist.get_rank(), dist.get_world_size()
    x, targets = batch
    if rank > 0:
        x = torch.empty(x.shape[0], stage.in_features)
        dist.recv(x, rank - 1)
    with region("F0", device_time=times["F"]):
        with torch.no_grad():
            out = stage(x)
    if rank < P - 1:
        dist.send(out, rank + 1)
        dist.recv(torch.empty_like(out), rank + 1)
    with region("BW0", device_time=times["B"] + times["W"]):
        pass
    if rank > 0:
        dist.send(torch.zeros_like(x), rank - 1)
    return F.mse_loss(torch.zeros_like(targets), targets).item() if rank == P - 1 else None
'''}, "zero": ["layerwise"], "full": []},
    # The engine's functions replaced by another library's objects beside right answers.
    "library_objects": library_objects.case("04_pipeline"),
    # The answer is handed the checks' own objects: B's upstream gradient is the very tensor
    # the checks then fed their nn.Linear reference, so a SplitLinearFunction whose gradients are
    # twice too large zeroed it, and the reference's expected gradients became zeros too. The
    # checks now compute the reference first and hand the answer a copy; nothing tells this
    # from an honest answer, so it is not flagged: it must only gain nothing.
    "the_checks_gradient_zeroed": {"flagged": False, "cells": {"split": '''
def accumulate_grad(param, grad):
    param.grad = grad if param.grad is None else param.grad + grad


class SplitLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store):
        ctx.save_for_backward(x)
        ctx.weight, ctx.bias, ctx.store = weight, bias, store
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        weight, bias = ctx.weight, ctx.bias
        grad_out.zero_()                    # the checks' own gradient

        @torch.no_grad()
        def weight_grad():                  # wrong: twice the weight gradient
            g = grad_out.reshape(-1, grad_out.shape[-1])
            accumulate_grad(weight, 2 * (g.T @ x.reshape(-1, x.shape[-1])))
            if bias is not None:
                accumulate_grad(bias, 2 * g.sum(0))

        ctx.store.put(weight_grad)
        return (2 * (grad_out @ weight) if ctx.needs_input_grad[0] else None), None, None, None
'''}, "zero": ["split"], "full": ["schedules", "executor"]},
    # B computes the weight gradient too, hidden from the check's FLOP counter (a torch mode the
    # answer suspends), and W writes the FLOPs the check expects into that counter: 3/3 unflagged.
    # Nothing in-process tells this from an honest answer, so it must only gain nothing: hidden
    # checks change B's upstream gradient in place between B and W, which a deferred product
    # follows and one made in B does not.
    "weight_gradient_made_in_b_past_the_counter": {"flagged": False, "cells": {"split": '''
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode


def accumulate_grad(param, grad):
    param.grad = grad if param.grad is None else param.grad + grad


def _count_flops(n):
    """Writes n matrix-multiply FLOPs into the FlopCounterMode the check holds, if any."""
    mode = _get_current_dispatch_mode()
    counter = getattr(mode, "counter", None)
    if counter is not None:
        counter.flop_counts["Global"][torch.ops.aten.mm] += n


class SplitLinearFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight, bias, store):
        ctx.save_for_backward(x)
        ctx.weight, ctx.bias, ctx.store = weight, bias, store
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        weight, bias = ctx.weight, ctx.bias
        g, x2 = grad_out.reshape(-1, grad_out.shape[-1]), x.reshape(-1, x.shape[-1])
        with _disable_current_modes():      # the weight product, out of the check's FLOP counter
            gw = g.T @ x2
        gb = g.sum(0) if bias is not None else None
        flops = 2 * g.shape[0] * g.shape[1] * x2.shape[1]

        def weight_grad():
            _count_flops(flops)                 # the W FLOPs the check expects, written in
            accumulate_grad(weight, gw)
            if bias is not None:
                accumulate_grad(bias, gb)

        ctx.store.put(weight_grad)
        grad_x = grad_out @ weight if ctx.needs_input_grad[0] else None
        return grad_x, None, None, None
'''},
                                                   "zero": ["split"], "full": []},
    # An executor whose B ops do their W's work too, through the base class's pop (past the
    # checks' timed store), and whose W ops write the note the timed store would have written:
    # executor 4/4 and zb_h1 3/3, unflagged, while the checks read when pop was called. They now
    # read when each deferred weight gradient's work ran, noted by the work itself.
    "weight_work_done_in_b_past_the_notes": {"flagged": False, "cells": {"executor": '''
def run_schedule(stage, batch, times, ops, m, store):
    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    micro = split_batch(batch, m)
    inputs, outputs, sends, total = {}, {}, [], 0.0
    for kind, i in ops:
        if kind == "F":
            x, targets = micro[i]
            if rank > 0:
                x = torch.empty(x.shape[0], stage.in_features)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            with region(f"F{i}", device_time=times["F"]):
                out = stage(x)
                if last:
                    out = F.mse_loss(out, targets) / m
                    total += out.item()
            inputs[i], outputs[i] = x, out
            if not last:
                sends.append(dist.isend(out.detach(), rank + 1))
        elif kind in ("B", "BW"):
            out, x = outputs.pop(i), inputs.pop(i)
            grad = None
            if not last:
                grad = torch.empty_like(out)
                dist.recv(grad, rank + 1)
            seconds = times["B"] + (times["W"] if kind == "BW" else 0.0)
            with region(f"{kind}{i}", device_time=seconds):
                torch.autograd.backward(out, grad)
                store.flush(i)
                if kind == "BW":
                    store.pop(i)
                else:
                    WeightGradStore.pop(store, i)       # W's work here in B, past the check's TimedStore
            if rank > 0:
                sends.append(dist.isend(x.grad, rank - 1))
            del out, x
        else:  # "W": nothing left to do
            with region(f"W{i}", device_time=times["W"]):
                if hasattr(store, "calls"):
                    store.calls.append(("pop", i, current_tracer().now()))   # the note TimedStore would write
    for work in sends:
        work.wait()
    return total if last else None
'''},
                                             "zero": ["executor", "zb_h1"], "full": []},
    # A GPipe that keeps every micro-batch's output and input to the end of the step: the stage
    # run as type(stage).forward(stage, x), past the wrapper on its forward that the old watch
    # put there, and the inputs kept as detached views, which a watch of the tensor objects never
    # sees (gpipe 3/3 before). The allocator's own events now show the blocks alive, whoever holds
    # them. A wrong answer that cannot be told from an honest one: not flagged.
    "activations_kept_past_the_release_watch": {"flagged": False, "cells": {"gpipe": '''
def gpipe_step(stage, batch, times, m):
    rank, P = dist.get_rank(), dist.get_world_size()
    last = rank == P - 1
    inputs, outputs, kept, total = [], [], [], 0.0
    for i, (x, targets) in enumerate(split_batch(batch, m)):
        if rank > 0:
            x = torch.empty(x.shape[0], stage.in_features)
            dist.recv(x, rank - 1)
            x.requires_grad_()
        with region(f"F{i}", device_time=times["F"]):
            out = type(stage).forward(stage, x)
            if last:
                out = F.mse_loss(out, targets) / m
                total += out.item()
        if not last:
            dist.send(out.detach(), rank + 1)
        inputs.append(x)
        outputs.append(out)
        kept.append(x.detach())
    for i in range(m):
        grad = None
        if not last:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, rank + 1)
        with region(f"BW{i}", device_time=times["B"] + times["W"]):
            outputs[i].backward(grad)
        if rank > 0:
            dist.send(inputs[i].grad, rank - 1)
        inputs[i] = None
    return total if last else None
'''}, "zero": ["gpipe"], "full": []},
}
