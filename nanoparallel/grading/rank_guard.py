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

import inspect
import logging
import os
import sys
import threading
import types

from nanoparallel.grading import rank_channels, registrations, signal_handlers
from nanoparallel.grading.library_containers import AfterEachRun, LibraryContainers
from nanoparallel.grading.originals import all_classes
from nanoparallel.grading.sealed import opaque
from nanoparallel.grading.guard import PROBES, _importing
from nanoparallel.grading.provenance import (Provenance, frame_read_for_notebook, frame_is_notebook,
                                             is_under_library_roots, notebook_on_stack, probed_for_notebook,
                                             witness_code)

ENV = "NANOPARALLEL_GUARDED"
TAMPERED = 86
STOP_MARK = "nanoparallel guard: "  # the first words of the line a stopped rank leaves in its log
_MODULES = ("builtins", "math", "copy", "operator", "functools", "itertools", "pickle", "os",
            "multiprocessing.connection", "cloudpickle", "torch", "torch.distributed",
            "torch.distributed.distributed_c10d", "torch.nn", "torch.nn.functional", "torch.autograd",
            "torch.autograd.function", "torch.nn.modules.module", "torch._tensor", "torch.optim")
_PROBES = PROBES | {"sys._getframe"}
# What the rank's hook hears while it works (see `hook`): ways to a frame, and ways to read the
# running frame or run code in it, which the hook never uses itself.
_READS_THIS_FRAME = frozenset({"exec", "nanoparallel.frame_locals"})
_INSIDE = _PROBES | _READS_THIS_FRAME
# The frame attributes Python audits: with a frame, code could reach the worker loop below it.
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_code"}
_CODE_ATTRS = {"__code__", "__defaults__", "__kwdefaults__"}
_CALLABLE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
             types.WrapperDescriptorType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
             types.MemberDescriptorType, staticmethod, classmethod, property, type)


# Read once, as the engine is imported (under grading, before any cell): a notebook that writes
# os.environ afterwards and restarts its ranks must not get them unguarded. Setting it later can
# only turn the guard on (the ranks read their own environment, which the kernel sets for them).
GRADED = os.environ.get(ENV) == "1"


def enabled() -> bool:
    return GRADED or os.environ.get(ENV) == "1"


