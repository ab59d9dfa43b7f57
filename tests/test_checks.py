"""The graded-cell assertions: they pass on right answers and say what is wrong otherwise."""
import pytest
import torch

from nanoparallel.grading.checks import (assert_all_waited, assert_bytes_sent, assert_close, assert_ops_used,
                                 assert_ops_within, assert_peers, assert_ranks_close)
from nanoparallel.runtime.trace import Trace, TraceEvent


def event(rank, op, peer=None, sent=0, recv=0, end=1.0):
    return TraceEvent(rank=rank, op=op, peer=peer, group=(0, 1, 2), bytes_sent=sent, bytes_recv=recv,
                      start=0.0, end=end)


RING = Trace([event(r, "send", (r + 1) % 3, sent=8) for r in range(3)]
             + [event(r, "recv", (r - 1) % 3, recv=8) for r in range(3)], world_size=3)


def test_ranks_close_passes_and_names_rank_and_error():
    assert_ranks_close([torch.ones(3), torch.zeros(3)], [torch.ones(3), torch.zeros(3)])
    with pytest.raises(AssertionError, match=r"rank 1: grad: values differ \(max abs error 0.5 at flat index 2"):
        assert_ranks_close([torch.ones(3), torch.tensor([0, 0, 0.5])], [torch.ones(3), torch.zeros(3)], name="grad")


@pytest.mark.parametrize("got,expected,message", [
    (torch.ones(2, 3), torch.ones(3, 2), "expected shape"),
    (torch.ones(3, dtype=torch.float64), torch.ones(3), "expected dtype"),
    (None, torch.ones(3), "got None. Does your function return"),
    ([1.0], [1.0, 2.0], "sequence of 2 items"),
    ({"a": 1.0}, {"b": 1.0}, "keys"),
    (281.0, 282.0, "expected 282, got 281"),
    ("x", 1.0, "expected 1, got 'x'"),
])
def test_close_explains_each_mismatch(got, expected, message):
    with pytest.raises(AssertionError, match=message):
        assert_close(got, expected, rtol=1e-6)


def test_values_that_answer_for_themselves_are_not_taken_for_answers():
    """A test double passes isinstance (spec=) or equals everything (ANY): the answer's own type
    decides, read with type(), before its class could decide a comparison."""
    from unittest import mock
    for got, expected in ((mock.ANY, "ring"), (mock.ANY, None), (mock.ANY, [1, 2]), (mock.ANY, {"a": 1}),
                          (mock.MagicMock(spec=float), 1.0), (mock.MagicMock(spec=torch.Tensor), torch.ones(2)),
                          (mock.MagicMock(spec=dict), {"a": 1}), (mock.MagicMock(spec=list), [1.0]), (1, True)):
        with pytest.raises(AssertionError):
            assert_close(got, expected)
    assert_close("ring", "ring")
    assert_close(True, True)


def test_close_accepts_nested_and_scalar_tensors():
    assert_close({"w": [torch.ones(2)], "loss": torch.tensor(2.0)}, {"w": [torch.ones(2)], "loss": 2.0})
    assert_ranks_close([1, 2], [1, 2])
    with pytest.raises(AssertionError, match="results from 3 ranks, got 2"):
        assert_ranks_close([1, 2], [1, 2, 3])


def test_ops_within_and_used():
    assert_ops_within(RING, {"send", "recv"})
    with pytest.raises(AssertionError, match="rank 0 called send, which this exercise does not allow"):
        assert_ops_within(RING, {"recv"})
    assert_ops_used(RING, {"send"})
    with pytest.raises(AssertionError, match="rank 0 made none of the calls isend"):
        assert_ops_used(RING, {"isend"})


def test_peers():
    assert_peers(RING, lambda r: {(r + 1) % 3, (r - 1) % 3}, "ring neighbours")
    with pytest.raises(AssertionError, match=r"rank 0 exchanged messages with rank\(s\) \[2\]; its ring neighbours are \[1\]"):
        assert_peers(RING, lambda r: {(r + 1) % 3}, "ring neighbours")


def test_bytes_sent_with_slack_and_formula():
    assert_bytes_sent(RING, 8)
    assert_bytes_sent(RING, [9, 9, 9], slack=1)
    with pytest.raises(AssertionError, match=r"rank 0 sent 8 bytes; expected 12 ± 2 \(2\(P-1\)/P·N\)"):
        assert_bytes_sent(RING, 12, slack=2, formula="2(P-1)/P·N")


def test_all_waited():
    assert_all_waited(RING)
    stray = Trace([event(1, "isend", 2, sent=4, end=None)], world_size=3)
    with pytest.raises(AssertionError, match=r"rank 1: isend\(dst=2\) was never waited on"):
        assert_all_waited(stray)
