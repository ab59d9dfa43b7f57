"""Notebook code kept inside a library's own containers, where the library will call it.

Libraries keep what they call later in containers at the top level of their modules (torch's
global module hooks, `torch.nn.modules.module._global_forward_hooks`, its optimizer hooks,
copyreg's dispatch table) and on their classes (cloudpickle's `Pickler._dispatch_table`). A
forward hook registered through torch's public API runs inside every forward in the kernel, the
checks' own reference computations included, and can make them agree with a wrong answer while
nothing the checks read is replaced; a reducer put into cloudpickle's table zeroed the checks'
own inputs as `cluster.run` shipped them (stubs took 43 points on 00 to 03). So the guard looks
through those containers for callables that notebook code made.

Everything they hold before any cell runs is the libraries' own and is remembered (and kept
alive, so that its id is never reused): a look judges only what was added since, which keeps it
to a few tens of milliseconds with torch loaded (judging everything took 0.4 s).
"""
from __future__ import annotations

import builtins
import collections
import itertools
import operator
import types
import weakref

# What a library module or class keeps that it may later call items of.
CONTAINERS = (dict, list, set, collections.OrderedDict, collections.deque, collections.defaultdict,
              collections.ChainMap)
# Items that cannot be code.
_PLAIN = frozenset({int, float, str, bytes, bool, type(None), tuple, frozenset})
_FINALIZE_RECORD = weakref.finalize._Info


class LibraryContainers:
    def __init__(self, modules: dict, classes: list, prov):
        self._modules = [m for m in modules.values() if type(m) is types.ModuleType and m.__name__ != "__main__"]
        self._classes = classes  # every class there was before any cell
        self._prov = prov
        self._known: dict = {}  # id -> item, judged the libraries' own
        for container in self.containers():
            for item in _items(container):
                self._known[id(item)] = item

    def containers(self) -> list:
        """The containers the modules hold now at their top level, and the classes in their own
        dictionaries (read through the mapping proxy: no metaclass code runs), each once (every
        module holds the builtins' dictionary, which the guard compares on its own)."""
        return list({id(value): value for _, _, value in self.placed()}.values())

    def namespaces(self) -> list:
        """The modules' dictionaries and the classes' own (mapping proxies: no metaclass code runs)."""
        return [*(m.__dict__ for m in self._modules), *(c.__dict__ for c in self._classes)]

    def placed(self) -> list:
        """(namespace, name, container) for each container a module or class holds now."""
        return [(namespace, name, value) for namespace in self.namespaces() for name, value in list(namespace.items())
                if type(value) in CONTAINERS and value is not builtins.__dict__]

    @staticmethod
    def fingerprints(containers) -> list:
        """What a look in the middle of a graded cell compares: each container's size and, for
        those holding something callable, which objects it holds. A library calls what its
        registries hold, and an item swapped there (one taken out, the notebook's put in, the
        size unchanged) would escape a look at sizes alone. Objects, not keys: what is put in
        is what a library would call."""
        return [(c, len(c), _identity(c) if any(map(callable, _items(c))) else None) for c in containers]

    @staticmethod
    def changed(fingerprints) -> list:
        """The containers whose size, or whose callables, changed since `fingerprints`."""
        return [c for c, size, identity in fingerprints
                if len(c) != size or (identity is not None and _identity(c) != identity)]

    def notebook_code_in(self, containers) -> str | None:
        """In words, the first callable made by notebook code that one of `containers` holds."""
        known, prov = self._known, self._prov
        for container in containers:
            for item in _items(container):
                if type(item) in _PLAIN or id(item) in known:
                    continue
                code = next((c for c in _held_by(item) if callable(c) and prov.is_notebook(c)), None)
                if code is not None:
                    return (f"notebook code is kept inside a library's own {type(container).__name__} of "
                            f"{len(container)} items, where the library calls it ({prov.why(code)})")
                known[id(item)] = item
        return None


def _held_by(item) -> list:
    """`item`, or what it will call: `weakref.finalize` keeps the function it calls when an object
    dies, and its arguments, in a record (`finalize._registry[f] = _Info(...)`), and the course's
    code dropping an object runs it with no look in between. Only that record is opened: other
    libraries' objects hold notebook callbacks for honest reasons (a widget made by `interact`)."""
    if type(item) is not _FINALIZE_RECORD:
        return [item]
    return [item.func, *item.args, *(item.kwargs or {}).values()]


def _identity(container) -> int:
    return hash(tuple(map(id, _items(container))))


def _items(container) -> list:
    # The C methods of the base types: a subclass's own values() or __iter__ is not asked.
    if type(container) is collections.ChainMap:
        return [item for m in list(container.maps) if isinstance(m, dict) for item in dict.values(m)]
    return list(dict.values(container)) if isinstance(container, dict) else list(container)


class AfterEachRun:
    """The look of a process that runs notebook code again and again (a rank), cheap enough for
    every run: how many names each module and class holds, where each container sits, its size
    and, where it holds something callable, which objects; only what changed since is judged.
    Walking every module and class again takes tens of milliseconds, and a rank runs the checks'
    functions hundreds of times a notebook. A container that held nothing callable is compared by
    size (a plain item swapped for a callable in place passes: the kernel's looks judge every
    item). Objects are compared with `is`, never through id(), which raises an audit event per
    call (under the rank's audit hook, 8 ms a look)."""

    def __init__(self, kept: LibraryContainers):
        self._kept = kept
        self._namespaces = kept.namespaces()
        self._names = list(map(len, self._namespaces))
        placed = kept.placed()
        # Column by column, so that a look is a few loops in C. A container some module names
        # twice is listed twice: telling needs id().
        self._places = [(namespace, name) for namespace, name, _ in placed]
        self._there = [value for _, _, value in placed]
        self._sizes = list(map(len, self._there))
        self._held = [c for c in self._there if any(map(callable, _items(c)))]
        self._each = [_items(c) for c in self._held]
        self._dicts = [c for c in self._held if isinstance(c, dict)]
        self._others = [c for c in self._held if not isinstance(c, (dict, collections.ChainMap))]
        self._chains = [c for c in self._held if type(c) is collections.ChainMap]
        self._items = self._held_items()

    def _held_items(self) -> list:
        # The base types' own C iteration (CONTAINERS are exact types); compared with `is`, so no
        # item's __eq__ runs.
        return [*itertools.chain.from_iterable(map(dict.values, self._dicts)),
                *itertools.chain.from_iterable(self._others), *itertools.chain.from_iterable(map(_items, self._chains))]

    def findings(self) -> str | None:
        """In words, the first notebook callable a library container came to hold since the last look."""
        now = [namespace.get(name) for namespace, name in self._places]
        if (list(map(len, self._namespaces)) == self._names and all(map(operator.is_, now, self._there))
                and list(map(len, self._there)) == self._sizes and _same(self._held_items(), self._items)):
            return None
        changed = [c for c, then in zip(now, self._there) if c is not then and type(c) in CONTAINERS]
        changed += [c for c, size in zip(self._there, self._sizes) if len(c) != size]
        changed += [c for c, then in zip(self._held, self._each) if not _same(_items(c), then)]
        changed += [value for namespace, size in zip(self._namespaces, self._names) if len(namespace) != size
                    for value in list(namespace.values()) if type(value) in CONTAINERS]  # a name added
        found = self._kept.notebook_code_in(changed)
        self.__init__(self._kept)
        return found


def _same(now: list, then: list) -> bool:
    return len(now) == len(then) and all(map(operator.is_, now, then))