# Long: the audit hook and the after-run check share what this closure captured before any
# notebook code ran (the watched originals, the classifiers, os._exit); as module attributes,
# notebook code on the rank could rebind them.
def install():
    """Remember what the checks rely on and install the hook; return the after-run check."""
    # (namespace, name, value): callables and classes only, data may change. Any
    # replacement counts, whoever made it (another library's object, a MagicMock, a builtin):
    # the fork server has imported torch._dynamo, which rewraps torch's own functions, before
    # this snapshot.
    watched = []
    classes = []
    for name in list(sys.modules):
        if name in _MODULES or name.startswith("nanoparallel"):
            namespace = sys.modules[name].__dict__
            for key, value in list(namespace.items()):
                if isinstance(value, _CALLABLE):
                    watched.append((namespace, key, value))
                if isinstance(value, type) and value.__module__ == name:
                    classes.append(value)
    for cls in classes:
        for key, value in list(cls.__dict__.items()):
            if isinstance(value, _CALLABLE):
                watched.append((cls.__dict__, key, value))
    from nanoparallel.grading import _gate
    _gate.seal_frame_readers()  # locals(), vars(), dir() announce a read of the calling frame
    prov = Provenance()
    is_notebook = prov.is_notebook
    _exit, _write, _getframe, _is_notebook = os._exit, os.write, sys._getframe, frame_is_notebook
    _probed, _read_for_notebook = probed_for_notebook, frame_read_for_notebook
    _on_stack, _channel, _library_path = notebook_on_stack, rank_channels.channel, is_under_library_roots
    _events, _in_import, _private = rank_channels.EVENTS, _importing, rank_channels.private_roots()
    code = TAMPERED
    # [1 while the hook works and 2 while it asks who raised an event it heard meanwhile, the
    # thread it works on]
    busy = [0, None]
    _thread_id = threading.get_ident
    _own = witness_code()
    # A handler would be handed the running frame, and below it the worker loop's
    # (signal_handlers.py): installing one stops the rank before it is in place.
    signal_allowed, signal_changed = signal_handlers.rules(signal_handlers.snapshot())
    _signal_event = signal_handlers.EVENT

    def stop(reason: str) -> None:
        try:
            _write(2, f"{STOP_MARK}{reason}\n".encode())
        finally:
            _exit(code)
    # Handed to the wrappers and the import rule, which notebook code can find: held in C, so that
    # no `__closure__` leads to its cells (writable: `_exit` swapped for a no-op would let every
    # stop return).
    stop = opaque(stop)

    def hook(event, args):
        if busy[0] and busy[1] != _thread_id():
            return  # another thread's event while this one's hook works: as before, unheard
        if busy[0]:
            # Code the hook runs without meaning to (a notebook object's property, read as the hook
            # looks at an event's arguments) has the hook's frames below it: only the witness's own
            # code may reach for frames then, and nothing may read the hook's locals or run code in
            # its frame (as in the kernel's gate, _gate.c).
            if busy[0] == 1 and (event in _INSIDE or event.startswith("gc.") or (
                    event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRS)):
                busy[0] = 2
                try:
                    own = id(_getframe(1).f_code) in _own
                finally:
                    busy[0] = 1
                if own == (event in _READS_THIS_FRAME):
                    stop(f"code ran inside the rank's guard and used {event}")
            return
        if event == _signal_event:
            stop(f"code on a rank installed {args[0] if args else 'a signal handler'}: a handler is handed the "
                 "running frame and the worker's frames below it")
        if event in _MAKES_CODE:
            made_in = _code_file(event, args)
            if made_in and _library_path(made_in) and _is_notebook(_getframe(1)) and not _in_import(_getframe(1)):
                stop(f"notebook code made code that says it comes from {made_in}: its frames would pass for that "
                     "file's on every stack the grader reads")
            return
        probe = event in _PROBES or event.startswith("ctypes.") or (
            event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRS) or (
            event == "object.__setattr__" and len(args) > 1 and args[1] in _CODE_ATTRS)
        if not probe and event not in _events and not event.startswith("socket."):
            return
        busy[0], busy[1] = 1, _thread_id()
        try:
            if probe:
                # A walk or trace handed to another library (torch's tree_map) with notebook code
                # below counts too; not the frame reads, which libraries make for their own reasons.
                if _logging_finds_its_caller(_getframe(1)):
                    return  # logging's record of who logged: it hands back a file name and a line
                if event == "sys.addaudithook" or _is_notebook(_getframe(1)) or (
                        (event in PROBES or event.startswith("ctypes.")) and _probed(_getframe(1))) or (
                        event == "sys._getframe" and _read_for_notebook(_getframe(1))):
                    stop(f"notebook code used {event}")
                return
            # A library (pathlib, torch.save, socket.create_connection) may act for notebook
            # code, so notebook code anywhere up the stack counts; an import it asked for does not.
            used = _channel(event, args, _library_path, _private)
            if used and _on_stack(_getframe(1)) and not _in_import(_getframe(1)):
                stop(f"notebook code on a rank used {used}: data sent that way never shows in the "
                     "trace, so the course's checks cannot see it (use torch.distributed's functions)")
        finally:
            busy[0] = 0

    # A rank lives from run to run: notebook code kept in a library's own container (a global
    # module hook, an optimizer hook, copyreg's table) would run inside every later run on it,
    # the checks' own reference runs included (a forward hook planted by one run changed the
    # next run's plain Linear). Listed before the hook is in place: id() raises an audit event.
    kept_by_libraries = AfterEachRun(LibraryContainers(dict(sys.modules), all_classes(), prov))
    sys.addaudithook(hook)
    watched += _guard_native_channels(stop, _getframe, _on_stack)
    watched += registrations.watch(stop, _on_stack, _in_import, is_notebook, _getframe)
    watched += signal_handlers.watch(signal_allowed)
    # What the guard itself just wrapped (os.mkfifo...) is watched as its wrapper, not as before.
    watched = [(namespace, key, value) for namespace, key, value in watched if namespace.get(key) is value]
    import_rule_intact = _RefuseImports.install(stop, _getframe, _on_stack, watched)
    _missing = object()
    from nanoparallel.grading.comm_witness import CommWitness
    witness = CommWitness()

    def check(traced_calls=None) -> None:
        """After a run: nothing replaced, and nothing communicated that the trace did not record;
        `traced_calls` is (op, group size) of each traced call (None for a run that raised, whose
        point-to-point counts are not compared: it may have stopped between a send and its wait)."""
        for namespace, key, value in watched:
            now = namespace.get(key, _missing)
            if now is not value:
                where = namespace.get("__name__") or namespace.get("__module__") or "?"
                stop(f"{where}.{key} was replaced or removed")
        kept = kept_by_libraries.findings()
        if kept:
            stop(f"{kept}: it would run inside this rank's later runs, the course's checks included")
        if not import_rule_intact():
            stop("notebook code moved or changed the guard's import rule (sys.meta_path)")
        changed = signal_changed()
        if changed is not None:
            stop(f"a handler for signal {changed} was installed on the rank")
        why = witness.untraced(traced_calls)
        if why:
            stop(why)

    check.begin = witness.begin
    return check


