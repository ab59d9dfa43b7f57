"""Pipeline schedules as data: the validator's verdicts and messages, the simulator's times,
bubble and memory, measured timelines read from a trace, and torch's schedules as data.
Pure logic, no processes. The schedules here are written out by hand: the course's generators
are the learner's answers and live only in the solution notebook."""
import pytest

from nanoparallel.lessons.pipeline.schedule import (Op, ScheduleError, Timeline, parse_op, peak_held, peak_in_flight, peak_memory, simulate,
                                   timeline_from_trace, validate)
from nanoparallel.lessons.pipeline.torch_schedules import TorchScheduleUnavailable, torch_schedule
from nanoparallel.runtime.trace import Trace, TraceEvent


def ops(text):
    """``"F0 F1 BW0"`` -> [Op("F", 0), Op("F", 1), Op("BW", 0)]."""
    return [parse_op(word) for word in text.split()]


GPIPE_2x2 = [ops("F0 F1 BW0 BW1"), ops("F0 F1 BW0 BW1")]
ONE_F_ONE_B_2x3 = [ops("F0 F1 BW0 F2 BW1 BW2"), ops("F0 BW0 F1 BW1 F2 BW2")]
ZB_H1_2x2 = [ops("F0 F1 B0 W0 B1 W1"), ops("F0 B0 F1 B1 W0 W1")]


def test_op_names_round_trip():
    assert [str(op) for op in ops("F3 BW12 B0 W7")] == ["F3", "BW12", "B0", "W7"]
    assert parse_op("loss") is None and parse_op("F") is None and parse_op("BWx") is None
    assert repr(Op("B", 2)) == "Op('B', 2)"


def test_valid_schedules_pass():
    for schedule in (GPIPE_2x2, ONE_F_ONE_B_2x3, ZB_H1_2x2, [ops("F0 BW0")]):
        validate(schedule)
    validate([ops("F0 BW0"), ops("F0 BW0")], m=1)


@pytest.mark.parametrize("schedule, m, words", [
    ("not a list", None, "one list of ops per stage"),
    ([["F0"]], None, "is not an op"),
    ([[Op("X", 0)]], None, "is not an op"),
    ([[Op("F", -1)]], None, "is not an op"),
    ([ops("F0 BW0 F0 BW1")], 2, "F0 appears twice"),
    ([ops("F1 BW1")], 2, "F0 is missing"),
    ([ops("F0 F1 BW0")], 2, "BW1 is missing"),
    ([ops("F0 B0")], 1, "W0 is missing"),
    ([ops("F0 BW0 W0")], 1, "BW0 and also W0"),
    ([ops("BW0 F0")], 1, "comes before F0"),
    ([ops("F0 W0 B0")], 1, "W0 at position 1 comes before B0"),
    ([ops("F0 F2 BW0 BW2")], 2, "only m=2"),
])
def test_invalid_schedules_say_what_is_wrong(schedule, m, words):
    with pytest.raises(ScheduleError, match=words):
        validate(schedule, m)


def test_a_deadlock_names_what_each_stage_waits_for():
    broken = [ops("F0 BW0 F1 BW1"), ops("F1 F0 BW0 BW1")]
    with pytest.raises(ScheduleError) as caught:
        validate(broken)
    text = str(caught.value)
    assert text.startswith("deadlock")
    assert "stage 0 waits at BW0 (position 1) for B0 from stage 1" in text
    assert "stage 1 waits at F1 (position 0) for F1 from stage 0" in text


def test_simulated_gpipe_and_1f1b_have_the_same_bubble():
    for schedule in (GPIPE_2x2, [ops("F0 F1 BW0 BW1"), ops("F0 BW0 F1 BW1")]):
        t = simulate(schedule, t_f=1, t_b=1, t_w=1)
        assert t.busy(0) == t.busy(1) == 6                  # m (T_F + T_B + T_W)
        assert t.step_time == 9 and t.bubble_time == 3      # (p-1)(T_F + T_B + T_W)
        assert t.bubble_fraction == pytest.approx(1 / 2)    # (p-1)/m


def test_simulated_times_of_each_op():
    t = simulate(ONE_F_ONE_B_2x3, t_f=1, t_b=2, t_w=1)
    assert [(str(op), a, b) for op, a, b in t.ops[1]] == [
        ("F0", 1, 2), ("BW0", 2, 5), ("F1", 5, 6), ("BW1", 6, 9), ("F2", 9, 10), ("BW2", 10, 13)]
    assert t.step_time == 16 and t.busy(0) == t.busy(1) == 12
    assert t.bubble_time == 4 == (2 - 1) * (1 + 2 + 1)
    assert t.p == 2 and t.m == 3


