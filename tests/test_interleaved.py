"""Interleaved 1F1B on paper: Megatron-LM's order, its bubble and its memory against the papers."""
import pytest

from nanoparallel.lessons.pipeline.interleaved import ChunkOp, interleaved_1f1b_schedule, simulate_interleaved
from nanoparallel.lessons.pipeline.schedule import Op, ScheduleError, simulate


@pytest.mark.parametrize("p, v, m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (8, 2, 16), (4, 4, 12)])
def test_bubble_is_one_f_one_b_s_over_v(p, v, m):
    """Narayanan et al. 2021, section 2.2.2: (p - 1)/(v m) of the compute, for any op times."""
    for t_f, t_b, t_w in ((1, 1, 1), (1, 1.5, 0.5)):
        t = simulate_interleaved(interleaved_1f1b_schedule(p, v, m), v, t_f, t_b, t_w)
        assert t.bubble_time == pytest.approx((p - 1) * (t_f + t_b + t_w) / v)
        assert t.bubble_fraction == pytest.approx((p - 1) / (v * m))


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (4, 3, 8), (8, 2, 16)])
def test_stage_0_holds_one_plus_p_minus_1_over_pv_of_one_f_one_b_s_peak(p, v, m):
    """Korthikanti et al. 2022, section 4.2.3: the first stage's activations grow by (p-1)/(p v)."""
    t = simulate_interleaved(interleaved_1f1b_schedule(p, v, m), v)
    assert t.peak_in_flight[0] / v / p == pytest.approx(1 + (p - 1) / (p * v))


def test_one_chunk_is_plain_one_f_one_b():
    schedule = interleaved_1f1b_schedule(4, 1, 8)
    plain = [[Op("BW" if op.kind == "BW" else "F", op.mb) for op in ops] for ops in schedule]
    assert simulate(plain).bubble_time == simulate_interleaved(schedule, 1).bubble_time == 9
    assert simulate(plain).peak_in_flight == [4, 3, 2, 1]


def test_every_device_runs_every_chunk_of_every_micro_batch_once():
    for ops in interleaved_1f1b_schedule(4, 2, 8):
        assert sorted(ops) == sorted(ChunkOp(k, i, c) for k in ("F", "BW") for i in range(8) for c in range(2))


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="multiple of p"):
        interleaved_1f1b_schedule(4, 2, 6)
    with pytest.raises(ScheduleError, match="ChunkOp"):
        simulate_interleaved([[Op("F", 0)]], v=2)
