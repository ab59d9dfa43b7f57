"""What kind of thing each field of the engine's own objects holds, as the engine filled it.

An engine object calls methods of what it holds: a cluster its lock, its status board, and its
workers' processes and channels, at every run's start and end. Another library's object put in
such a field (`cluster._lock = types.SimpleNamespace(acquire=..., release=functools.partial(...))`)
runs library callables at those moments, where no walk of a cell's code looks, and can undo a
change before the cell's end. No notebook code is involved, so asking who made it finds nothing.

So the guard records each of the engine's objects once, at a moment when only the engine's
code or a locked cell's has touched it (a locked cell's end, for what its names reach; the engine
announcing a worker and its status slot as it starts a rank), and every look compares:
- a field that held an object holds that very object: the engine's objects in the kernel fill
  such fields once, as they are made, and another of the same type can still call something else
  (another `weakref.finalize`, another status board with other slots);
- a field that held a list, a tuple or a dict holds one of the same type (the engine may make a
  fresh one), and every object in it is one it held then or one the engine announced since;
- a field the object did not have then holds plain data (an object there would hide a method of
  the class, or be called by one);
- any field may come to hold plain data, which nothing calls, and a field that held plain data
  (None included) holds plain data.

What this leaves: objects the checks make while a cell runs are not recorded (docs/grading.md).
"""
from __future__ import annotations

# Data that nothing calls: any of these may replace another, or an object (then the engine's own
# call on it fails; it cannot run anything).
PLAIN = (int, float, complex, bool, str, bytes, type(None))
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
        # id -> (object, label, {field: (type, the object where it must stay, the items a container held)}).
        # Objects are kept alive, so that an id is never reused.
        self._objects: dict = {}

    def __len__(self) -> int:
        return len(self._objects)

    def record(self, value, label: str) -> None:
        """Record every engine object `value` reaches through engine objects' fields and the
        lists, tuples and dicts they hold, each as it is now, unless it was recorded before: a
        later record must not learn a replacement as the engine's."""
        queue, seen = [(value, label, 0)], set()
        while queue and len(seen) < _MAX_OBJECTS:
            obj, where, depth = queue.pop()
            if id(obj) in seen or type(obj) in PLAIN:
                continue
            seen.add(id(obj))
            if type(obj) in _CONTAINERS:
                if depth < 4:
                    queue.extend((v, f"{where}[{k!r}]", depth + 1) for k, v in _items(obj))
                continue
            fields = own_fields(obj) if is_engine_object(obj) else None
            if fields is None:
                continue
            if id(obj) not in self._objects:
                self._objects[id(obj)] = (obj, where, {name: _as_recorded(field) for name, field in list(fields.items())})
            queue.extend((field, f"{where}.{name}", 0) for name, field in list(fields.items()))

    def changes(self) -> list[str]:
        """In words, each recorded object's field that no longer holds what the engine put there
        (see the module's docstring for what counts)."""
        found = []
        for obj, label, known in self._objects.values():
            fields = own_fields(obj)
            if fields is None:
                found.append(f"{label}'s own attributes were replaced")
                continue
            for name, value in list(fields.items()):
                now = type(value)
                if now in PLAIN:
                    continue
                if name not in known:
                    found.append(f"{label}.{name} was added, a {_name(now)}, after the engine made {label}")
                    continue
                kind, same, items = known[name]
                if now is not kind:
                    found.append(f"{label}.{name} holds a {_name(now)} where the engine put a {_name(kind)}")
                elif same is not None and value is not same:
                    found.append(f"{label}.{name} holds another {_name(now)} than the one the engine put there")
                elif items is not None:
                    stranger = next((v for _, v in _items(value) if type(v) not in PLAIN and id(v) not in items
                                     and id(v) not in self._objects), None)
                    if stranger is not None:
                        found.append(f"{label}.{name} holds a {_name(type(stranger))} that the engine did not put there")
        return found


def _as_recorded(field) -> tuple:
    """(its type, the object itself if it must stay, the objects in it if it is a container:
    by id, each kept alive)."""
    kind = type(field)
    if kind in _CONTAINERS:
        held = [v for _, v in _items(field) if type(v) not in PLAIN]
        return kind, None, {id(v): v for v in held}
    return kind, None if kind in PLAIN else field, None


def _items(container) -> list:
    """(key, item) pairs, read with the base types' own methods (a subclass's are not asked; the
    type is compared before this is called)."""
    if type(container) is dict:
        return list(dict.items(container))
    return list(enumerate(list.__iter__(container) if type(container) is list else tuple.__iter__(container)))


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
