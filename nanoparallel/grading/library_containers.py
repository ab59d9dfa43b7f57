"""Notebook code kept inside a library's own containers, where the library will call it.

Libraries keep what they call later in containers at the top level of their modules: torch's
global module hooks (`torch.nn.modules.module._global_forward_hooks`), its optimizer hooks,
copyreg's dispatch table. A forward hook registered there through torch's public API runs inside
every forward in the kernel, the checks' own reference computations included, and can make them
agree with a wrong answer while nothing the checks read is replaced. So the guard looks through
those containers for callables that notebook code made.

Everything they hold before any cell runs is the libraries' own and is remembered (and kept
alive, so that its id is never reused): a look judges only what was added since, which keeps it
to a few tens of milliseconds with torch loaded (judging everything took 0.4 s).
"""
from __future__ import annotations

import collections
import types

# What a library module keeps at its top level that it may later call items of.
CONTAINERS = (dict, list, set, collections.OrderedDict, collections.deque, collections.defaultdict)
# Items that cannot be code.
_PLAIN = frozenset({int, float, str, bytes, bool, type(None), tuple, frozenset})


class LibraryContainers:
    def __init__(self, modules: dict, prov):
        self._modules = [m for m in modules.values() if type(m) is types.ModuleType and m.__name__ != "__main__"]
        self._prov = prov
        self._known: dict = {}  # id -> item, judged the libraries' own
        for container in self.containers():
            for item in _items(container):
                self._known[id(item)] = item

    def containers(self) -> list:
        """The containers the modules hold now at their top level."""
        return [value for module in self._modules for value in list(module.__dict__.values())
                if type(value) in CONTAINERS]

    def notebook_code_in(self, containers) -> str | None:
        """In words, the first callable made by notebook code that one of `containers` holds."""
        known, prov = self._known, self._prov
        for container in containers:
            for item in _items(container):
                if type(item) in _PLAIN or id(item) in known:
                    continue
                if callable(item) and prov.is_notebook(item):
                    return (f"notebook code is kept inside a library's own {type(container).__name__} of "
                            f"{len(container)} items, where the library calls it ({prov.why(item)})")
                known[id(item)] = item
        return None


def _items(container) -> list:
    # The C methods of the base types: a subclass's own values() or __iter__ is not asked.
    return list(dict.values(container)) if isinstance(container, dict) else list(container)
