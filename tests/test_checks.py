"""The graded-cell assertions: they pass on right answers and say what is wrong otherwise."""
import ast
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from nanoparallel.grading.checks import (assert_all_waited, assert_bytes_sent, assert_close, assert_equal,
                                         assert_ops_used, assert_ops_within, assert_peers, assert_ranks_close,
                                         cost_model_runs, cost_model_unused, spoil)
from nanoparallel.lessons.cost import busiest_rank_bytes
from nanoparallel.runtime.trace import Trace, TraceEvent

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from guarded_execute import cell_kind  # noqa: E402  (which cell is which, as the grader decides)


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


def test_equal_reads_the_answer_s_type_before_it_compares():
    from unittest import mock
    assert_equal([1, (2, "x")], [1, (2, "x")])
    assert_equal({"a": {3, 4}}, {"a": {4, 3}})
    assert_equal(torch.tensor([1, 2]), torch.tensor([1, 2]))
    assert_equal(2858.0, 2858)  # an int and an equal float are the same number
    assert_equal(torch.int64, torch.long)
    for got, expected in ((mock.ANY, 1000), ([mock.ANY, mock.ANY], (5424, 3280)), ((mock.ANY,), ("ring",)),
                          ({"a": mock.ANY}, {"a": [1]}), (mock.ANY, {"mha"}), (mock.ANY, torch.long),
                          (mock.ANY, None), (mock.MagicMock(spec=int), 3), (2859, 2858), ("a", "b"),
                          (torch.tensor([1, 3]), torch.tensor([1, 2])), ({1: 2}, {1: 3})):
        with pytest.raises(AssertionError, match="the message"):
            assert_equal(got, expected, "the message")
    with pytest.raises(AssertionError, match=r"result\[1\]: expected 2, got <ANY>"):
        assert_equal([1, mock.ANY], [1, 2])


def test_equal_refuses_an_expected_value_that_could_decide_for_itself():
    """`expected` is the check's own value: an answer passed there by mistake (ANY == ANY) is an
    error of the check, not a pass."""
    from unittest import mock
    for expected in (mock.ANY, [mock.ANY], {"a": mock.ANY}, object()):
        with pytest.raises(TypeError, match="the check's own plain value"):
            assert_equal(mock.ANY, expected)


def _bare_equalities(source: str) -> list[str]:
    """The asserts in `source` whose outcome an `==` or `!=` decides, reached through `and`, `or`
    and `not`, with neither side a `len()` (always a real int)."""
    def is_len(node):
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"

    def deciding(node):
        if isinstance(node, ast.BoolOp):
            return [part for value in node.values for part in deciding(value)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return deciding(node.operand)
        return [node]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            for part in deciding(node.test):
                if (isinstance(part, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in part.ops)
                        and not any(is_len(side) for side in (part.left, *part.comparators))):
                    found.append(ast.get_source_segment(source, node).splitlines()[0])
    return found


def test_no_check_lets_an_answer_decide_its_own_comparison():
    """A bare `assert got == want` asks the answer's class whether it is right: unittest.mock.ANY
    says yes to everything. Graded cells compare through assert_equal or assert_close, which read
    the type first (each mutant in tests/equals_everything.py shows it for the first comparison
    of each answer; this shows it for every later one, visible or hidden)."""
    found = []
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell_kind(cell) == "graded":
                found += [f"{path.stem} {cell.metadata['nbgrader']['grade_id']}: {line}"
                          for line in _bare_equalities(cell.source)]
    assert not found, "asserts decided by a bare == or != (use assert_equal):\n" + "\n".join(found)
    assert _bare_equalities("assert x == 1\nassert ok and not y != 2\nassert len(a) == 3")


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


def test_the_cost_model_announces_each_run_and_only_the_grader_counts_them():
    # Each collective's cost raises an audit event (the grading guard counts them, out of notebook
    # code's reach); outside grading nothing answers the count, and cost_model_unused checks nothing.
    probe = ("import sys; seen = []\n"
             "sys.addaudithook(lambda e, a: seen.append(e) if e == 'nanoparallel.cost_model' else None)\n"
             "from nanoparallel.lessons.cost import busiest_rank_bytes, _ring\n"
             "busiest_rank_bytes('all_reduce', 8, 4); _ring(4)\n"
             "print(len(seen) >= 2)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
    assert cost_model_runs() is None
    with cost_model_unused("a lookup"):
        busiest_rank_bytes("all_reduce", 8, 4)


def test_spoil_makes_whatever_still_computes_from_a_module_not_finite():
    full = torch.nn.Linear(4, 6)
    shard = torch.nn.Linear(4, 3)
    with torch.no_grad():
        shard.weight.copy_(full.weight[:3])
        shard.bias.copy_(full.bias[:3])
    spoil(full)
    x = torch.ones(2, 4)
    assert torch.isfinite(shard(x)).all() and not torch.isfinite(full(x)).any()
