"""The ranks' half of guarded grading (the kernel's half is `guard.py`).

In guarded mode (`NANOPARALLEL_GUARDED=1`, set by the autograder) each worker, before running any
notebook function, remembers every function, class and method of torch's main namespaces, the
engine, the standard modules the checks use and the builtins, and installs an audit hook. After
each run it checks that each of them is still the same object; a change, or notebook code
reaching for frames, the garbage collector, tracing or ctypes, stops the rank at once with exit
code `TAMPERED` (the checks hold references taken before any notebook code ran, so patching this
module changes nothing). It also stops a rank whose run communicated outside the traced
torch.distributed functions (`comm_witness`). The cluster reports that as a failed run and tells
the kernel's guard.
"""
from __future__ import annotations

import os
import sys
import types

from nanoparallel.grading import rank_channels
from nanoparallel.grading.guard import PROBES, _importing
from nanoparallel.grading.provenance import (Provenance, frame_is_notebook, is_under_library_roots,
                                             notebook_on_stack)

ENV = "NANOPARALLEL_GUARDED"
TAMPERED = 86
STOP_MARK = "nanoparallel guard: "  # the first words of the line a stopped rank leaves in its log
_MODULES = ("builtins", "math", "copy", "operator", "functools", "itertools", "pickle", "os",
            "multiprocessing.connection", "cloudpickle", "torch", "torch.distributed",
            "torch.distributed.distributed_c10d", "torch.nn", "torch.nn.functional", "torch.autograd",
            "torch.autograd.function", "torch.nn.modules.module", "torch._tensor", "torch.optim")
_PROBES = PROBES | {"sys._getframe"}
# The frame attributes Python audits: with a frame, code could reach the worker loop below it.
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_code"}
_CODE_ATTRS = {"__code__", "__defaults__", "__kwdefaults__"}
_CALLABLE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
             types.WrapperDescriptorType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
             types.MemberDescriptorType, staticmethod, classmethod, property, type)


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def install():
    """Remember what the checks rely on and install the hook; return the after-run check."""
    # (namespace, name, value, engine): callables and classes only, data may change. Torch and
    # the standard library may rewrap their own functions (torch._dynamo wraps manual_seed), so
    # there only a notebook-made replacement counts; the engine's never change.
    watched = []
    classes = []
    for name in list(sys.modules):
        if name in _MODULES or name.startswith("nanoparallel"):
            engine = name.startswith("nanoparallel")
            namespace = sys.modules[name].__dict__
            for key, value in list(namespace.items()):
                if isinstance(value, _CALLABLE):
                    watched.append((namespace, key, value, engine))
                if isinstance(value, type) and value.__module__ == name:
                    classes.append((value, engine))
    for cls, engine in classes:
        for key, value in list(cls.__dict__.items()):
            if isinstance(value, _CALLABLE):
                watched.append((cls.__dict__, key, value, engine))
    watched.sort(key=lambda w: not w[3])  # the engine first: it holds the classifier the rest uses
    is_notebook = Provenance().is_notebook
    _exit, _write, _getframe, _is_notebook = os._exit, os.write, sys._getframe, frame_is_notebook
    _on_stack, _channel, _library_path = notebook_on_stack, rank_channels.channel, is_under_library_roots
    _events, _in_import = rank_channels.EVENTS, _importing
    code = TAMPERED
    busy = [False]

    def stop(reason: str) -> None:
        try:
            _write(2, f"{STOP_MARK}{reason}\n".encode())
        finally:
            _exit(code)

    def hook(event, args):
        if busy[0]:
            return
        probe = event in _PROBES or event.startswith("ctypes.") or (
            event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRS) or (
            event == "object.__setattr__" and len(args) > 1 and args[1] in _CODE_ATTRS)
        if not probe and event not in _events and not event.startswith("socket."):
            return
        busy[0] = True
        try:
            if probe:
                if event == "sys.addaudithook" or _is_notebook(_getframe(1)):
                    stop(f"notebook code used {event}")
                return
            # A library (pathlib, torch.save, socket.create_connection) may act for notebook
            # code, so notebook code anywhere up the stack counts; an import it asked for does not.
            used = _channel(event, args, _library_path)
            if used and _on_stack(_getframe(1)) and not _in_import(_getframe(1)):
                stop(f"notebook code on a rank used {used}: data sent that way never shows in the "
                     "trace, so the course's checks cannot see it (use torch.distributed's functions)")
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    watched += _guard_stores(stop, _getframe, _on_stack)
    _missing = object()
    from nanoparallel.grading.comm_witness import CommWitness
    witness = CommWitness()

    def check(traced_calls=None) -> None:
        """After a run: nothing replaced, and (for a run that returned) nothing communicated that
        the trace did not record; `traced_calls` is (op, group size) of each traced call."""
        for namespace, key, value, engine in watched:
            now = namespace.get(key, _missing)
            if now is not value and (engine or now is _missing or is_notebook(now)):
                where = namespace.get("__name__") or namespace.get("__module__") or "?"
                stop(f"{where}.{key} was replaced by notebook code")
        if traced_calls is not None:
            why = witness.untraced(traced_calls)
            if why:
                stop(why)

    check.begin = witness.begin
    return check


# torch.distributed's own Python code, the one caller that may use a process group's store.
_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")


def _guard_stores(stop, getframe, on_stack) -> list:
    """The process group's key-value store (`_get_default_store().set/get`, or a store of one's
    own) reaches every rank and is no traced call: its methods stop a rank when notebook code is
    up the stack, unless torch.distributed's own code calls them (creating a group). Returns the
    wrappers as watched entries, so that putting a method back is caught after the run."""
    from torch._C import _distributed_c10d as c10d
    entries = []
    stores = [v for v in vars(c10d).values() if isinstance(v, type) and issubclass(v, c10d.Store)]
    for cls in stores:
        for name, method in list(cls.__dict__.items()):
            if name.startswith("_") or not callable(method):
                continue

            def guarded(*args, _method=method, _name=f"{cls.__name__}.{name}", **kwargs):
                caller = getframe(1)
                if not caller.f_code.co_filename.endswith(_C10D) and on_stack(caller):
                    stop(f"notebook code on a rank used the process group's store ({_name}): data "
                         "sent that way never shows in the trace (use torch.distributed's functions)")
                return _method(*args, **kwargs)

            setattr(cls, name, guarded)
            entries.append((cls.__dict__, name, guarded, True))
    return entries

