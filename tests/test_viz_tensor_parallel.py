"""Notebook 05's pictures: the sharding diagram and the activation-memory calculator, driven
headless (set ``.value``). Shapes are written out by hand, no processes."""
import io

import pytest

from nanoparallel.lessons.viz.tensor_parallel import (MODEL_PRESETS, activation_memory_calculator, layer_bytes,
                                              plot_activation_memory, plot_sharding, sharding_explorer)

pytestmark = pytest.mark.usefixtures("quiet_pictures")
H = 8
FULL = {"attn.q.weight": (H, H), "attn.k.weight": (H, H), "attn.v.weight": (H, H), "attn.proj.weight": (H, H),
        "mlp.fc.weight": (4 * H, H), "mlp.proj.weight": (H, 4 * H), "ln_1.weight": (H,)}


def megatron(t):
    col, row = lambda o, i: (o // t, i), lambda o, i: (o, i // t)
    return [{n: (col(*s) if n.split(".")[1] in ("q", "k", "v", "fc") else row(*s)) if len(s) == 2 else s
             for n, s in FULL.items()} for _ in range(t)]


def korthikanti(s, b, h, a, t=1, sequence_parallel=False):
    core = 5 * a * s / (h * t)
    return s * b * h * ((34 / t) if sequence_parallel else (10 + 24 / t)) + s * b * h * core


def rects(fig, rank):
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == f"rank{rank}"]


def render(fig):
    fig.savefig(io.BytesIO(), format="png")


def test_each_rank_owns_one_stripe_of_every_matrix_drawn_to_scale():
    fig = plot_sharding(FULL, megatron(4))
    render(fig)
    for r in range(4):
        assert len(rects(fig, r)) == 6  # q, k, v, proj, fc, proj
    fc = [p for p in rects(fig, 0) if p.get_height() == pytest.approx(1.0) and p.get_width() == pytest.approx(1.0)]
    assert fc  # fc: h x 4h split by columns into 4 stripes of h x h
    proj = [max(rects(fig, r), key=lambda p: p.get_x()) for r in range(4)]  # mlp.proj, drawn last
    assert all(p.get_height() == pytest.approx(1.0) and p.get_width() == pytest.approx(1.0) for p in proj)
    assert [p.get_y() for p in proj] == pytest.approx([3, 2, 1, 0])  # 4h x h split by rows: rank 0 on top
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "f" in texts.split() and "f̄" in texts.split() and "g" not in texts.split() and "column" in texts and "row" in texts


def test_sequence_parallelism_names_its_collectives():
    fig = plot_sharding(FULL, megatron(2), sequence_parallel=True)
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "all-gather" in texts and "reduce-" in texts and {"g", "ḡ"} <= set(texts.split()) and "sequence shards" in fig._suptitle.get_text()


def test_the_explorer_redraws_for_t_and_shows_errors_instead_of_raising():
    box = sharding_explorer(megatron, FULL)
    assert len(rects(box.figure, 3)) == 6
    box.t.value = 8
    assert len(rects(box.figure, 7)) == 6 and box.error is None
    box.sequence_parallel.value = True
    assert "sequence shards" in box.figure._suptitle.get_text()

    def broken(t):
        raise ValueError("4 heads do not split over 8 ranks")
    box = sharding_explorer(broken, FULL)
    assert "do not split" in box.text.value and box.error is not None


def test_memory_bars_are_the_formula_and_recomputation_changes_them():
    gpt3 = dict(s=2048, b=1, h=12288, a=96)
    fig = plot_activation_memory(korthikanti, **gpt3, t=8)
    render(fig)
    heights = [p.get_height() for p in fig.axes[0].patches if p.get_gid() == "activation"]
    assert heights == pytest.approx([korthikanti(**gpt3), korthikanti(**gpt3, t=8), korthikanti(**gpt3, t=8, sequence_parallel=True)])
    assert heights[0] == pytest.approx(2.87e9, rel=2e-3)
    assert layer_bytes(korthikanti, **gpt3, t=8, sequence_parallel=True, recompute="selective") == pytest.approx(2048 * 12288 * 34 / 8)
    assert layer_bytes(korthikanti, **gpt3, t=8, sequence_parallel=False, recompute="full") == 2 * 2048 * 12288


def test_the_calculator_applies_presets_and_follows_its_controls():
    box = activation_memory_calculator(korthikanti)
    name = box.preset.value
    assert (box.s.value, box.h.value, box.a.value) == tuple(MODEL_PRESETS[name][k] for k in ("s", "h", "a"))
    assert box.values[True] < box.values[False] < box.values["none"]
    box.t.value = 1
    assert box.values[True] == pytest.approx(box.values["none"])
    box.h.value = 4096
    assert box.preset.value == "custom"
    box.recompute.value = "full"
    assert box.values[False] == 2 * box.s.value * box.b.value * 4096

    def broken(*args, **kwargs):
        raise ZeroDivisionError("t")
    box = activation_memory_calculator(broken)
    assert box.error is not None and "ZeroDivisionError" in box.table.value
