"""The pipeline plumbing of the engine: deferred weight gradients, the count of activations
autograd saves for backward, and regions that occupy emulated device time."""
import time

import pytest
import torch
import torch.nn as nn

from nanoparallel import region
from nanoparallel.lessons.pipeline.stage import WeightGradStore, saved_activations


def test_weight_grad_store_runs_each_micro_batch_when_asked():
    store, ran = WeightGradStore(), []
    store.put(lambda: ran.append("a0"))
    store.put(lambda: ran.append("b0"))
    store.flush(0)
    store.put(lambda: ran.append("a1"))
    store.flush(1)
    assert store.pending() == [0, 1] and ran == []
    assert store.pop(1) == 1 and ran == ["a1"]     # any order a schedule chooses
    assert store.pop(0) == 2 and ran == ["a1", "a0", "b0"]
    assert store.pop(0) == 0 and store.pending() == []


def test_weight_grad_store_counts_what_queued_ws_hold_until_they_run():
    """From flush(i) to pop(i) the tensors a queued computation refers to count as held, each
    storage once, and weights never: a W's inputs and output gradients (Qi et al.'s M_W)."""
    weight = nn.Parameter(torch.ones(4, 4))
    x, grad = torch.ones(8, 4), torch.ones(8, 4)
    with saved_activations(exclude=[weight]) as saved:
        store = WeightGradStore()
        store.memory = saved
        store.put(lambda: (grad.T @ x, weight))
        store.put(lambda: x.sum())              # the same x again: counted once
        store.flush(0)
        assert saved.current == x.nbytes + grad.nbytes
        store.pop(0)
        assert saved.current == 0 and saved.peak == x.nbytes + grad.nbytes


def test_weight_grad_store_frees_what_a_w_held_as_soon_as_it_ran():
    """Counting what queued W's hold must not keep it: the tensors go with pop, without waiting
    for the garbage collector (a search that referred to itself once kept them in a cycle)."""
    import gc
    import weakref
    def put_one(store):
        x = torch.ones(8, 4)
        store.put(lambda: {"x": [x]})  # looked for inside a dict inside a list
        return weakref.ref(x)

    enabled = gc.isenabled()
    gc.disable()
    try:
        with saved_activations() as saved:
            store = WeightGradStore()
            store.memory = saved
            gone = put_one(store)
            store.flush(0)
            assert gone() is not None and saved.current == 8 * 4 * 4
            store.pop(0)
            assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_weight_grad_store_refuses_what_would_mix_micro_batches():
    store = WeightGradStore()
    store.flush(0)
    with pytest.raises(RuntimeError, match="B0 ran twice"):
        store.flush(0)
    store.put(lambda: None)
    with pytest.raises(RuntimeError, match="never flushed"):
        store.pop(0)


def test_saved_activations_count_what_backward_needs_and_release_it():
    stage = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    xs = [torch.randn(4, 8) for _ in range(3)]
    with saved_activations(exclude=list(stage.parameters())) as saved:
        outs = [stage(x) for x in xs]
        per_micro_batch = 4 * 8 * 4 + 2 * 4 * 16 * 4  # the input, GELU's input, the last Linear's input
        assert saved.current == saved.peak == 3 * per_micro_batch
        outs[0].sum().backward()
        assert saved.current == 2 * per_micro_batch  # a backward frees its micro-batch
        del outs
        assert saved.current == 0 and saved.peak == 3 * per_micro_batch


def test_saved_activations_leave_weights_out():
    layer = nn.Linear(4, 4, bias=False)
    with saved_activations() as saved:
        layer(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert saved.peak == 2 * 4 * 4 + 4 * 4 * 4  # the input, and a view of the weight (not the Parameter)
    with saved_activations(exclude=[layer.weight]) as saved:
        layer(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert saved.peak == 2 * 4 * 4  # the input only


def test_region_occupies_its_device_time_outside_a_cluster():
    start = time.perf_counter()
    with region("F0", device_time=0.05):
        pass
    assert time.perf_counter() - start >= 0.05
    with pytest.raises(ValueError, match="device_time"):
        with region("F0", device_time=-1):
            pass


def test_region_device_time_inside_a_cluster_shows_in_the_trace(cluster4):
    def run():
        with region("F0", device_time=0.03):
            pass
        with region("BW0"):
            pass

    out = cluster4.run(run)
    for rank in range(4):
        f, bw = out.trace.regions(rank)
        assert (f.op, bw.op) == ("F0", "BW0")
        assert f.duration >= 0.03 and bw.duration < 0.03


def test_saved_activations_count_each_storage_once():
    """q, k and v save the same input: memory holds it once, and so does the count."""
    q, k, v = (nn.Linear(8, 8) for _ in range(3))
    x = torch.randn(4, 8, requires_grad=True)
    params = [p for m in (q, k, v) for p in m.parameters()]
    with saved_activations(exclude=params) as saved:
        out = q(x) * 1.0 + k(x) + v(x)
        assert saved.current == 4 * 8 * 4
        out.sum().backward()
    assert saved.current == 0


def test_saved_activations_of_a_gpt_block_match_the_derived_fp32_formula():
    """What notebook 05 derives for its blocks (fp32, no dropout): 16 sbh + a s^2 b values, the two
    LayerNorms' mean and 1/std per token, and the causal mask's s^2 booleans."""
    from nanoparallel.lessons.models import Block, GPTConfig
    for b, s, h, a in [(2, 16, 32, 2), (3, 8, 48, 4), (2, 12, 40, 5)]:
        block = Block(GPTConfig(n_embd=h, n_head=a, block_size=s))
        with saved_activations(exclude=list(block.parameters()) + list(block.buffers())) as saved:
            y = block(torch.randn(b, s, h, requires_grad=True))  # keep the graph alive
            assert y is not None and saved.current == 4 * (16 * s * b * h + a * s * s * b + 4 * b * s) + s * s
