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
}