def _logging_finds_its_caller(frame) -> bool:
    """Whether `frame` is logging's `Logger.findCaller`, or its `currentframe` called by it: it
    takes a frame and reads its code, and hands back only where the call was made
    (logging.warning on a rank)."""
    def find_caller(f):
        return f is not None and f.f_code.co_filename == _LOGGING_FILE and f.f_code.co_name == "findCaller"
    return frame.f_code.co_filename == _LOGGING_FILE and (find_caller(frame) or find_caller(frame.f_back))


_LOGGING_FILE = logging.__file__  # read as the engine is imported, before any notebook code


# Every way Python makes or runs code from a code object; what says where the code comes from is
# its file name, which the witness (comm_witness.origin) and the rules for notebook code read on
# every stack. Library files are loaded by imports (from .pyc, through marshal, with no event).
_MAKES_CODE = frozenset({"compile", "code.__new__", "exec", "function.__new__"})


def _code_file(event: str, args) -> str | None:
    """The file name of the code an event makes or runs (None for one not named after a file)."""
    if event in ("compile", "code.__new__"):
        name = args[1] if len(args) > 1 else None
    else:
        name = getattr(args[0], "co_filename", None) if args else None
    try:
        name = os.fsdecode(name) if name is not None else None
    except TypeError:
        return None
    return name if name and not name.startswith("<") else None


# torch.distributed's own Python code, the one caller that may use a process group's store.
_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")
_NAMED = (str, bytes, os.PathLike)


def _stopping(fn, name: str, stop, getframe, on_stack, applies=lambda args: True, allowed=lambda frame: False):
    """`fn`, stopping the rank first when notebook code is up the stack and `applies(args)`,
    unless `allowed(caller)`: for what opens a way to another process without an audit event."""
    def guarded(*args, **kwargs):
        caller = getframe(1)
        if applies(args) and not allowed(caller) and on_stack(caller):
            stop(f"notebook code on a rank used {name}: data sent that way never shows in the trace "
                 "(use torch.distributed's functions)")
        return fn(*args, **kwargs)
    # Held in C: the closure holds the original (a channel with no stop) and `stop`.
    return opaque(guarded)


def _stopping_class(cls: type, name: str, stop, getframe, on_stack, applies) -> type:
    look = _stopping(lambda *args, **kwargs: None, name, stop, getframe, on_stack, applies)

    def __init__(self, *args, **kwargs):
        look(*args, **kwargs)
        cls.__init__(self, *args, **kwargs)
    return type(cls.__name__, (cls,), {"__init__": opaque(__init__), "__module__": cls.__module__})


