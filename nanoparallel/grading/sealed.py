"""Callables held in C, for what the witness leaves where notebook code can find it.

A plain function's `__closure__` leads, with no audit event, to the cells it closes over, and
those cells can be rewritten. What the witness hands out (a wrapper on a library's function, a
rank's `stop`, the callable that runs a graded cell, a rank's signing function) holds what it
keeps secret or would run, so it is sealed: wrapped in functools' C wrapper of lru_cache, with no
cache, which holds the function in C, calls it as it is, adds no frame and has no attribute that
leads back to it.
"""
from __future__ import annotations


def opaque(fn):
    """A callable that calls `fn`, adds no frame, and lets no attribute reach `fn`. What the witness
    leaves where notebook code can find it (a library's module, a class listed by
    `object.__subclasses__()`, a rank's import rule) must not lead to its closures, which hold what
    the witness keeps secret and what it would run; a plain function's `__closure__` does, unheard,
    and its cells can be rewritten. (functools' C wrapper of lru_cache, with no cache: it holds the
    function in C and calls it as it is.)"""
    import functools
    return functools._lru_cache_wrapper(fn, 0, False, functools._CacheInfo)


def sealer():
    """`opaque` as functools is now, for what seals while cells run: a cell could have replaced
    what `opaque` looks up by then."""
    import functools
    wrapper, info = functools._lru_cache_wrapper, functools._CacheInfo
    return lambda fn: wrapper(fn, 0, False, info)
