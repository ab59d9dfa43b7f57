"""Tampering attempts on 03_zero (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py), and a
wrong ZeRO-2 that silences the checks' spy on the parameters."""
import library_objects
import operator_override

# A Zero2Adam that keeps every full gradient until the whole model has its gradient (ZeRO-1's
# memory during backward), and silences every hook on the parameters but its own, among them the
# checks' spy on the gradient bytes held: 3/3 unflagged. The checks now read those bytes from hooks
# on the gradients' accumulators, which the optimizer is never handed. Not flaggable: it must
# gain nothing.
SPY_SILENCED = '''
class Zero2Adam:

    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.params = [p for layer in self.layers for p in layer.parameters()]
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        self.mine = [p.register_post_accumulate_grad_hook(self._on_grad).id for p in self.params]

    def _on_grad(self, param):
        for p, mine in zip(self.params, self.mine):   # silence every other hook on the parameters
            hooks = p._post_accumulate_grad_hooks
            for key in list(hooks):
                if key != mine:
                    hooks[key] = lambda p: None
        if any(p.grad is None for p in self.params):
            return
        for layer, shard in zip(self.layers, self.shards):
            params = list(layer.parameters())
            grad = reduce_scatter_mean(flatten(p.grad for p in params))
            shard.grad = grad if shard.grad is None else shard.grad + grad
            for p in params:
                p.grad = None

    def step(self):
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            load_flat(list(layer.parameters()), gather_shards(shard))

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)
'''

# A ZeRO-2 that keeps every full gradient until the whole model has one, moved out of .grad into
# a dict of its own as each lands, then reduce-scatters every layer: 3/3 unflagged while the
# checks read the bytes held from .grad. The hidden checks now also read the allocator's peak
# during backward. Not flaggable: it must gain nothing.
PARKED_OUTSIDE_GRAD = '''
class Zero2Adam:

    def __init__(self, model, lr=1e-2):
        self.layers = list(model.layers)
        self.params = [p for layer in self.layers for p in layer.parameters()]
        self.shards = [nn.Parameter(shard_of(flatten(layer.parameters()))) for layer in self.layers]
        self.adam = torch.optim.Adam(self.shards, lr=lr)
        self.kept = {}
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad)

    def step(self):
        self.adam.step()
        for layer, shard in zip(self.layers, self.shards):
            load_flat(list(layer.parameters()), gather_shards(shard))

    def zero_grad(self):
        self.adam.zero_grad(set_to_none=True)

    def _on_grad(self, param):
        self.kept[id(param)] = param.grad
        param.grad = None
        if len(self.kept) < len(self.params):
            return
        for layer, shard in zip(self.layers, self.shards):
            params = list(layer.parameters())
            grad = reduce_scatter_mean(flatten(self.kept[id(p)] for p in params))
            shard.grad = grad if shard.grad is None else shard.grad + grad
        self.kept.clear()
'''

TAMPERING = {"torch_library_override": operator_override.case("03_zero"),
             "library_objects": library_objects.case("03_zero"),
             "the_checks_spy_silenced": {"flagged": False, "cells": {"zero2": SPY_SILENCED}, "zero": ["zero2"], "full": []},
             "full_gradients_parked_outside_grad": {"flagged": False, "cells": {"zero2": PARKED_OUTSIDE_GRAD},
                                                    "zero": ["zero2"], "full": []}}
