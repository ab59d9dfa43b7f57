"""What kind of thing each field of the engine's own objects holds, as the engine filled it.

An engine object calls methods of what it holds: a cluster its lock, its status board, and its
workers' processes and channels, at every run's start and end. Another library's object put in
such a field (`cluster._lock = types.SimpleNamespace(acquire=..., release=functools.partial(...))`)
runs library callables at those moments, where no walk of a cell's code looks, and can undo a
change before the cell's end. No notebook code is involved, so asking who made it finds nothing.

So the guard records each field's type at moments when only the engine's code or a locked cell's
has touched the object (a locked cell's end, for what its names reach; the engine announcing a
worker it made), and every look compares: a field that held an object holds an object of the
same type, or plain data, which nothing calls. A fresh lock for a lock does nothing a lock does
not; a namespace for a lock calls whatever it holds.

What this leaves: a field the engine left empty (None) may be filled with anything, and objects
the checks make while a cell runs are not recorded (docs/grading.md).
"""
from __future__ import annotations

# Data that nothing calls: any of these may replace another, or an object (then the engine's own
# call on it fails; it cannot run anything).
PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None)})
_CONTAINERS = (list, tuple, dict)
_MAX_OBJECTS = 5000


def is_engine_object(value) -> bool:
    """Whether `value` is an instance of a class the engine defines (read from the class's own
    dictionary: no metaclass or descriptor runs)."""
    cls = type(value)
    module = type.__dict__["__dict__"].__get__(cls).get("__module__")
    return type(module) is str and module.startswith("nanoparallel.")


def own_fields(obj) -> dict | None:
    """An object's own attribute dictionary, read past its class's __getattribute__; None if
    it has none."""
    try:
        fields = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None
    return fields if type(fields) is dict else None


class EngineFields:
    def __init__(self):
        # id -> (object, label, {field: type}); the object is kept alive so that its id is never reused
        self._objects: dict = {}

    def __len__(self) -> int:
        return len(self._objects)

    def record(self, value, label: str) -> None:
        """Record the fields of every engine object `value` reaches through engine objects'
        fields and the lists, tuples and dicts they hold. An object recorded before keeps what
        was recorded first, and only gains fields it did not have then: a later look must not
        learn a replacement as the engine's."""
        queue, seen = [(value, label, 0)], set()
        while queue and len(seen) < _MAX_OBJECTS:
            obj, where, depth = queue.pop()
            if id(obj) in seen or type(obj) in PLAIN:
                continue
            seen.add(id(obj))
            t = type(obj)
            if t in _CONTAINERS:
                if depth < 4:
                    items = dict.items(obj) if t is dict else enumerate(obj)
                    queue.extend((v, f"{where}[{k!r}]", depth + 1) for k, v in list(items))
                continue
            if not is_engine_object(obj):
                continue
            fields = own_fields(obj)
            if fields is None:
                continue
            known = self._objects.setdefault(id(obj), (obj, where, {}))[2]
            for name, field in list(fields.items()):
                known.setdefault(name, type(field))
                queue.append((field, f"{where}.{name}", 0))

    def changes(self) -> list[str]:
        """In words, each recorded field that now holds an object of another kind than the
        engine put there (its own dictionary replaced counts as every field)."""
        found = []
        for obj, label, known in self._objects.values():
            fields = own_fields(obj)
            if fields is None:
                if known:
                    found.append(f"{label}'s own attributes were replaced")
                continue
            for name, before in known.items():
                if name not in fields:
                    continue  # a field taken away: the engine's next use of it fails
                now = type(fields[name])
                if now is not before and now not in PLAIN and before is not type(None):
                    found.append(f"{label}.{name} holds a {now.__module__}.{now.__qualname__} where the engine "
                                 f"put a {before.__module__}.{before.__qualname__}")
        return found
