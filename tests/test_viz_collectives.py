"""Notebook 01's pictures: the ring all-reduce stepper and the cost-vs-size plot.

The schedule logic, the data encoding and the round counting are pure and tested on their own;
plots are read back from their artists; widgets are driven headless. One test runs a real ring
all-reduce on the shared cluster to check the recording end to end.
"""
import io
import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from nanoparallel.lessons import cost
from nanoparallel.runtime.trace import Trace, TraceEvent
from nanoparallel.lessons.viz.collective_costs import (ALGORITHM_LABELS, PRESETS, cost_widget, crossovers, fastest,
                                               plot_collective_costs)
from nanoparallel.lessons.viz.ring import (AG, RS, chunk_sizes, count_rounds, decode_message, decode_value,
                                   encode_input, holding_label, message_rounds, plot_ring_step,
                                   record_ring_all_reduce, ring_stepper, schedule_from_sends,
                                   textbook_schedule)
from nanoparallel.runtime.units import human_bytes, human_rate, human_seconds
from nanoparallel.lessons.viz.widgets import CUSTOM


pytestmark = pytest.mark.usefixtures("quiet_pictures")


def render(fig: Figure) -> None:
    fig.savefig(io.BytesIO(), format="png")


def everyone(P):
    return frozenset(range(P))


# ---- the ring schedule ---------------------------------------------------------------------

@pytest.mark.parametrize("numel, P", [(10, 4), (12, 4), (3, 4), (7, 3), (1, 1), (64, 8)])
def test_chunk_sizes_are_tensor_split_sizes(numel, P):
    assert chunk_sizes(numel, P) == tuple(len(c) for c in torch.arange(numel).tensor_split(P))


@pytest.mark.parametrize("P, numel", [(2, 10), (3, 7), (4, 10), (5, 23), (8, 64)])
def test_textbook_schedule_is_the_ring(P, numel):
    s = textbook_schedule(P, numel, itemsize=4)
    assert len(s.steps) == 2 * (P - 1)
    assert [st.phase for st in s.steps] == [RS] * (P - 1) + [AG] * (P - 1)
    for k, st in enumerate(s.steps):
        assert [(t.src, t.dst) for t in st.transfers] == [(r, (r + 1) % P) for r in range(P)]
        offset = 1 if k < P - 1 else 0
        step = k if k < P - 1 else k - (P - 1)
        assert [t.chunk for t in st.transfers] == [(r - step - offset) % P for r in range(P)]
    after_rs = s.steps[P - 2].holds
    for r in range(P):  # rank r holds the full sum of chunk r, as dist.reduce_scatter leaves it
        assert after_rs[r][r] == everyone(P)
        assert sum(h == everyone(P) for h in after_rs[r]) == 1
    assert all(h == everyone(P) for row in s.steps[-1].holds for h in row)
    sizes, sent = s.chunk_sizes, s.bytes_sent(len(s.steps))
    for r in range(P):  # every chunk but its own in RS, every chunk but r+1's in AG
        assert sent[r] == 4 * (2 * numel - sizes[r] - sizes[(r + 1) % P])
        assert abs(sent[r] - 2 * (P - 1) / P * numel * 4) <= 4 * math.ceil(numel / P)
    assert s.bytes_sent(0) == [0] * P


def test_reduce_scatter_steps_add_one_rank_per_step():
    s = textbook_schedule(4, 8)
    for k in range(3):
        sizes = sorted(len(h) for row in s.steps[k].holds for h in row)
        assert max(sizes) == k + 2


def test_one_rank_has_nothing_to_do():
    s = textbook_schedule(1, 5)
    assert s.steps == () and s.initial == ((frozenset({0}),),)
    fig = plot_ring_step(s, 0)
    render(fig)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="1 to 8 ranks"):
        textbook_schedule(9, 10)
    with pytest.raises(ValueError, match="at least one element"):
        textbook_schedule(4, 0)


# ---- reading messages from their data ------------------------------------------------------

