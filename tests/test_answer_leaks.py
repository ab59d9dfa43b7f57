"""Nothing a student can import or see computes an exercise's answer: every callable within a
student's reach is tried in place of each exercise function, and one that passes the exercise's
checks (visible and hidden) is a leak.

    python -m pytest tests/test_answer_leaks.py            (about 100 s in all, no cluster)
    python tests/test_answer_leaks.py 04_pipeline          (the search's findings as JSON;
        --profile: each candidate as it is tried; --only=WORD: only candidates named with WORD)

What is tried, for every function an exercise asks for (a top-level function of a solution cell
whose body holds the solution) of the notebooks in ASSIGNMENTS:

- every public callable of every module of the shipped engine (`nanoparallel` and its
  subpackages, imported as a student would, what they import included);
- every callable that the notebook's visible cells (setup and demonstration cells, not solution
  or test cells) define or import, where they run without a cluster (of a demonstration cell,
  only its imports and definitions run);
- TORCH: torch callables with an obvious equivalent of an exercise.

Each candidate is bound under the exercise function's name, as it is and with its arguments
adapted: by the exercise's parameter names, the rest filled from the exercise's arguments (by
name or position, or the product of two, e.g. bytes = values x bytes per value) and from the
string literals of the candidate's own module (an op name, an algorithm, a schedule's name).
The exercise's other functions are the solution's. Then the checks of its graded cell (visible
and hidden, from solutions/) run in this process, less what needs ranks: a statement that uses
the notebook's `cluster`, or a function that does. A candidate that passes them, having been
called, is a leak. The solution's own function is planted among the candidates, last (after
every other candidate has had its chance to disturb the process): the search must find it.

Each notebook is searched in a subprocess of its own, so that no candidate called with odd
arguments changes this process's state.

Out of scope here, because their checks need ranks or the exercise is not a function to swap
(the graded cell's rank checks, trace predicates and reference runs guard those; a submission
that calls a built-in collective or torch's DDP instead of the algorithm loses points there,
see tests/mutants/):

- 02_data_parallel: naive_ddp (NaiveDDP) and bucketed_ddp (BucketedDDP) are classes run on the
  ranks; comm_bytes's trace checks and memory's measured bytes run on the ranks (their formula
  checks are searched here).
- 04_pipeline: layerwise_step, gpipe_step and run_schedule run on the ranks (send/recv between
  stages); split is an autograd.Function (SplitLinearFunction), not a function; zb_h1's run on
  the ranks (its schedule checks are searched here).
- 05_tensor_parallel: f_g, linears, block and sequence_parallel are autograd ops, modules and a
  gradient sync run on the ranks; comm's trace check runs on the ranks (its formula checks are
  searched here).
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import importlib
import inspect
import io
import itertools
import json
import math
import pkgutil
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The notebooks searched; a later issue adds 06_moe and 07_3d_parallelism.
# Reads and runs the notebooks' checks in subprocesses (about 100 s): with the notebook tests.
pytestmark = pytest.mark.notebooks

ASSIGNMENTS = ("02_data_parallel", "04_pipeline", "05_tensor_parallel")
# The exercises with a function the search must reach, per notebook: a guard against a search
# that silently tries nothing (a check cell renamed, every statement judged to need ranks).
MUST_SEARCH = {
    "02_data_parallel": {"accumulate_step", "ddp_bytes_per_rank", "parameter_server_bytes",
                         "memory_breakdown", "bytes_per_parameter"},
    "04_pipeline": {"gpipe_schedule", "one_f_one_b_schedule", "zb_h1_schedule", "bubble_time",
                    "bubble_fraction", "peak_activations"},
    "05_tensor_parallel": {"tp_comm_bytes", "activation_memory"},
}
# Names whose use means "needs the notebook's cluster".
CLUSTER_NAMES = {"cluster", "Cluster", "TorchrunCluster"}
# Callables a student can reach that the search does not call, and why: they start processes,
# wait on other processes, or change this process for good (hooks, tracers, signals).
NOT_CALLED = {
    "nanoparallel.runtime.cluster.Cluster": "starts rank processes",
    "nanoparallel.runtime.cluster.worker_main": "a rank's main loop",
    "nanoparallel.runtime.torchrun_cluster.TorchrunCluster": "starts rank processes",
    "nanoparallel.runtime.torchrun_cluster.die_with_parent_process": "changes this process (prctl)",
    "nanoparallel.grading.launch.main": "starts rank processes",
    "nanoparallel.grading.guard.install": "installs the grading guard in this process",
    "nanoparallel.grading.guard.load_ipython_extension": "installs the grading guard in this process",
    "nanoparallel.grading.rank_guard.install": "installs the rank guard in this process",
    "nanoparallel.grading._gate.install": "installs the witness's gate in this process",
    "nanoparallel.grading._gate.seal_frame_readers": "replaces this process's locals, vars and dir",
    "nanoparallel.grading.signal_handlers.watch": "wraps this process's _signal.signal and _imp.create_builtin",
    "nanoparallel.runtime.context.set_current_tracer": "changes this process's tracer",
    "nanoparallel.runtime.race.time_both": "runs collectives on a process group",
}
# torch callables with an obvious equivalent of an exercise of ASSIGNMENTS.
TORCH = ["torch.distributed.pipelining._schedule_visualizer.get_schedule_ops",
         "torch.autograd.backward", "torch.Tensor.backward", "torch.Tensor.element_size",
         "torch.finfo", "torch.iinfo", "torch.numel", "torch.nn.utils.parameters_to_vector",
         "torch.nn.utils.clip_grad_norm_", "math.prod"]
STRING_PARAMS = re.compile(r"^(op|ops|name|kind|algorithm|algo|schedule|style|which|mode|dtype|"
                           r"optimizer|.*_dtype|.*_name)$")
PLANTED = "<the solution's own function>"
TRIAL_SECONDS = 3.0  # at least, for one run of an exercise's checks
ADDRESS_SPACE = 6 * 2**30  # bytes of address space the search may use
MAX_PLANS = 200  # adapted calls of one candidate, at most (in a fixed order)
_PROFILE = False
_ONLY = ""


# ---------------------------------------------------------------- the notebook, statement by statement

def _cells(assignment: str):
    """(role, grade_id, source) of the solution notebook's code cells; role: setup, solution,
    test or demo; IPython magics blanked out."""
    nb = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        role = ("test" if meta.get("grade") and not meta.get("solution") else
                "solution" if meta.get("solution") else "setup" if meta.get("locked") else "demo")
        source = "".join(cell["source"])
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                           for line in source.splitlines())
        out.append((role, meta.get("grade_id"), source))
    return out


def _loads(node) -> set[str]:
    """The names a statement reads from outside: a function's parameters and locals are its own
    (a parameter called `times` is not the notebook's `times`)."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    own = set()
    for fn in ast.walk(node):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            own |= {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
            body = fn.body if isinstance(fn.body, list) else [fn.body]
            own |= {n.id for st in body for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return loads - own


def _binds(stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _without_ranks(stmts, tainted: set[str]) -> list:
    """The statements that run without the cluster; `tainted` grows with what the others bind
    (a function that uses the cluster, a result of cluster.run)."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, ast.Try) and not stmt.handlers:  # try: checks  finally: cluster.resize
            out += _without_ranks(stmt.body, tainted) + _without_ranks(stmt.finalbody, tainted)
        elif _loads(stmt) & tainted:
            tainted |= _binds(stmt)
        else:
            out.append(stmt)
    return out


class _Timeout(BaseException):
    pass


@contextlib.contextmanager
def _deadline(seconds: float):
    def expire(*_):
        raise _Timeout()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _run(stmts, ns: dict, seconds: float) -> BaseException | None:
    """Run statements one by one in ns; the first exception (or None). Imports run without the
    deadline: on a loaded machine a first `import torch` can outlast it, and an import cut off
    half way leaves torch unimportable in this process (its operator library registered twice)."""
    for stmt in stmts:
        importing = isinstance(stmt, (ast.Import, ast.ImportFrom))
        try:
            with _quiet(), (contextlib.nullcontext() if importing else _deadline(seconds)):
                exec(compile(ast.Module(body=[stmt], type_ignores=[]), "<cell>", "exec"), ns)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - a candidate may raise anything
            return e
    return None


# ---------------------------------------------------------------- the candidates

def _engine_callables() -> dict[str, object]:
    import nanoparallel
    found, seen = {}, set()
    modules = [nanoparallel] + [importlib.import_module(m.name) for m in
                                pkgutil.walk_packages(nanoparallel.__path__, "nanoparallel.")]
    for module in modules:
        for name, value in sorted(vars(module).items()):
            if name.startswith("_") or not callable(value) or id(value) in seen:
                continue
            seen.add(id(value))
            found[f"{module.__name__}.{name}"] = value
    return found


def _resolve(dotted: str):
    """The object a dotted name names (a module's attribute, at any depth), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _torch_callables() -> dict[str, object]:
    return {dotted: obj for dotted in TORCH for obj in [_resolve(dotted)] if obj is not None}


def _strings_of(candidate) -> list[str]:
    """String literals of the candidate's module that could name an op, an algorithm, a schedule."""
    try:
        tree = ast.parse(inspect.getsource(inspect.getmodule(candidate)))
    except (TypeError, OSError, SyntaxError):
        return []
    words = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,23}", n.value)}
    return sorted(words)[:60]


_NUMBERS = re.compile(r"\b(int|float|complex|Number|Real|SupportsFloat|Any|object)\b")
_PLAIN = re.compile(r"\b(int|float|complex|str|bool|bytes)\b")


def _is_str(annotation) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return bool(re.fullmatch(r"str( \| None)?|None \| str|Optional\[str\]|Literal\[.*\]", text))


def _fits(annotation, value) -> bool:
    """Whether a value may go where the candidate's annotation says (no annotation: anything);
    a number is not passed where a mapping, a list or a figure is expected, nor a tensor or a
    model where a number or a string is."""
    if annotation is inspect.Parameter.empty:
        return True
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, (int, float)):
        return bool(_NUMBERS.search(text))
    if isinstance(value, str):
        return _is_str(annotation) or bool(re.fullmatch(r"(Any|object)( \| None)?", text))
    return not (_PLAIN.search(text) and not re.search(r"[A-Z]\w*|\bobject\b", text.replace("Any", "")))


def _as_is(candidate, sig):
    if sig is None:
        return candidate

    def call(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)  # TypeError: the exercise's arguments do not fit
        for name, value in bound.arguments.items():
            param = sig.parameters[name]
            if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY) \
                    and not _fits(param.annotation, value):
                raise TypeError(f"{name}: {value!r} does not fit {param.annotation}")
        return candidate(*args, **kwargs)
    return call


def _draws(candidate) -> bool:
    """Whether the candidate is annotated to return a picture (a figure, axes, a widget): it
    draws, it does not compute an answer; drawing with an exercise's numbers takes long."""
    try:
        ret = inspect.signature(candidate).return_annotation
    except (TypeError, ValueError):
        return False
    text = ret if isinstance(ret, str) else getattr(ret, "__name__", str(ret))
    return bool(re.search(r"Figure|Axes|Widget|VBox|HBox|Box\b|interactive", text))


def _is_module_class(candidate) -> bool:
    import torch
    return isinstance(candidate, type) and issubclass(candidate, torch.nn.Module)


def _adapted(candidate, exercise_sig: inspect.Signature):
    """(how, function) pairs: the candidate as it is, then with its arguments adapted."""
    try:
        sig = inspect.signature(candidate)
    except (TypeError, ValueError):
        sig = None
    yield "as is", _as_is(candidate, sig)
    if sig is None or _is_module_class(candidate):
        return  # a model's constructor builds layers of the sizes it is given: no adapting of numbers
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    params = [p for p in sig.parameters.values() if p.kind in kinds]
    names = list(exercise_sig.parameters)
    matched = [p.name for p in params if p.name in names]
    open_ = [p for p in params if p.name not in names and p.default is inspect.Parameter.empty]
    if not matched and not open_ or len(open_) > 2:
        return
    choices = []
    strings = [p for p in open_ if _is_str(p.annotation)
               or (p.annotation is inspect.Parameter.empty and STRING_PARAMS.match(p.name))]
    for p in open_:
        if p in strings:
            choices.append([("const", s) for s in _strings_of(candidate)])
        else:  # a product of two arguments only where it is the one number left to fill
            choices.append([("arg", n) for n in names if n not in matched]
                           + ([("prod", a, b) for a, b in itertools.combinations(names, 2)]
                              if len(open_) - len(strings) == 1 else []))
    for combo in itertools.islice(itertools.product(*choices), MAX_PLANS):
        plan = {n: ("arg", n) for n in matched} | {p.name: c for p, c in zip(open_, combo)}
        yield _describe(plan), _caller(candidate, exercise_sig, params, plan)


def _describe(plan) -> str:
    def source(c):
        return repr(c[1]) if c[0] == "const" else c[1] if c[0] == "arg" else f"{c[1]}*{c[2]}"
    return "(" + ", ".join(f"{k}={source(c)}" for k, c in plan.items()) + ")"


def _caller(candidate, exercise_sig, params, plan):
    def call(*args, **kwargs):
        bound = exercise_sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments

        def value(c):
            return c[1] if c[0] == "const" else values[c[1]] if c[0] == "arg" else values[c[1]] * values[c[2]]
        positional, keywords = [], {}
        for p in params:
            if p.name not in plan:
                continue
            if not _fits(p.annotation, value(plan[p.name])):
                raise TypeError(f"{p.name}: does not fit {p.annotation}")
            if p.kind is inspect.Parameter.POSITIONAL_ONLY:
                positional.append(value(plan[p.name]))
            else:
                keywords[p.name] = value(plan[p.name])
        return candidate(*positional, **keywords)
    return call


# ---------------------------------------------------------------- a first call, replayed

def _copy(value):
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - what cannot be copied is not replayed
        return None


def _same(a, b) -> bool:
    import torch
    if isinstance(a, torch.nn.Module) and isinstance(b, torch.nn.Module):
        return _same(a.state_dict(), b.state_dict())  # a deep copy leaves .grad behind
    if isinstance(a, torch.optim.Optimizer) and isinstance(b, torch.optim.Optimizer):
        return _same(a.state_dict(), b.state_dict())
    if isinstance(a, torch.Tensor) and a.dim() == 0 and isinstance(b, (int, float)):
        a = a.item()
    if isinstance(b, torch.Tensor) and b.dim() == 0 and isinstance(a, (int, float)):
        b = b.item()
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-5, equal_nan=True)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _agrees(adapted, before, after, result, seconds) -> bool:
    """Whether the candidate, given a copy of the arguments of the checks' first call of the
    exercise function, returns what the solution returned and leaves the arguments as it did.
    A filter only: a candidate that agrees still has to pass the checks."""
    args, kwargs = _copy(before)
    try:
        with _quiet(), _deadline(seconds):
            got = adapted(*args, **kwargs)
            return _same(got, result) and _same((args, kwargs), after)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - a candidate may raise anything
        return False


# ---------------------------------------------------------------- the search

def search(assignment: str) -> dict:
    """Every candidate against every exercise function of the notebook: the findings as a dict."""
    start = time.perf_counter()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _cells(assignment)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    tainted, solution_names, visible_names = set(CLUSTER_NAMES), set(), set()
    exercises = {}  # grade_id -> {function name: signature}
    solution_source = {}
    for role, grade_id, source in cells:
        if role == "test":
            continue
        tree = ast.parse(source)
        stmts = _without_ranks(tree.body, tainted)
        if role == "demo":  # what it defines and imports, not its demonstration
            stmts = [st for st in stmts if isinstance(st, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))]
        for stmt in stmts:
            (solution_names if role == "solution" else visible_names).update(_binds(stmt))
        _run(stmts, ns, 20.0)
        plt.close("all")
        if role == "solution":
            funcs = {s.name for s in tree.body if isinstance(s, ast.FunctionDef)
                     and "BEGIN SOLUTION" in (ast.get_source_segment(source, s) or "")}
            if funcs:
                exercises[grade_id] = funcs
                solution_source[grade_id] = source
    tests = {gid: src for role, gid, src in cells if role == "test"}

    candidates = {}
    for name, value in _engine_callables().items():
        candidates.setdefault(name, value)
    ids = {id(v) for v in candidates.values()}
    for name in sorted(visible_names - solution_names):
        value = ns.get(name)
        if callable(value) and id(value) not in ids and not isinstance(value, type(sys)):
            candidates[f"notebook: {name}"] = value
            ids.add(id(value))
    for name, value in _torch_callables().items():
        if id(value) not in ids:
            candidates[name] = value
            ids.add(id(value))
    not_called = {id(obj): (name, why) for name, why in NOT_CALLED.items()
                  for obj in [_resolve(name)] if obj is not None}
    skipped = {name: not_called[id(value)][1] for name, value in candidates.items() if id(value) in not_called}
    for name in skipped:
        del candidates[name]
    for name, value in list(candidates.items()):
        if _draws(value):
            skipped[name] = "returns a figure or a widget"
            del candidates[name]
    if _ONLY:
        candidates = {k: v for k, v in candidates.items() if _ONLY in k}

    report = {"assignment": assignment, "candidates": len(candidates), "not_called": skipped,
              "searched": {}, "out_of_scope": {}, "leaks": [], "planted_found": {}, "errors": []}
    for grade_id, funcs in exercises.items():
        test_id = f"{grade_id}_tests"
        if test_id not in tests:
            report["out_of_scope"][grade_id] = "no test cell"
            continue
        checks = _without_ranks(ast.parse(tests[test_id]).body, set(CLUSTER_NAMES))
        if any(f not in ns for f in funcs):
            report["errors"].append(f"{grade_id}: the solution cell did not define {sorted(f for f in funcs if f not in ns)}")
            continue
        solution = {f: ns[f] for f in funcs}
        # which functions the checks call without ranks, and whether the solution passes them
        calls = dict.fromkeys(funcs, 0)

        first = {}  # f -> (arguments before, arguments after, result) of the checks' first call

        def counting(f, fn):
            def wrapper(*a, **k):
                calls[f] += 1
                return fn(*a, **k)
            return wrapper

        def recording(f, fn):
            def wrapper(*a, **k):
                calls[f] += 1
                before = _copy((a, k))
                began = time.perf_counter()
                result = fn(*a, **k)
                if f not in first and before is not None:
                    # what a candidate may take for it: far more than the solution, so that a
                    # loaded machine does not turn away the right answer
                    seconds = max(0.5, 20 * (time.perf_counter() - began))
                    first[f] = (before, _copy((a, k)), _copy(result), seconds)
                return result
            return wrapper
        trial = dict(ns) | {f: recording(f, solution[f]) for f in funcs}
        began = time.perf_counter()
        error = _run(checks, trial, 60.0)
        trial_seconds = max(TRIAL_SECONDS, 10 * (time.perf_counter() - began))
        if error is not None:
            report["errors"].append(f"{grade_id}: the solution fails its own checks without ranks: {error!r}")
            continue
        searched = sorted(f for f in funcs if calls[f])
        if not searched:
            report["out_of_scope"][grade_id] = "every check needs ranks"
            continue
        report["searched"][grade_id] = searched
        for f in searched:
            exercise_sig = inspect.signature(solution[f])
            pool = list(candidates.items()) + [(PLANTED, solution[f])]
            for name, candidate in pool:
                began = time.perf_counter()
                if _PROFILE:
                    print(f"trying {f} {name}", file=sys.stderr, flush=True)
                for how, adapted in _adapted(candidate, exercise_sig):
                    if f in first and not _agrees(adapted, *first[f]):
                        continue  # another answer than the solution's on the checks' first call
                    calls[f] = 0
                    trial = dict(ns) | {g: solution[g] for g in funcs} | {f: counting(f, adapted)}
                    if _run(checks, trial, trial_seconds) is None and calls[f]:
                        if name == PLANTED:
                            report["planted_found"][f] = True
                        else:
                            report["leaks"].append({"exercise": grade_id, "function": f,
                                                    "candidate": name, "called": how})
                        break
                plt.close("all")
                if _PROFILE and time.perf_counter() - began > 0.2:
                    print(f"{f} {name}: {time.perf_counter() - began:.2f} s", file=sys.stderr, flush=True)
            report["planted_found"].setdefault(f, False)
    report["seconds"] = round(time.perf_counter() - start, 1)
    return report


