"""Operator registrations (`torch.library`) under the witness.

A kernel registered for an operator changes what that operator computes for every caller: an
`aten::allclose` that always says True makes every comparison of the checks pass, and no Python
object the guard compares was replaced. Every registration goes through two C entry points,
`torch._C._dispatch_library` (a library handle) and the methods of the handle it returns
(`torch._C._DispatchModule`: impl, fallback, define, ...), so both sides of the witness wrap
those and report a registration that notebook code makes: the kernel's guard charges it to the
graded cell (0 and flagged), a rank's guard stops the rank. torch's own registrations, made while
a module is imported, are not reported. No course notebook registers an operator.
"""
from __future__ import annotations

from nanoparallel.grading.sealed import opaque

# The handle's methods that register or remove a kernel, a fallback or a schema.
_HANDLE_METHODS = ("impl", "impl_t_t", "impl_with_aoti_compile", "fallback", "fallback_fallthrough",
                   "register_ad_inplace_or_view_fallback", "reset", "def_", "def_legacy", "def_name_t_t",
                   "def_schema_t_t", "define")


def watch(report, on_stack, in_import, is_notebook, getframe) -> list:
    """Wrap every registration point; `report(reason)` is told of a registration that notebook
    code made, itself or through a library (`on_stack(caller)`, not an import it asked for:
    `in_import(caller)`), or that installs a kernel the notebook wrote (`is_notebook(fn)`).
    Returns (namespace, key, wrapper) for the guard's after-checks."""
    import torch

    def made_by_notebook(caller, args) -> bool:
        return (on_stack(caller) and not in_import(caller)) or any(callable(a) and is_notebook(a) for a in args)

    handle = torch._C._DispatchModule
    points = [(torch._C, vars(torch._C), "_dispatch_library")]
    points += [(handle, handle.__dict__, key) for key in _HANDLE_METHODS if key in handle.__dict__]
    watched = []
    for owner, namespace, key in points:
        guarded = _reporting(namespace[key], key, report, made_by_notebook, getframe)
        setattr(owner, key, guarded)
        watched.append((namespace, key, guarded))
    return watched


def _reporting(original, key: str, report, made_by_notebook, getframe):
    def guarded(*args, **kwargs):
        if made_by_notebook(getframe(1), args + tuple(kwargs.values())):
            report(f"notebook code registered an operator's kernel with torch.library ({key}): it "
                   "changes what torch computes for the checks too")
        return original(*args, **kwargs)
    return opaque(guarded)
