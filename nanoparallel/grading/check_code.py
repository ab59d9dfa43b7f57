"""Static facts about a notebook's code, read from its syntax tree without running it: which
names a statement reads and binds, what a function uses of the notebook's ``cluster`` (directly
or through the functions it names), and the world size a check call resizes the cluster to.
`nanoparallel.grading.notebook_exercise` builds its rules on these.
"""
from __future__ import annotations

import ast
import math

PORTABLE = frozenset({"run", "run_each", "resize", "world_size", "timeout", "close", "is_main", "rank"})
_EVAL_GLOBALS = {"__builtins__": {f.__name__: f for f in (len, min, max, sum, abs, int)}, "math": math}


def function_facts(trees: list[ast.Module]) -> dict:
    """{name: (def node, facts)} of the top-level functions and classes, with what they use of the
    cluster, directly or through the functions they name (to a fixed point)."""
    found = {}
    for tree in trees:
        for stmt in [s for t in tree.body for s in (t.body if isinstance(t, ast.Try) else [t])]:
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                found[stmt.name] = (stmt, _direct_facts(stmt))
    changed = True
    while changed:
        changed = False
        for _, facts in found.values():
            for name in facts["names"] & found.keys():
                other = found[name][1]
                if other["uses_cluster"] > facts["uses_cluster"] or not other["needs_local"] <= facts["needs_local"]:
                    facts["uses_cluster"] |= other["uses_cluster"]
                    facts["needs_local"] |= other["needs_local"]
                    changed = True
    return found


def _direct_facts(node: ast.AST) -> dict:
    shadowed = "cluster" in _all_stores(node)  # a parameter or local called cluster is not the notebook's
    uses, needs_local, names = False, set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            names.add(n.id)
            uses |= n.id == "cluster" and not shadowed
        elif (isinstance(n, ast.Attribute) and _is_cluster(n.value) and not shadowed
              and n.attr not in PORTABLE):
            needs_local.add(f"uses cluster.{n.attr}")
        elif isinstance(n, ast.ExceptHandler) and n.type is not None and "DeadlockError" in free_loads(n.type):
            needs_local.add("recovers from a DeadlockError (only the local cluster can restart stuck ranks)")
    return {"uses_cluster": uses, "needs_local": needs_local, "names": names}


def resized_world_size(call: ast.Call, fn: ast.AST, functions: dict, caller: dict | None = None) -> int | None:
    """What `fn` resizes the cluster to when called as `call` (directly, or in a function it calls
    first), or None where that does not follow from literals."""
    if not isinstance(fn, ast.FunctionDef):
        return None
    env = _arguments(call, fn.args, caller or {})
    for stmt in fn.body:
        for n in ast.walk(stmt):
            if not isinstance(n, ast.Call):
                continue
            if isinstance(n.func, ast.Attribute) and n.func.attr == "resize" and _is_cluster(n.func.value):
                size = _evaluate(n.args[0], env) if n.args else None
                return size if type(size) is int else None
            if isinstance(n.func, ast.Name) and n.func.id in functions and n.func.id != fn.name:
                inner, facts = functions[n.func.id]
                if facts["uses_cluster"]:
                    return resized_world_size(n, inner, functions, env)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = _evaluate(stmt.value, env)
            if value is not None:
                env[stmt.targets[0].id] = value
    return None


def _arguments(call: ast.Call, args: ast.arguments, caller: dict) -> dict:
    """{parameter: value} of the arguments (and defaults) that evaluate from literals and `caller`'s values."""
    names = [a.arg for a in args.posonlyargs + args.args]
    given = [(name, node, {}) for name, node in zip(names[len(names) - len(args.defaults):], args.defaults)]
    given += [(a.arg, node, {}) for a, node in zip(args.kwonlyargs, args.kw_defaults) if node is not None]
    given += [(name, node, caller) for name, node in zip(names, call.args) if not isinstance(node, ast.Starred)]
    given += [(k.arg, k.value, caller) for k in call.keywords if k.arg]
    env = {}
    for name, node, scope in given:
        value = _evaluate(node, scope)
        if value is None:
            env.pop(name, None)  # a call's non-literal argument overrides a literal default
        else:
            env[name] = value
    return env


def _evaluate(node: ast.expr, env: dict):
    """Arithmetic on literals and `env` (``math.prod(shape)``), or None."""
    try:
        return eval(compile(ast.Expression(node), "<world size>", "eval"), dict(_EVAL_GLOBALS), dict(env))
    except Exception:
        return None


def _is_cluster(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "cluster"


def is_check_call(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id.startswith("_check"))


def is_assertion(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assert) or (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id.startswith("assert"))


def makes_cluster(stmt: ast.stmt) -> bool:
    """``cluster = Cluster(...)`` (or ``Cluster.from_env(...)``)."""
    if not (isinstance(stmt, ast.Assign) and any(_is_cluster(t) for t in stmt.targets)):
        return False
    value = stmt.value
    return isinstance(value, ast.Call) and "Cluster" in free_loads(value.func)


def admit(stmt: ast.stmt, bound: set) -> bool:
    """Whether `stmt` can run given the names bound so far; if so, add what it binds."""
    definition = isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))
    if not definition and not free_loads(stmt) <= bound:
        return False
    bound |= module_binds(stmt)
    return True


def free_loads(node: ast.AST) -> set[str]:
    """Names `node` reads when it runs (not what the functions it defines read later), less those
    it binds itself (loop variables, comprehension variables)."""
    loads = set()

    def visit(n):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            for d in [*a.defaults, *[d for d in a.kw_defaults if d], *getattr(n, "decorator_list", [])]:
                visit(d)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads.add(n.id)
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return loads - _all_stores(node)


def _all_stores(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out | module_binds(node)


def module_binds(node: ast.AST) -> set[str]:
    """Names a statement binds in the notebook's namespace (not inside the functions it defines)."""
    out = set()

    def visit(n):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in n.names if a.name != "*")
        elif not isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                out.add(n.name)
            for child in ast.iter_child_nodes(n):
                visit(child)

    visit(node)
    return out
