"""Assertions for graded cells, with messages a student can act on.

Every failure says where (which rank, which tensor), what was expected and what came back.
Result checks compare per-rank values with a reference; trace checks test the *algorithm*:
which torch.distributed calls were made, with which peers, and how many bytes moved.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch

from nanoparallel.trace import Trace


def assert_close(got, expected, name: str = "result", rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compare a value (number, tensor, or list/dict of them) with a reference."""
    _compare(got, expected, name, rtol, atol)


def assert_ranks_close(got: list, expected: list, name: str = "result",
                       rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compare the per-rank results of a run with the per-rank reference values."""
    if len(got) != len(expected):
        raise AssertionError(f"expected results from {len(expected)} ranks, got {len(got)}")
    for rank, (g, e) in enumerate(zip(got, expected)):
        _compare(g, e, f"rank {rank}: {name}", rtol, atol)


def _compare(got, expected, where: str, rtol: float, atol: float) -> None:
    if got is None and expected is not None:
        raise AssertionError(f"{where}: got None. Does your function return its result?")
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"{where}: expected a tensor, got {type(got).__name__}")
        if got.shape != expected.shape:
            raise AssertionError(f"{where}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
        if got.dtype != expected.dtype:
            raise AssertionError(f"{where}: expected dtype {expected.dtype}, got {got.dtype}")
        g, e = got.detach().double(), expected.detach().double()
        if not torch.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            err = (g - e).abs()
            i = int(err.argmax())
            raise AssertionError(
                f"{where}: values differ (max abs error {err.max().item():.3g} at flat index {i}: "
                f"expected {e.flatten()[i].item():.6g}, got {g.flatten()[i].item():.6g})\n"
                f"  expected {_preview(expected)}\n  got      {_preview(got)}")
    elif isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            raise AssertionError(f"{where}: expected a dict with keys {sorted(expected)}, got "
                                 f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
        for key in expected:
            _compare(got[key], expected[key], f"{where}[{key!r}]", rtol, atol)
    elif isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)} items, got {_preview(got)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            _compare(g, e, f"{where}[{i}]", rtol, atol)
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            raise AssertionError(f"{where}: expected {expected:.6g}, got {_preview(got)}")
    elif got != expected:
        raise AssertionError(f"{where}: expected {expected!r}, got {got!r}")


def _preview(x, items: int = 6) -> str:
    if isinstance(x, torch.Tensor):
        flat = x.detach().flatten().tolist()
        body = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat[:items])
        return f"tensor([{body}{', ...' if len(flat) > items else ''}])"
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x)


# -- the algorithm, through the trace ------------------------------------------------------

def assert_ops_within(trace: Trace, allowed: Iterable[str], hint: str = "") -> None:
    """Every rank used only the allowed torch.distributed calls."""
    allowed = set(allowed)
    for rank in range(trace.world_size):
        extra = trace.ops(rank) - allowed
        if extra:
            raise AssertionError(f"rank {rank} called {', '.join(sorted(extra))}, which this exercise does "
                                 f"not allow; use only {', '.join(sorted(allowed))}. {hint}".rstrip())


def assert_ops_used(trace: Trace, required: Iterable[str], ranks: Iterable[int] | None = None) -> None:
    """Every listed rank (default: all) made at least one of the required calls."""
    required = set(required)
    for rank in (range(trace.world_size) if ranks is None else ranks):
        if not trace.ops(rank) & required:
            raise AssertionError(f"rank {rank} made none of the calls {', '.join(sorted(required))}; "
                                 f"it called {sorted(trace.ops(rank)) or 'nothing'}")


def assert_peers(trace: Trace, allowed: Callable[[int], set[int]], what: str = "allowed peers") -> None:
    """Each rank exchanged point-to-point messages only with ``allowed(rank)``."""
    for rank in range(trace.world_size):
        ok = set(allowed(rank))
        bad = trace.peers(rank) - ok
        if bad:
            raise AssertionError(f"rank {rank} exchanged messages with rank(s) {sorted(bad)}; "
                                 f"its {what} are {sorted(ok)}")


def assert_bytes_sent(trace: Trace, expected: int | list[int], slack: int = 0, formula: str = "") -> None:
    """Bytes sent per rank equal the expected count, within ``slack`` bytes."""
    sent = trace.bytes_sent()
    expected = [expected] * trace.world_size if isinstance(expected, int) else list(expected)
    for rank, (got, want) in enumerate(zip(sent, expected)):
        if abs(got - want) > slack:
            tolerance = f" ± {slack:,}" if slack else ""
            label = f" ({formula})" if formula else ""
            raise AssertionError(f"rank {rank} sent {got:,} bytes; expected {want:,}{tolerance}{label}")


def assert_all_waited(trace: Trace) -> None:
    """No async op was left without a wait()."""
    stray = trace.incomplete()
    if stray:
        e = stray[0]
        raise AssertionError(f"rank {e.rank}: {e.describe()} was never waited on; call .wait() on the "
                             f"work it returns ({len(stray)} such call(s) in total)")
