"""What notebook code can reach with no audit event: the attacker's model that tests/test_witness_reach.py
runs inside a graded kernel and inside a rank.

The witness keeps what it must not give away (its key, its records' pipe, the graded cells' hidden
tests, a rank's `stop`) in closures, and the audit hook makes every walk of the interpreter's
objects (gc, frames, tracebacks' frames, ctypes) cost the submission. Python audits neither a
function's `__closure__` nor a cell's `cell_contents` (which is writable), `type.__subclasses__`,
`__globals__`, a bound method's `__self__`, a weak reference's call, nor any object's `__dict__`
or slots. This walks exactly those, from every root a cell has (its globals, builtins, sys.modules,
every class through `object`, the trace and profile functions, the signal handlers), and says
where it found a function of the witness made in a closure, the witness's state, or a text it was
told to look for. The submission pastes this file's source into a cell and calls the function.
"""


def unaudited_reach(wanted_text=(), witness_prefix="nanoparallel.grading", most=60):
    """{"walked": objects, "seconds": ..., "found": ["what at path", ...]}."""
    import builtins
    import collections
    import signal
    import sys
    import threading
    import time
    import types
    import warnings
    import weakref
    warnings.simplefilter("ignore")  # reading a deprecated module attribute's __dict__ warns
    start = time.perf_counter()
    sequences = (list, tuple, set, frozenset, collections.deque)
    getsets = ("__self__", "cell_contents", "__traceback__", "__context__", "__cause__", "tb_next",
               "__closure__", "__globals__", "__func__", "__wrapped__")
    roots = [("globals()", globals()), ("builtins", builtins), ("sys.modules", sys.modules), ("object", object),
             ("sys.getprofile()", sys.getprofile()), ("sys.gettrace()", sys.gettrace())]
    roots += [(f"threading.{name}()", getattr(threading, name)()) for name in ("getprofile", "gettrace")
              if hasattr(threading, name)]
    for number in signal.valid_signals():
        try:
            roots.append((f"signal.getsignal({number})", signal.getsignal(number)))
        except (OSError, ValueError):
            pass
    parent, queue, keep, found = {}, collections.deque(), [], []

    def edges(obj):
        t = type(obj)
        if isinstance(obj, dict):
            for k, v in list(dict.items(obj)):
                yield k, f"[key {k!r:.40}]"
                yield v, f"[{k!r:.40}]"
        elif isinstance(obj, sequences):
            base = next(b for b in t.__mro__ if b in sequences)
            for n, v in enumerate(list(base.__iter__(obj))):
                yield v, f"[{n}]"
        elif isinstance(obj, types.MappingProxyType):
            for k, v in list(obj.items()):
                yield v, f".{k}"
        if isinstance(obj, type):
            try:
                yield type.__getattribute__(obj, "__dict__"), ".__dict__"
                yield obj.__mro__, ".__mro__"
                for n, sub in enumerate(type.__subclasses__(obj)):
                    yield sub, f".__subclasses__()[{n}]:{sub.__qualname__}"
            except Exception:
                pass
        else:
            try:
                yield object.__getattribute__(obj, "__dict__"), ".__dict__"
            except Exception:
                pass
            for name in getsets:
                try:
                    yield object.__getattribute__(obj, name), f".{name}"
                except Exception:
                    pass
        if isinstance(obj, weakref.ref):
            yield obj(), "()"
        for klass in t.__mro__:  # slots and C members: __slots__ fields, a partial's func, a property's fget
            for name, desc in list(type.__getattribute__(klass, "__dict__").items()):
                if type(desc) is types.MemberDescriptorType:
                    try:
                        yield desc.__get__(obj, t), f".{name}"
                    except Exception:
                        pass

    def what(obj):
        t = type(obj)
        if t is types.FunctionType:
            module = getattr(obj, "__module__", None) or ""
            if module.startswith(witness_prefix) and "<locals>" in obj.__qualname__ \
                    and not obj.__qualname__.startswith("__create_fn__"):  # a dataclass's generated methods
                return f"the function {module}.{obj.__qualname__}"
        elif t is dict and "key" in obj and "graded" in obj:
            return "the witness's state"
        elif t is str and "unaudited_reach" not in obj and any(w in obj for w in wanted_text):
            return f"the text {obj[:60]!r}"
        return None

    for label, obj in roots:
        if id(obj) not in parent:
            parent[id(obj)] = (None, label)
            queue.append(obj)
            keep.append(obj)
    while queue and len(found) < most:
        obj = queue.popleft()
        hit = what(obj)
        if hit:
            path, i = [], id(obj)
            while i is not None:
                i, label = parent[i]
                path.append(label)
            found.append(f"{hit} at {''.join(reversed(path))[:400]}")
            continue
        for child, label in edges(obj):
            if child is None or type(child) in (int, float, bool, bytes) or id(child) in parent:
                continue
            parent[id(child)] = (id(obj), label)
            queue.append(child)
            keep.append(child)  # alive until the walk ends, so that no id is reused
    return {"walked": len(parent), "seconds": round(time.perf_counter() - start, 1), "found": found}