def test_encoded_partial_sums_decode_to_chunk_and_ranks():
    P, numel = 4, 10
    inputs = [torch.tensor(encode_input(r, numel, P), dtype=torch.float64) for r in range(P)]
    chunks = [x.tensor_split(P) for x in inputs]
    for c in range(P):
        for subset in ({0}, {1, 3}, {0, 1, 2, 3}, {2}):
            partial = sum(chunks[r][c] for r in subset)
            assert decode_message(partial.tolist(), P) == (c, frozenset(subset))
    assert decode_value(0.0, P) is None                       # an uninitialised buffer
    assert decode_value(float(sum(inputs)[0]) / 4, P) is None  # an average is no sum of inputs
    assert decode_value(float("nan"), P) is None
    mixed = torch.cat([chunks[0][0], chunks[1][1]]).tolist()   # two chunks in one message
    chunk, ranks = decode_message(mixed, P)
    assert chunk is None and ranks == frozenset({0, 1})
    assert decode_message([], P) == (None, frozenset())


def simulate_sends(P, numel, forget_to_add=False):
    """What a ring all-reduce sends, value by value, as the probe would record it."""
    data = [torch.tensor(encode_input(r, numel, P), dtype=torch.float64) for r in range(P)]
    chunks = [d.tensor_split(P) for d in data]
    sends = [[] for _ in range(P)]
    for phase in (RS, AG):
        for s in range(P - 1):
            offset = 1 if phase == RS else 0
            out = [(r, (r - s - offset) % P, chunks[r][(r - s - offset) % P].clone()) for r in range(P)]
            for r, c, values in out:
                sends[r].append(((r + 1) % P, values.tolist(), values.numel() * 8))
            for r, c, values in out:
                target = chunks[(r + 1) % P][c]
                if phase == RS and not forget_to_add:
                    target.add_(values)
                else:
                    target.copy_(values)
    return sends, [d.tolist() for d in data]


def test_recorded_ring_matches_the_textbook():
    sends, final = simulate_sends(4, 10)
    recorded = schedule_from_sends(4, 10, 8, sends, final)
    book = textbook_schedule(4, 10, 8)
    assert recorded.steps == book.steps and recorded.note == ""
    assert recorded.source == "your ring_all_reduce"


def test_a_ring_that_forgets_to_add_shows_what_it_really_sends():
    sends, final = simulate_sends(3, 6, forget_to_add=True)
    s = schedule_from_sends(3, 6, 8, sends, final)
    assert s.steps[1].transfers[0].ranks == frozenset({2})  # it sends what it received, not a+c
    assert any(h != everyone(3) for row in s.steps[-1].holds for h in row)


def test_sends_that_are_no_ring_fall_back_to_the_textbook():
    sends = [[(1, [1.0], 8), (2, [1.0], 8), (3, [1.0], 8)], [(0, [1.0], 8)], [(0, [1.0], 8)], [(0, [1.0], 8)]]
    s = schedule_from_sends(4, 8, 8, sends)
    assert "did not send 2(P-1) = 6 messages per rank" in s.note and "[3, 1, 1, 1]" in s.note
    assert s.steps == textbook_schedule(4, 8, 8).steps


@pytest.mark.parametrize("ranks, P, label", [({0}, 4, "a"), ({0, 1}, 4, "a+b"), ({0, 1, 2}, 4, "a+b+c"),
                                             (set(range(4)), 4, "Σ"), ({0, 1, 2, 3, 5}, 8, "a–d+f"),
                                             ({0, 4, 5, 6, 7}, 8, "a+e–h"), (set(), 4, "?"), ({0}, 1, "a")])
def test_holding_labels(ranks, P, label):
    assert holding_label(frozenset(ranks), P) == label


# ---- the stepper picture -------------------------------------------------------------------