_SEARCHES: dict[str, subprocess.Popen] = {}
_REPORTS: dict[str, dict] = {}


def _report(assignment: str) -> dict:
    """The findings of the search of `assignment`; the first call starts the searches of every
    notebook at once, each in a subprocess of its own."""
    if not _SEARCHES:
        for name in ASSIGNMENTS:
            _SEARCHES[name] = subprocess.Popen([sys.executable, __file__, name], cwd=ROOT, text=True,
                                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE)
    if assignment not in _REPORTS:
        stdout, stderr = _SEARCHES[assignment].communicate(timeout=900)
        assert _SEARCHES[assignment].returncode == 0, (
            f"the search of {assignment} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}")
        _REPORTS[assignment] = json.loads(stdout.strip().splitlines()[-1])
    return _REPORTS[assignment]


# ---------------------------------------------------------------- the tests

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_search_reaches_every_pure_exercise_and_finds_the_planted_solution(assignment):
    """The test can fail: the solution's own function, planted among the candidates, passes its
    exercise's checks and is found, for every function searched; and the search reaches the
    functions it must (a renamed cell or a check judged to need ranks would hide them)."""
    report = _report(assignment)
    assert report["errors"] == [], "\n".join(report["errors"])
    searched = {f for fs in report["searched"].values() for f in fs}
    assert MUST_SEARCH[assignment] <= searched, (
        f"{assignment}: the search did not reach {sorted(MUST_SEARCH[assignment] - searched)}")
    missed = sorted(f for f, found in report["planted_found"].items() if not found)
    assert not missed, f"{assignment}: the planted solution of {missed} was not found: the search cannot see a leak"
    assert report["candidates"] > 100, f"{assignment}: only {report['candidates']} candidates"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_nothing_a_student_can_call_computes_an_answer(assignment):
    """No engine callable, notebook helper or torch callable passes an exercise's checks in
    place of the exercise's function."""
    leaks = _report(assignment)["leaks"]
    assert not leaks, f"{assignment}: answers computed by what a student can call:\n" + "\n".join(
        f"  exercise {leak['exercise']}: {leak['candidate']} {leak['called']} passes the checks of "
        f"{leak['function']}" for leak in leaks)


if __name__ == "__main__":
    import resource
    # A candidate given an exercise's large numbers (a 2048 x 12288 layer's sizes) may try to
    # allocate far too much, in C code that no alarm interrupts: let the allocation fail instead.
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    sys.path.insert(0, str(ROOT))
    _PROFILE = "--profile" in sys.argv
    _ONLY = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), "")
    print(json.dumps(search(sys.argv[1])))
