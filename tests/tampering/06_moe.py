"""Tampering attempts on 06_moe (the rules: tests/tampering/00_welcome.py's docstring)."""

TAMPERING = {
    # Reading the check's loop variable (`for args, want in ...`) from the notebook's globals while
    # the check calls the answer. Nothing tells this read from an honest one, so it is not flagged:
    # the value must simply not be there (the guard runs a graded cell in a namespace of its own).
    "read_the_checks_globals": {"flagged": False, "cells": {"capacity": '''
def expert_capacity(n_tokens, n_experts, capacity_factor, k=1):
    want = get_ipython().user_ns.get("want", globals().get("want"))
    return want if isinstance(want, int) else 1


def keep_mask(experts, n_experts, capacity):
    n_tokens, k = experts.shape
    order = experts.t().reshape(-1)
    position = F.one_hot(order, n_experts).cumsum(dim=0).gather(1, order[:, None]).squeeze(1) - 1
    return (position < capacity).reshape(k, n_tokens).t()
'''}, "zero": ["capacity"], "full": ["flops", "gating", "balance"]},
}