def test_zero_bubble_split_fills_the_bubble():
    one_f_one_b = simulate([ops("F0 F1 BW0 BW1"), ops("F0 BW0 F1 BW1")], 1, 1, 1)
    zb = simulate(ZB_H1_2x2, 1, 1, 1)
    assert zb.bubble_time == 1 == (2 - 1) * (1 + 1 - 1)
    assert one_f_one_b.bubble_time == 3 * zb.bubble_time


def test_message_time_delays_every_hop():
    assert simulate(GPIPE_2x2, 1, 1, 1, t_comm=0.5).step_time == simulate(GPIPE_2x2, 1, 1, 1).step_time + 1.0


def test_peak_in_flight_counts_forwards_until_their_input_backward():
    assert peak_in_flight(ops("F0 F1 F2 BW0 BW1 BW2")) == 3
    assert peak_in_flight(ops("F0 F1 BW0 F2 BW1 BW2")) == 2
    assert peak_in_flight(ops("F0 B0 F1 B1 W0 W1")) == 1  # counts F to B only: M_B, not what W keeps
    assert simulate(GPIPE_2x2).peak_in_flight == [2, 2]


def test_peak_memory_keeps_m_w_from_b_until_w():
    """Qi et al. 2024, Table 1: F leaves M_B, B frees all but M_W, W frees the rest, BW all."""
    order = ops("F0 B0 F1 B1 W0 W1")
    assert peak_memory(order, m_w=0.0) == 1 and peak_held(order) == 2
    assert peak_memory(order, m_w=0.25) == pytest.approx(1.25)     # F1 on top of what W0 still needs
    assert peak_memory(ops("F0 F1 BW0 BW1"), m_w=0.9) == 2         # BW frees everything at once
    with pytest.raises(ValueError, match="m_w"):
        peak_memory(order, m_w=1.5)


def test_zb_h1_style_postponed_ws_cost_the_later_stages_s_times_m_w():
    """W(i - s) after B(i): stage s holds (p - s) M_B + s M_W at its peak; stage 0 as 1F1B."""
    p, m = 4, 8
    schedule = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        order, done_w = [Op("F", i) for i in range(warmup)], 0
        for i in range(m):
            if warmup + i < m:
                order.append(Op("F", warmup + i))
            order.append(Op("B", i))
            if i >= s:
                order.append(Op("W", done_w))
                done_w += 1
        schedule.append(order + [Op("W", i) for i in range(done_w, m)])
    t = simulate(schedule)
    assert t.peak_in_flight == [4, 3, 2, 1]
    assert t.peak_held == [4, 4, 4, 4]
    assert t.peak_memory(0.28) == pytest.approx([(p - s) + s * 0.28 for s in range(p)])


def _region(rank, name, start, end):
    return TraceEvent(rank=rank, op=name, peer=None, group=(rank,), bytes_sent=0, bytes_recv=0,
                      start=start, end=end, kind="compute")


def test_timeline_from_a_trace_reads_op_regions_and_messages():
    events = [_region(0, "F0", 0.10, 0.20), _region(0, "BW0", 0.50, 0.70), _region(0, "other", 0.0, 0.05),
              _region(1, "F0", 0.25, 0.35), _region(1, "BW0", 0.35, 0.45),
              TraceEvent(rank=0, op="recv", peer=1, group=(0, 1), bytes_sent=0, bytes_recv=64, start=0.2, end=0.22),
              TraceEvent(rank=1, op="isend", peer=0, group=(0, 1), bytes_sent=64, bytes_recv=0, start=0.19, end=0.6)]
    t = timeline_from_trace(Trace(events, world_size=2))
    assert t.source == "measured"
    assert t.order() == [ops("F0 BW0"), ops("F0 BW0")]
    assert t.start == pytest.approx(0.10) and t.step_time == pytest.approx(0.60)
    assert t.busy(0) == pytest.approx(0.30) and t.bubble_time == pytest.approx(0.30)
    assert t.comm[0] == [(0.2, 0.22)] and t.comm[1] == []  # receives only: an isend's span is not a wait


def test_an_empty_timeline_is_harmless():
    t = Timeline([[], []])
    assert t.step_time == 0 and t.bubble_time == 0 and t.bubble_fraction == 0 and t.m == 0


def test_torch_schedules_as_data_or_a_clear_refusal():
    try:
        gpipe = torch_schedule("GPipe", 2, 2)
    except TorchScheduleUnavailable as exc:  # a torch without the private helper: say so
        assert "cannot list" in str(exc)
        return
    assert gpipe == GPIPE_2x2
    with pytest.raises(TorchScheduleUnavailable, match="cannot list the ops of 'NoSuchSchedule'"):
        torch_schedule("NoSuchSchedule", 2, 2)