def test_plot_ring_step_draws_cells_arrows_and_bytes():
    s = textbook_schedule(4, 10, 8)
    fig = plot_ring_step(s, 0)
    ax = fig.axes[0]
    assert len([p for p in ax.patches if p.get_gid() == "cell"]) == 16
    assert [p for p in ax.patches if p.get_gid() == "message"] == []
    assert "before the first step" in ax.get_title()
    fig = plot_ring_step(s, 2)
    ax = fig.axes[0]
    arrows = [p for p in ax.patches if p.get_gid() == "message"]
    assert len(arrows) == 3 + 2  # three neighbours in the grid, the wrap-around drawn in two parts
    outlined = [p for p in ax.patches if p.get_gid() == "cell" and p.get_linewidth() > 2]
    assert len(outlined) == 4
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("Σ") == 0 and "a+c+d" in texts
    assert f"sent {s.bytes_sent(2)[0]} B" in texts
    assert "step 2 of 6, reduce-scatter" in ax.get_title() and "120 B" in ax.get_title()
    render(fig)
    fig = plot_ring_step(s, 6)
    assert [t.get_text() for t in fig.axes[0].texts].count("Σ") == 16
    assert "all-gather" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="between 0 and 6"):
        plot_ring_step(s, 7)


def test_ring_stepper_without_a_function_shows_the_textbook():
    box = ring_stepper(world_size=4, numel=10)
    assert box.schedule.source == "textbook schedule" and box.step_slider.max == 6
    first = box.figure
    box.step_slider.value = 3
    assert box.figure is not first and "step 3 of 6" in box.figure.axes[0].get_title()
    box.world_size.value = 3
    assert box.step_slider.max == 4 and box.schedule.world_size == 3
    box.numel.value = 2                     # fewer elements than ranks: still drawn
    assert box.schedule.chunk_sizes == (1, 1, 0)
    render(box.figure)


class FailingCluster:
    world_size = 4

    def resize(self, n):
        self.world_size = n

    def run(self, fn, *args):
        raise RuntimeError("rank 2 hung\nmore detail")


def test_ring_stepper_explains_a_failing_function():
    cluster = FailingCluster()
    box = ring_stepper(lambda x: x, cluster, world_size=4, numel=8)
    assert box.schedule.source == "textbook schedule"
    assert "raised RuntimeError: rank 2 hung;" in box.note.value and "more detail" not in box.note.value
    assert cluster.world_size == 4          # resized back


def test_recording_a_real_ring_all_reduce(cluster4):
    import torch.distributed as dist

    def ring_all_reduce(tensor):  # defined here so that it travels by value
        rank, world = dist.get_rank(), dist.get_world_size()
        chunks = tensor.view(-1).tensor_split(world)
        right, left = (rank + 1) % world, (rank - 1) % world
        for phase in ("rs", "ag"):
            for s in range(world - 1):
                send, recv = ((rank - s - 1) % world, (rank - s - 2) % world) if phase == "rs" else \
                             ((rank - s) % world, (rank - s - 1) % world)
                incoming = torch.empty_like(chunks[recv])
                request = dist.isend(chunks[send], dst=right)
                dist.recv(incoming, src=left)
                request.wait()
                chunks[recv].add_(incoming) if phase == "rs" else chunks[recv].copy_(incoming)
        return tensor

    s = record_ring_all_reduce(cluster4, ring_all_reduce, 3, 7)
    assert cluster4.world_size == 4
    assert s.note == "" and s.steps == textbook_schedule(3, 7, 8).steps

    def naive(tensor):
        if dist.get_rank() == 0:
            for src in (1, 2, 3):
                dist.recv(torch.empty_like(tensor), src=src)
        else:
            dist.send(tensor, dst=0)
        return tensor

    s = record_ring_all_reduce(cluster4, naive, 4, 8)
    assert "sends per rank: [0, 1, 1, 1]" in s.note
    def ping():  # the probe left torch.distributed as it was: isend is traced once, as isend
        if dist.get_rank() == 0:
            dist.isend(torch.ones(1), dst=1).wait()
        elif dist.get_rank() == 1:
            dist.recv(torch.empty(1), src=0)

    out = cluster4.run(ping)
    assert out.trace.op_counts(0) == {"isend": 1} and out.trace.op_counts(1) == {"recv": 1}


# ---- rounds --------------------------------------------------------------------------------

def ev(rank, op, peer, start, end, world=4):
    return TraceEvent(rank, op, peer, tuple(range(world)), 4, 4, start, end)


