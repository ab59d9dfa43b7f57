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
}
