"""Assertions for graded cells, with messages a student can act on.

Every failure says where (which rank, which tensor), what was expected and what came back.
Result checks compare per-rank values with a reference; trace checks test the *algorithm*:
which torch.distributed calls were made, with which peers, and how many bytes moved.
"""
from __future__ import annotations

import contextlib
import math
import sys
from typing import Callable, Iterable

import torch

from nanoparallel.runtime.trace import Trace


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


def assert_equal(got, expected, message: str = "") -> None:
    """`assert got == expected, message`, with the answer's type read first: a value whose class
    decides how it compares (unittest.mock.ANY equals everything) is refused instead of believed.

    `expected` is the check's own value, made of numbers, strings, None, tensors, dtypes and
    lists, tuples, dicts and sets of them; numbers compare exactly, an int with an equal float.
    Checks compare an answer through this (or assert_close), never with a bare `==`."""
    _plain(expected)
    try:
        _compare(got, expected, "result", rtol=0.0, atol=0.0)
    except AssertionError as wrong:
        raise AssertionError(message or str(wrong)) from None


_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.Tensor)


def _plain(expected) -> None:
    """Refuses an expected value that could decide a comparison itself (a check that passed an
    answer's value as `expected` by mistake)."""
    if isinstance(expected, (list, tuple, set, frozenset)):
        for item in expected:
            _plain(item)
    elif isinstance(expected, dict):
        for key, value in expected.items():
            _plain(key)
            _plain(value)
    elif not issubclass(type(expected), _PLAIN):
        raise TypeError(f"assert_equal: the expected value must be the check's own plain value, got "
                        f"{type(expected).__name__}")