def broadcast_trace(edges, world=4):
    """A broadcast trace from (src, dst) edges; each rank sends after it received, in list order."""
    events, t = [], {0: 0.0}
    clock = 0.0
    for src, dst in edges:
        clock += 1.0
        start = max(clock, t.get(src, 0.0))
        events.append(ev(src, "send", dst, start, start + 0.5, world))
        events.append(ev(dst, "recv", src, 0.0, start + 0.5, world))
        t[dst] = start + 0.6
        clock = start
    return Trace(events, world)


def test_rounds_of_a_binomial_tree_a_flat_broadcast_and_a_chain():
    assert count_rounds(broadcast_trace([(0, 1), (0, 2), (1, 3)])) == 2
    assert count_rounds(broadcast_trace([(0, 1), (0, 2), (0, 3)])) == 3
    assert count_rounds(broadcast_trace([(0, 1), (1, 2), (2, 3)])) == 3
    assert count_rounds(broadcast_trace([(0, 2), (0, 1), (2, 3)])) == 2
    assert count_rounds(Trace([], 4)) == 0


def test_rounds_of_a_ring_and_of_a_reduce_to_one_root():
    P, events = 4, []
    for s in range(P - 1):  # isend, then recv, per step
        for r in range(P):
            events.append(ev(r, "isend", (r + 1) % P, 10 * s, 10 * s + 5))
            events.append(ev(r, "recv", (r - 1) % P, 10 * s + 1, 10 * s + 5))
    assert count_rounds(Trace(events, P)) == P - 1
    reduce = [ev(r, "send", 0, 0.0, r) for r in (1, 2, 3)] + [ev(0, "recv", r, r - 1, r) for r in (1, 2, 3)]
    rounds = {(s.rank, r.rank): k for s, r, k in message_rounds(Trace(reduce, 4))}
    assert rounds == {(1, 0): 1, (2, 0): 2, (3, 0): 3}  # one receive per round at the root


# ---- cost against message size --------------------------------------------------------------

def test_crossovers_match_the_cost_model():
    link = cost.LINKS["nvlink"]
    found = crossovers("all_reduce", 8, link)
    assert [(below, above) for _, below, above in found] == [("tree", "ring")]
    assert found[0][0] == pytest.approx(cost.crossover_size("all_reduce", 8, link, "tree", "ring"))
    pairs = {(below, above) for _, below, above in crossovers("all_reduce", 6, link)}
    assert ("halving_doubling", "ring") in pairs and ("tree", "ring") in pairs
    assert crossovers("all_reduce", 8, link, ["ring", "naive"]) == []
    assert fastest("all_reduce", 8, 8, link) == "halving_doubling"  # tree's rounds, ring's bytes
    assert fastest("all_reduce", 8, 8, link, ["tree", "ring"]) == "tree"
    assert fastest("all_reduce", 1e9, 8, link, ["tree", "ring"]) == "ring"


def test_plot_collective_costs_draws_each_algorithm_and_marks_crossovers():
    link = cost.LINKS["infiniband"]
    fig = plot_collective_costs("all_reduce", 6, link)
    ax = fig.axes[0]
    curves = {line.get_gid(): line for line in ax.lines if (line.get_gid() or "").startswith("curve:")}
    assert set(curves) == {f"curve:{a}" for a in cost.ALGORITHMS}
    x, y = curves["curve:ring"].get_data()
    assert np.allclose(y, cost.collective_time("all_reduce", x, 6, link, "ring"))
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    marks = [line for line in ax.lines if line.get_gid() == "crossover"]
    assert len(marks) == len(crossovers("all_reduce", 6, link)) >= 2
    notes = [t.get_text() for t in ax.texts if t.get_gid() == "crossover-notes"]
    assert len(notes) == 1 and "binomial tree → ring" in notes[0]
    assert "P = 6" in ax.get_title() and "50 GB/s" in ax.get_title()
    assert "ring: 10·α + 1.67·N/β" in [t.get_text() for t in ax.get_legend().get_texts()]
    render(fig)
    fig = plot_collective_costs("all_gather", 4, link, ["ring"])
    assert [line.get_gid() for line in fig.axes[0].lines] == ["curve:ring"]
    with pytest.raises(ValueError, match="at least one algorithm"):
        plot_collective_costs(algorithms=[])
    with pytest.raises(ValueError, match="0 < lo < hi"):
        plot_collective_costs(lo=10, hi=1)


