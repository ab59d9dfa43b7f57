"""What ranks send back, decoded as data only under grading (nanoparallel/runtime/rank_data.py):
every value an exercise returns comes back the same, and bytes that would run code in the kernel
as they are unpickled are refused."""
from __future__ import annotations

import collections
import pickle

import cloudpickle
import pytest
import torch

from nanoparallel.runtime import rank_data
from nanoparallel.runtime.trace import TraceEvent

DATA = [torch.ones(3), torch.arange(5, dtype=torch.int64)[1:], torch.zeros(2, 2, dtype=torch.float16).t(),
        torch.ones(4)[::2], torch.tensor(True), torch.empty(0), torch.ones(2).to(torch.bfloat16),
        torch.nn.Parameter(torch.ones(2)), torch.ones(3, requires_grad=True), torch.Size([2, 3]),
        torch.float32, torch.device("cpu"), torch.strided,
        {"a": [1, 2.0, None, "x", (1,)]}, {1, 2}, frozenset({3}), collections.OrderedDict(a=1), 3 + 4j,
        b"x", bytearray(b"y"), range(3), slice(1, 2), ValueError("v"), [TraceEvent(0, "send", 1, (0, 1), 4, 0, 0.0, 0.1)]]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (type(a) is type(b) and a.dtype == b.dtype and a.stride() == b.stride()
                and a.requires_grad == b.requires_grad and torch.equal(a, b))
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize("value", DATA, ids=lambda v: type(v).__name__)
def test_data_comes_back_the_same(value):
    assert _same(rank_data.loads(cloudpickle.dumps(value)), value)


class _RunsCode:
    def __reduce__(self):
        return (exec, ("import sys; sys.ran_in_the_kernel = True",))


def _build_on_a_class() -> bytes:
    """Hand-made pickle bytes: the class TraceEvent, then BUILD with slot state {"op": "forged"},
    which would set the attribute on the class itself."""
    return (b"\x80\x04cnanoparallel.runtime.trace\nTraceEvent\n"
            b"N}\x8c\x02op\x8c\x06forgeds\x86b.")


@pytest.mark.parametrize("value", [_RunsCode(), lambda: 1, torch.nn.Linear(2, 2), collections.Counter(a=1)],
                         ids=["exec", "a function by value", "a module", "another container"])
def test_what_is_not_data_is_refused_with_what_to_return(value):
    import sys
    with pytest.raises(rank_data.NotData, match="may return only tensors, numbers, strings"):
        rank_data.loads(cloudpickle.dumps(value))
    assert not hasattr(sys, "ran_in_the_kernel")


def test_attributes_cannot_be_set_on_an_allowed_class():
    with pytest.raises(rank_data.NotData, match="attributes set on a class or a function"):
        rank_data.loads(_build_on_a_class())
    assert TraceEvent.__dict__.get("op") != "forged"


def test_a_cluster_under_grading_refuses_code_in_a_reply_and_keeps_working(cluster4, monkeypatch):
    import sys
    monkeypatch.setattr(rank_data, "decode", rank_data.loads)
    monkeypatch.setattr(rank_data, "receive", rank_data._receive_data)
    with pytest.raises(rank_data.NotData, match="builtins.exec is not data"):
        cluster4.run(lambda: _RunsCode())
    assert not hasattr(sys, "ran_in_the_kernel")
    out = cluster4.run(lambda: torch.ones(2))
    assert all(torch.equal(t, torch.ones(2)) for t in out)


def test_storages_are_refused_while_the_weights_only_loader_has_extra_globals(monkeypatch):
    """Anything registered since the engine was imported, torch's own functions included (the
    loader would call a hook registration as readily as print)."""
    import torch._weights_only_unpickler as loader
    before = set(loader._marked_safe_globals_set)
    # as the engine's import under grading takes it
    monkeypatch.setattr(rank_data, "_SAFE_AT_START", {id(g): g for g in before})
    for extra in (print, torch.nn.modules.module.register_module_forward_hook):
        torch.serialization.add_safe_globals([extra])
        try:
            with pytest.raises(rank_data.NotData, match="weights-only loader"):
                rank_data.loads(cloudpickle.dumps(torch.ones(2)))
        finally:
            loader._marked_safe_globals_set.clear()
            loader._marked_safe_globals_set.update(before)
    assert torch.equal(rank_data.loads(cloudpickle.dumps(torch.ones(2))), torch.ones(2))
    # torch registers its own classes as it imports its modules (DTensor's, dynamo's)
    torch.serialization.add_safe_globals([torch.nn.Linear])
    try:
        assert torch.equal(rank_data.loads(cloudpickle.dumps(torch.ones(2))), torch.ones(2))
    finally:
        loader._marked_safe_globals_set.clear()
        loader._marked_safe_globals_set.update(before)


def test_a_dotted_name_and_a_missing_module_are_refused():
    dotted = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x1cnanoparallel.runtime.cluster\x8c\x16mp.AuthenticationError\x93)R."
    missing = b"\x80\x04cnanoparallel.no_such_module\nThing\n)R."
    for data in (dotted, missing):
        with pytest.raises(rank_data.NotData, match="is not data"):
            rank_data.loads(data)