def _same_layout(got, expected: torch.Tensor, where: str) -> None:
    """A tensor of the expected shape and dtype, or an AssertionError that says which differs."""
    if not issubclass(type(got), torch.Tensor):
        raise AssertionError(f"{where}: expected a tensor, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise AssertionError(f"{where}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if got.dtype != expected.dtype:
        raise AssertionError(f"{where}: expected dtype {expected.dtype}, got {got.dtype}")


# The answer's type is read with type(), never isinstance(), and compared with the expected
# value's before any comparison the answer's class could decide: a MagicMock(spec=float) passes
# isinstance, and unittest.mock.ANY equals everything.
def _compare(got, expected, where: str, rtol: float, atol: float) -> None:
    if got is None and expected is not None:
        raise AssertionError(f"{where}: got None. Does your function return its result?")
    if isinstance(expected, torch.Tensor):
        _same_layout(got, expected, where)
        g, e = got.detach().double(), expected.detach().double()
        if not torch.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            err = (g - e).abs()
            i = int(err.argmax())
            raise AssertionError(
                f"{where}: values differ (max abs error {err.max().item():.3g} at flat index {i}: "
                f"expected {e.flatten()[i].item():.6g}, got {g.flatten()[i].item():.6g})\n"
                f"  expected {_preview(expected)}\n  got      {_preview(got)}")
    elif isinstance(expected, dict):
        if not issubclass(type(got), dict) or set(got) != set(expected):
            raise AssertionError(f"{where}: expected a dict with keys {sorted(expected)}, got "
                                 f"{sorted(got) if issubclass(type(got), dict) else type(got).__name__}")
        for key in expected:
            _compare(got[key], expected[key], f"{where}[{key!r}]", rtol, atol)
    elif isinstance(expected, (list, tuple)):
        if not issubclass(type(got), (list, tuple)) or len(got) != len(expected):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)} items, got {_preview(got)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            _compare(g, e, f"{where}[{i}]", rtol, atol)
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if issubclass(type(got), torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not issubclass(type(got), (int, float)) or not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            raise AssertionError(f"{where}: expected {expected:.6g}, got {_preview(got)}")
    elif isinstance(expected, (set, frozenset)):
        kinds = {type(e) for e in expected}
        if type(got) is not type(expected) or not all(type(g) in kinds for g in got) or got != expected:
            raise AssertionError(f"{where}: expected {expected!r}, got {got!r}")
    elif type(got) is not type(expected) or got != expected:
        raise AssertionError(f"{where}: expected {expected!r}, got {got!r}")


def assert_close_after_adam(got, expected, grads_got: list, grads_expected: list, name: str = "parameters",
                            lr: float = 1e-2, rtol: float = 1e-4, atol: float = 1e-5,
                            betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
    """Compare parameters after an Adam step with a reference's: a tensor, or {name: tensor}.

    Both runs stepped from the same parameters with Adam (betas and eps torch's defaults), and
    `grads_got` and `grads_expected` hold each run's gradients of every step so far, one per step,
    the last being this step's, each laid out as `expected` (the same shards). An entry may differ
    by atol + rtol * |expected|, plus what Adam makes of the difference between the gradients:

    Adam moves an entry by lr * m / (sqrt(v) + eps), m and v averages of the gradient and its
    square over the steps so far. Change every gradient by at most delta and m changes by at most
    delta, sqrt(v) too, so the step by at most lr * 2 delta / (sqrt(v) + eps) (|m| / sqrt(v) is
    about 1 in the course's few steps), and never by more than 2 lr (the step is about lr, either
    sign). That is nothing where the gradient is large, but where it is 0 up to rounding Adam
    scales the rounding up to a whole step: the attention key's bias, for one, has a zero gradient
    in exact arithmetic (softmax ignores a constant added to every score of a row), so after Adam
    it holds each run's own rounding noise times lr / eps, whatever the code, and is compared
    only as precisely as that noise allows. Compare the gradients themselves first (this only
    says what Adam does with them), and over several steps compare from the same parameters each
    time (`reference.follow_reference`): an entry moved by noise changes the next steps'
    gradients, which Adam divides by each entry's own gradient size.
    """
    if isinstance(expected, torch.Tensor):
        got, expected = {"": got}, {"": expected}
        grads_got, grads_expected = [{"": g} for g in grads_got], [{"": g} for g in grads_expected]
    if not isinstance(got, dict) or set(got) != set(expected):
        raise AssertionError(f"{name}: expected a dict with keys {sorted(expected)}, got "
                             f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
    if len(grads_got) != len(grads_expected) or not grads_expected:
        raise ValueError(f"{len(grads_got)} and {len(grads_expected)} steps of gradients: one per step, at least one")
    beta2, steps = betas[1], len(grads_expected)
    for key, e in expected.items():
        where = f"{name}[{key!r}]" if key != "" else name
        g = got[key]
        _same_layout(g, e, where)
        history = [step[key].detach().double() for step in grads_expected]
        delta = torch.stack([(a[key].detach().double() - b).abs() for a, b in zip(grads_got, history)]).amax(0)
        v = sum((1 - beta2) * beta2 ** (steps - 1 - i) * h ** 2 for i, h in enumerate(history)) / (1 - beta2 ** steps)
        gd, ed = g.detach().double(), e.detach().double()
        tol = atol + rtol * ed.abs() + lr * torch.clamp(2 * delta / (v.sqrt() + eps), max=2.0)
        err = (gd - ed).abs()
        bad = ~(err <= tol)  # NaN counts as bad
        if bad.any():
            i = int(torch.where(bad.flatten(), err.flatten().nan_to_num(math.inf), -1.0).argmax())
            raise AssertionError(
                f"{where}: values differ (abs error {err.flatten()[i].item():.3g} at flat index {i}, "
                f"allowed {tol.flatten()[i].item():.3g}: expected {ed.flatten()[i].item():.6g}, "
                f"got {gd.flatten()[i].item():.6g})\n"
                f"  expected {_preview(e)}\n  got      {_preview(g)}")


def _preview(x, items: int = 6) -> str:
    if issubclass(type(x), torch.Tensor):
        flat = x.detach().flatten().tolist()
        body = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat[:items])
        return f"tensor([{body}{', ...' if len(flat) > items else ''}])"
    if issubclass(type(x), float):
        return f"{x:.6g}"
    return repr(x)


def spoil(module: torch.nn.Module) -> None:
    """Fill every parameter of `module` with NaN: whatever still computes from it, rather than from
    what was built out of it, gives numbers that are not finite."""
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(float("nan"))


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
        if not abs(got - want) <= slack:  # written so that a NaN fails
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


def assert_derived(fn: Callable, module, what: str) -> None:
    """`fn` computes its answer itself: neither it nor a function of the notebook it calls names
    one of `module`'s functions (e.g. the engine's cost model, which knows a collective's bytes).
    Read from the code, not run: names reached through the function's globals, its closure and
    the attribute names its code uses, in its nested code too."""
    import types
    own = {name for name, value in vars(module).items()
           if callable(value) and getattr(value, "__module__", None) == module.__name__ and not name.startswith("_")}
    seen: set[int] = set()

    def codes(code):
        yield code
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield from codes(const)

    def visit(f) -> str | None:
        if id(f) in seen or not isinstance(f, types.FunctionType):
            return None
        seen.add(id(f))
        cells = [c.cell_contents for c in f.__closure__ or () if _filled(c)]
        for code in codes(f.__code__):
            for name in code.co_names + code.co_freevars:
                value = f.__globals__.get(name, None)
                if value is module or getattr(value, "__module__", None) == module.__name__:
                    return name
                if name in own and not isinstance(value, types.FunctionType):
                    return name  # an attribute: module.function
                found = visit(value)
                if found:
                    return found
        for value in cells:
            if value is module or getattr(value, "__module__", None) == module.__name__:
                return getattr(value, "__name__", repr(value))
            found = visit(value)
            if found:
                return found
        return None

    found = getattr(fn, "__name__", "it") if getattr(fn, "__module__", None) == module.__name__ else visit(fn)
    assert found is None, (f"{what} uses {module.__name__}'s {found}: this exercise asks you to derive the "
                           f"answer, not to look it up in the engine")


_audit = sys.audit


def cost_model_runs() -> int | None:
    """How many collectives' costs the engine's cost model has worked out in this kernel, as the
    grading guard counted them; None outside grading, where nothing counts them beyond notebook
    code's reach (`nanoparallel.grading.guard`, COST_MODEL_RUNS)."""
    box: list = []
    _audit("nanoparallel.cost_model_runs", box)
    return box[0] if box and type(box[0]) is int else None


@contextlib.contextmanager
def cost_model_unused(what: str):
    """Within it, the engine's cost model must not run: the answer derives its number. Under
    grading this catches what `assert_derived`, which reads code, cannot: a name built at run
    time, or a function kept in a container. Outside grading it checks nothing."""
    before = cost_model_runs()
    yield
    after = cost_model_runs()
    if before is not None:
        assert after == before, (f"{what} ran the engine's cost model (nanoparallel.lessons.cost): this "
                                 "exercise asks you to derive the answer, not to look it up in the engine")


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