def test_cost_widget_presets_sliders_and_algorithms():
    box = cost_widget()
    nvlink, ib = cost.LINKS["nvlink"], cost.LINKS["infiniband"]
    assert (box.alpha_slider.value, box.beta_slider.value, box.world_size.value) == (nvlink.latency, nvlink.bandwidth, 8)
    assert "NVLink" in box.figure.axes[0].get_title()
    assert "binomial tree is cheaper below" in box.summary.value
    box.preset.value = 1                                   # InfiniBand across 64 GPUs
    assert (box.alpha_slider.value, box.beta_slider.value, box.world_size.value) == (ib.latency, ib.bandwidth, 64)
    assert "P = 64" in box.figure.axes[0].get_title() and "InfiniBand" in box.figure.axes[0].get_title()
    box.alpha_slider.value = 1e-4                          # a slider move leaves the preset
    assert box.preset.value == CUSTOM and "custom link" in box.figure.axes[0].get_title()
    box.op.value = "all_gather"
    assert box.figure.axes[0].get_title().startswith("all_gather")
    for a in ("naive", "tree", "halving_doubling"):
        box.algorithms[a].value = False
    assert [line.get_gid() for line in box.figure.axes[0].lines] == ["curve:ring"]
    assert "no crossover" in box.summary.value
    box.algorithms["ring"].value = False                   # nothing chosen: the ring stays drawn
    assert [line.get_gid() for line in box.figure.axes[0].lines] == ["curve:ring"]
    assert ALGORITHM_LABELS["ring"] in box.summary.value


def sent_back(slider) -> float:
    """What a FloatLogSlider's front end sends the kernel: log10(value) rounded to the step."""
    k = round((math.log10(slider.value) - slider.min) / slider.step)
    return 10 ** (k * slider.step + slider.min)


def test_cost_widget_presets_survive_the_browsers_rounding():
    """The browser rounds log10 of alpha and beta to the sliders' step and sends them back (3 µs
    returns as 3.2 µs, 400 GB/s as 398 GB/s): the preset must stay chosen, and the labels, title
    and crossovers use its exact link."""
    box = cost_widget()
    seen = []
    box.preset.observe(lambda change: seen.append(change["new"]), names="value")
    assert None not in [v for _, v in box.preset.options]
    for i, (label, key, P) in enumerate(PRESETS):      # preset 0 as displayed, then each chosen
        if i != box.preset.value:
            box.preset.value = i
        link = cost.LINKS[key]
        for slider in (box.alpha_slider, box.beta_slider):
            slider.value = sent_back(slider)
        assert (box.alpha_slider.value, box.beta_slider.value) != (link.latency, link.bandwidth)
        assert box.preset.value == i, label
        assert box.world_size.value == P
        title = box.figure.axes[0].get_title()
        assert f"over {link.name}: α = {human_seconds(link.latency)}, β = {human_rate(link.bandwidth)}" in title
        [alpha_label, beta_label] = [hbox.children[1].value for hbox in box.children[1:3]]
        assert (alpha_label, beta_label) == (human_seconds(link.latency), human_rate(link.bandwidth))
        points = crossovers(box.op.value, P, link)
        assert points and all(f"cheaper below {human_bytes(n)}" in box.summary.value for n, _, _ in points)
    box.preset.value = 0
    box.alpha_slider.value = sent_back(box.alpha_slider)
    assert "α = 3.0 µs, β = 400 GB/s" in box.figure.axes[0].get_title()   # not 3.2 µs, 398 GB/s
    box.world_size.value = 16                          # P away from the preset: custom, as the sliders say
    assert box.preset.value == CUSTOM and "custom link" in box.figure.axes[0].get_title()
    assert "α = 3.2 µs" in box.figure.axes[0].get_title()
    assert None not in seen