def _native_channels():
    """(owner, key, what it is, when a call opens a channel, which caller may) of the entry points that reach a
    file, shared memory or another rank in C, where Python raises no audit event: the process
    group's stores, torch's files (torch.save/load with a path, from_file, storages shared by
    file name, TorchScript files), POSIX shared memory by name, named pipes and file nodes."""
    import _posixshmem
    import posix

    import torch
    from torch._C import _distributed_c10d as c10d
    named = lambda args: bool(args) and isinstance(args[0], _NAMED)  # noqa: E731 (a file name, not a buffer)
    second_named = lambda args: len(args) > 1 and isinstance(args[1], _NAMED)  # noqa: E731 (after self)
    always = lambda args: True  # noqa: E731
    # torch's own c10d code may use a store: that is how a group is created.
    from_c10d = lambda frame: frame.f_code.co_filename.endswith(_C10D)  # noqa: E731
    found = []
    for cls in (v for v in vars(c10d).values() if isinstance(v, type) and issubclass(v, c10d.Store)):
        found += [(cls, key, f"the process group's store ({cls.__name__}.{key})", always, from_c10d)
                  for key, value in list(cls.__dict__.items()) if not key.startswith("_") and callable(value)]
    nobody = lambda frame: False  # noqa: E731
    found += [(torch._C, "PyTorchFileWriter", "torch.save to a file", named, nobody),
              (torch._C, "PyTorchFileReader", "torch.load from a file", named, nobody),
              (torch, "from_file", "torch.from_file", always, nobody),
              (torch._C, "import_ir_module", "torch.jit.load from a file", second_named, nobody),
              (torch._C.ScriptModule, "save", "torch.jit.save to a file", second_named, nobody),
              (_posixshmem, "shm_open", "POSIX shared memory", always, nobody),
              (_posixshmem, "shm_unlink", "POSIX shared memory", always, nobody)]
    # A named pipe or file node is made with no audit event, and another rank can then see it with
    # os.stat, which raises none either; os re-exports posix's functions, so both are wrapped.
    found += [(module, key, f"a file made by os.{key}", always, nobody)
              for module in (os, posix) for key in ("mkfifo", "mknod")]
    # On UntypedStorage, which torch's Python code and notebooks reach them through: the class they
    # are defined on (torch._C.StorageBase) is immutable.
    found += [(torch.UntypedStorage, key, f"a storage shared by file ({key})", always, nobody)
              for key in ("from_file", "_share_filename_cpu_", "_new_shared_filename_cpu", "_new_using_filename_cpu")]
    return [entry for entry in found if hasattr(entry[0], entry[1])]


def _guard_native_channels(stop, getframe, on_stack) -> list:
    """Wraps each of `_native_channels()`; returns the wrappers as watched entries, so that putting
    an original back is caught after the run."""
    entries = []
    for owner, key, what, applies, allowed in _native_channels():
        original = inspect.getattr_static(owner, key)
        if isinstance(original, type):  # a class: a subclass that looks first (isinstance still holds)
            guarded = _stopping_class(original, what, stop, getframe, on_stack, applies)
        elif isinstance(original, staticmethod):
            guarded = staticmethod(_stopping(original.__func__, what, stop, getframe, on_stack, applies, allowed))
        else:
            guarded = _stopping(original, what, stop, getframe, on_stack, applies, allowed)
        setattr(owner, key, guarded)
        entries.append((vars(owner), key, guarded))
    return entries


class _RefuseImports:
    """An import finder that stops a rank whose notebook code imports a library that talks to
    other processes in C, out of the audit hook's sight (pyzmq: sockets of its own)."""

    REFUSED = frozenset({"zmq"})

    __slots__ = ("_rules",)

    def __init__(self, stop, getframe, on_stack):
        self._rules = (stop, getframe, on_stack)

    @staticmethod
    def install(stop, getframe, on_stack, watched: list):
        """Put a finder first on sys.meta_path; return the after-run check that it is still there."""
        refuse = _RefuseImports(stop, getframe, on_stack)
        rules = refuse._rules
        sys.meta_path.insert(0, refuse)
        watched.append((_RefuseImports.__dict__, "find_spec", _RefuseImports.find_spec))
        return lambda: bool(sys.meta_path) and sys.meta_path[0] is refuse and refuse._rules is rules

    def find_spec(self, name, path=None, target=None):
        stop, getframe, on_stack = self._rules
        if name.partition(".")[0] in _RefuseImports.REFUSED and on_stack(getframe(1)):
            stop(f"notebook code on a rank imported {name}, whose sockets never show in the trace "
                 "(use torch.distributed's functions)")
        return None

