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
    # The engine's functions replaced by another library's objects beside right answers.
    "library_objects": library_objects.case("04_pipeline"),
}
