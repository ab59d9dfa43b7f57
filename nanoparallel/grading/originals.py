"""What the installed libraries' modules and classes held before any notebook code ran.

The grader's guard (`guard.py`) takes one `Originals` as the kernel starts, and compares what a
graded cell reaches with it *by identity*: a function, class, method or descriptor of torch, the
engine or the standard library that is no longer the same object is found whoever made the
replacement. Asking who made a value is not enough: `torch.allclose = unittest.mock.MagicMock(
return_value=True)`, `checks._compare = print` and `math.isclose = functools.partial(...)` put
library-made objects where the checks look, and each one answers every comparison.

Data (counters, caches, flags, the default process group) may change as libraries work, so only
code-like entries count: what was callable or a descriptor, or what is now. A function can also
change while staying the same object: its `__code__` or `__defaults__` reassigned, or its
`__kwdefaults__` dictionary edited in place (no audit event at all). So each Python function
found in a module or a class is kept with what decides its behaviour, and compared too. Libraries that
rewrap their own functions when first imported (`torch._dynamo` wraps `torch.manual_seed`) are
imported before the snapshot (`guard._import_engine`), so that what is seen here is their final
state. Modules and classes that appear later have no originals: the guard's provenance check
(`provenance.py`) covers them.
"""
from __future__ import annotations

import sys
import types

_MISSING = object()


def is_code(value) -> bool:
    """Whether a module or class entry is behaviour rather than data: something callable, a
    descriptor (a property, a static or class method), or a module."""
    return callable(value) or isinstance(value, (staticmethod, classmethod, property, types.ModuleType))


def all_classes() -> list[type]:
    """Every class there is now, found through type.__subclasses__ from object."""
    found, stack, seen = [], [object], set()
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        found.append(cls)
        try:
            stack.extend(type.__subclasses__(cls))
        except TypeError:
            continue
    return found


class Originals:
    """A shallow copy of every loaded module's namespace and every class's dictionary.

    Keys are ids, and each entry keeps its module or class alive, so an id is never reused.
    Taking one costs about 0.3 s with torch loaded; looking up an entry is a dictionary lookup.
    """

    def __init__(self):
        # By the id of the module's namespace: the guard reaches a module's names through a
        # function's __globals__ as often as through the module.
        self._modules = {id(m.__dict__): (m, dict(m.__dict__)) for m in list(sys.modules.values())
                         if isinstance(m, types.ModuleType)}
        self._classes = {id(c): (c, dict(c.__dict__)) for c in all_classes()}
        self._functions: dict = {}  # id(function) -> (function, what decides its behaviour)
        for _, namespace in (*self._modules.values(), *self._classes.values()):
            for value in namespace.values():
                for fn in _functions_in(value):
                    self._functions[id(fn)] = (fn, _behaviour(fn))

    def function_change(self, fn) -> str | None:
        """How a module's or class's Python function (or the functions a static method, class
        method or property holds) differs from itself before any notebook code ran, or None."""
        for f in _functions_in(fn):
            known = self._functions.get(id(f))
            if known is not None and known[0] is f and not _same_behaviour(_behaviour(f), known[1]):
                return f"{f.__module__}.{f.__qualname__} was changed in place (its code or its defaults)"
        return None

    def classes(self) -> list[type]:
        """Every class there was before any notebook code ran."""
        return [cls for cls, _ in self._classes.values()]

    def existed(self, cls: type) -> bool:
        """Whether `cls` was there before any notebook code ran."""
        return id(cls) in self._classes

    def held(self, cls: type, name: str):
        """What `cls`'s own dictionary held for `name` before any notebook code ran (None if
        nothing, or if `cls` came later)."""
        known = self._classes.get(id(cls))
        return None if known is None else known[1].get(name)

    def names_along(self, cls: type) -> set:
        """Every name that `cls` or a class along its MRO defines now, or defined before any
        notebook code ran: for any other name, `class_change` finds nothing."""
        names: set = set()
        for klass in cls.__mro__:
            names.update(klass.__dict__)
            known = self._classes.get(id(klass))
            if known is not None:
                names.update(known[1])
        return names

    def module_change(self, namespace: dict, name: str) -> str | None:
        """In words, how a module's name (`namespace` is the module's __dict__, or a function's
        __globals__) differs from before any notebook code ran, or None."""
        known = self._modules.get(id(namespace))
        if known is None or known[0].__dict__ is not namespace:
            return None
        before, now = known[1].get(name, _MISSING), namespace.get(name, _MISSING)
        if before is _MISSING:
            # A name a module gains is a submodule imported since, or what its __getattr__
            # provides: library work. A check that reads a name the module lacked would fail.
            return None
        return _difference(f"{known[0].__name__}.{name}", before, now) or self.function_change(now)

    def class_change(self, cls: type, name: str) -> str | None:
        """How looking up `name` on `cls` differs from before any notebook code ran, class by
        class along its MRO up to the one that defines it, or None. A method added on a class
        that inherited it (`torch.Tensor.__bool__ = ...`) counts as much as one replaced."""
        for klass in cls.__mro__:
            now = klass.__dict__.get(name, _MISSING)
            known = self._classes.get(id(klass))
            if known is not None:
                found = _difference(f"{klass.__qualname__}.{name}", known[1].get(name, _MISSING), now)
                if found:
                    return found
            if now is not _MISSING:
                return self.function_change(now)
        return None


def shadowed_method(cls: type, name: str, value) -> str | None:
    """In words, an object's own `value` for `name` that hides a method or descriptor of its
    class `cls` (`cluster.run = ...`), or None. The engine and torch never do that to their own
    objects; a submission doing it replaces what a check calls."""
    if not is_code(value):
        return None
    for klass in cls.__mro__:
        if name in klass.__dict__:
            if is_code(klass.__dict__[name]):
                return f"{cls.__qualname__}.{name} of an object is hidden by a value of its own"
            return None
    return None


def _functions_in(value) -> tuple:
    """The Python functions whose code and defaults decide what `value` does when called."""
    t = type(value)
    if t is types.FunctionType:
        return (value,)
    if t is staticmethod or t is classmethod:
        return _functions_in(value.__func__)
    if t is property:
        return tuple(f for f in (value.fget, value.fset, value.fdel) if type(f) is types.FunctionType)
    return ()


def _behaviour(fn: types.FunctionType) -> tuple:
    """What decides a function's behaviour besides its globals and closure. The keyword defaults
    are a dict the function holds and anyone can edit in place, so its items are copied."""
    kw = fn.__kwdefaults__
    return fn.__code__, fn.__defaults__, kw, None if kw is None else tuple(kw.items())


def _same_behaviour(now: tuple, before: tuple) -> bool:
    # By identity, item by item: `==` on a default could run a class's own comparison.
    return now[0] is before[0] and now[1] is before[1] and now[2] is before[2] and (
        now[3] is None or (len(now[3]) == len(before[3]) and
                           all(k1 is k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(now[3], before[3]))))


def _difference(label: str, before, now) -> str | None:
    if now is before or not (is_code(before) or is_code(now)):
        return None
    if now is _MISSING:
        return f"{label} was removed"
    if before is _MISSING:
        return f"{label} was added ({type(now).__qualname__})"
    return f"{label} was replaced ({type(before).__qualname__} by {type(now).__qualname__})"
