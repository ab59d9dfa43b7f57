"""The autograder's witness inside a submission's kernel.

Loaded as an IPython extension before any cell (`autograder/guarded_execute.py` starts kernels
with it and with `NANOPARALLEL_GUARD` naming a plan file); without that variable it does nothing.
It reads the plan (a fresh key, the cells to expect, the digests of the course's own code),
deletes it, and installs an audit hook (PEP 578: Python lets no code remove one). From then on:

- every locked cell announces itself on its first line and at its end, and each graded cell runs
  wrapped in one `if` block that announces its start and, on its very last line, its end. The
  kernel is sent only a request to run graded cell N: the hook hands it the code it holds,
  sealed in C, and the request runs it, so the checks' text never sits where notebook code could
  read it during the cell (`In`, linecache) and no frame of the witness sits below the cell's;
  the checks run as a function's body, so their values are locals, not globals;
- at a graded cell's end the hook checks that the frame reaching it runs exactly the course's
  code for that cell (a digest of the code object), in the notebook's namespace, and that
  everything the cell reads is as the course shipped it: names bound by locked cells (same
  object, same contents), the builtins, `sys.modules`, IPython's input/AST transformers, event
  callbacks and exception handlers, tracing, torch's function modes and library overrides, and,
  through the objects those names reach, every module attribute, class attribute, instance
  attribute, default and closure (nothing of it made by notebook code), and the engine's own
  objects hold what the engine put in them (`engine_fields.py`). The same looks run in the middle
  of the cell, each time notebook code hands control back and as each run's replies arrive and
  the run ends;
- it writes one record per graded cell, MAC'd with the key, into a pipe the grader reads. A
  graded cell scores its points only with a valid "ok" record, and 0 without one, whatever the
  cell shows (autograder/guarded_execute.py, `WitnessedScores`).

Operations that could reach the key (walking the interpreter's objects with `gc`, other threads'
frames, tracing or profiling hooks, `ctypes`, another audit hook, the process's memory in /proc)
destroy the key when notebook code performs them: every later graded cell then has no valid
record and scores 0, and the grader flags the submission. What this stops and what it does not is
stated in docs/grading.md ("Grading integrity").
"""
from __future__ import annotations

import __future__
import builtins
import functools
import gc
import hashlib
import importlib
import hmac
import json
import linecache
import multiprocessing.connection
import multiprocessing.reduction
import os
import signal
import struct
import _hashlib
import _signal
import sys
import threading
import time
import types

from nanoparallel.grading import registrations, sealed, signal_handlers
from nanoparallel.grading.engine_fields import EngineFields
from nanoparallel.grading.library_containers import LibraryContainers
from nanoparallel.grading.originals import Originals, all_classes, is_code, shadowed_method
from nanoparallel.grading.provenance import (Provenance, code_digest, frame_read_for_notebook, frame_is_notebook,
                                     is_engine_file, is_library_file,
                                     is_under_library_roots, nested_codes, notebook_on_stack,
                                     probed_for_notebook, witness_code)
from nanoparallel.grading.thread_states import ThreadStates

ENV = "NANOPARALLEL_GUARD"
GRADED_FUNCTION = "_nanoparallel_graded_cell"
RESUME_EVENT = "nanoparallel.resume"
# The engine raises it as a run's replies have arrived and as the run ends (runtime/cluster.py).
ENGINE_LOOK = "nanoparallel.engine_look"
# The engine's cost model raises COST_MODEL_RAN whenever it works out a collective's cost; a check
# asks for the count so far with COST_MODEL_RUNS and a list to append it to. The count lives in
# the hook's closure, so notebook code can raise it (by running the model) but not lower it.
COST_MODEL_RAN, COST_MODEL_RUNS = "nanoparallel.cost_model", "nanoparallel.cost_model_runs"
# How each line the gate writes as it closes for good starts (_gate.c): not MAC'd, the grader
# reads it as a finding (guarded_execute.read_records).
GATE_CLOSED = "the witness closed: "
# Thread classes that run whatever they were handed (threading's own; _DummyThread stands for a
# thread started past threading, with _thread.start_new_thread).
_ANY_TARGET = (threading.Thread, threading.Timer, threading._DummyThread)
# Audit events through which code could reach objects it holds no reference to (the hook's key):
# walking the garbage collector, other threads' frames, trace and profile functions, another hook.
# The ranks' guard adds sys._getframe, since a rank's worker loop sits below notebook code.
PROBES = frozenset({"sys.settrace", "sys.setprofile", "sys._current_frames", "gc.get_objects",
                    "gc.get_referrers", "gc.get_referents", "sys.addaudithook"})


def load_ipython_extension(ip) -> None:
    plan_path = os.environ.pop(ENV, None)
    if plan_path:
        install(ip, plan_path)


def install(ip, plan_path: str) -> None:
    with open(plan_path) as f:
        plan = json.load(f)
    os.unlink(plan_path)
    gate = _gate_module()
    gate.seal_frame_readers()  # before anything remembers the builtins as they are
    # The writing end of a pipe the grader reads: lines can be added, none taken back. Programs
    # the kernel starts do not inherit it.
    fd = plan["records_fd"]
    os.set_inheritable(fd, False)
    _import_engine()
    sys.audit("nanoparallel.guard_installing")
    key = bytes.fromhex(plan.pop("key"))
    # Each signal's handler as the kernel has it now: the hook and the gate allow these only.
    before = signal_handlers.snapshot()
    hook, secrets, graveyard = _make_hook(ip, key, fd, plan, before)
    del key
    # Everything the hook needs lives in its closure, and only the gate (C) holds the hook: no
    # Python object points at it.
    gate.install(hook, _HEARD, RESUME_EVENT, _signal.getsignal, tuple(before), tuple(before.values()),
                 int(signal.SIGINT), signal_handlers.interrupt_handlers(before), fd, secrets, witness_code(),
                 graveyard)


def _gate_module():
    """The C gate (`_gate.c`), built by `make setup` with the package: without it a signal handler
    could read the witness's key, so there is no witness."""
    try:
        from nanoparallel.grading import _gate
    except ImportError as exc:
        raise RuntimeError("nanoparallel's grader needs its C gate (nanoparallel/grading/_gate.c), which was not "
                           "built: install a C compiler and Python's headers (Debian: gcc python3-dev), then run "
                           "`make setup` again (or `pip install -e .`)") from exc
    return _gate


def _import_engine() -> None:
    """Load torch and the engine (not its pictures) before any cell, so that what they are now is
    what the guard remembers."""
    import pkgutil

    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import nanoparallel
    pictures = ("nanoparallel.lessons.viz", "nanoparallel.runtime.timeline")
    for info in pkgutil.walk_packages(nanoparallel.__path__, "nanoparallel."):
        if not info.name.startswith(pictures):
            importlib.import_module(info.name)
    for name in nanoparallel.__all__:  # its public names load on first use: resolve them now too
        getattr(nanoparallel, name)
    _finish_torch()
    # The ranks' fork server too, before any cell can change what it would start from.
    nanoparallel.Cluster.start_fork_server()


def _finish_torch() -> None:
    """Let torch change its own functions and classes now, as it does on first use, so that the
    originals the guard takes are torch's final state (`originals.py`): importing dynamo wraps
    `torch.manual_seed`, importing DTensor adds methods to its placements, and an optimizer's
    first instance wraps its class's `step` in a profiling hook."""
    import torch
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    param = torch.zeros(1, requires_grad=True)
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            try:
                cls([param])
            except Exception:  # an optimizer that needs more than parameters: none wraps then
                pass


def _shape(value, depth: int = 0):
    """A comparable summary of plain data (numbers, strings, containers of them); None otherwise."""
    t = type(value)
    if t in (int, float, str, bool, bytes, type(None)):
        return (t.__name__, value)
    if depth > 3:
        return None
    if t in (list, tuple, set, frozenset):
        items = [_shape(v, depth + 1) for v in value]
        return (t.__name__, sorted(map(repr, items)) if t in (set, frozenset) else items)
    if t is dict:
        return ("dict", sorted((repr(k), repr(_shape(v, depth + 1))) for k, v in value.items()))
    # The engine's specs (planner.MODELS, a setup cell's NEOX_20B) are frozen dataclasses, which
    # object.__setattr__ still changes in place: their fields, read raw (no descriptor runs).
    fields = next((k.__dict__["__dataclass_fields__"] for k in t.__mro__ if "__dataclass_fields__" in k.__dict__),
                  None) if type(t) is type else None
    if type(fields) is dict:
        try:
            own = object.__getattribute__(value, "__dict__")
        except AttributeError:
            return None
        return (t.__qualname__, [(name, _shape(own.get(name, _MISSING), depth + 1)) for name in fields])
    return None


def _handed_a_target(thread) -> bool:
    try:
        own = object.__getattribute__(thread, "__dict__")
    except AttributeError:
        return False
    return type(own) is dict and own.get("_target") is not None


def _hook_findings(ip, prov: Provenance, own_profile=None, while_running: bool = False) -> list[str]:
    """Notebook code installed where IPython or Python would run it instead of, or around, a cell
    (`while_running`: looked at in the middle of a graded cell, while the course's code runs)."""
    found = []
    manager = getattr(ip, "input_transformer_manager", None)
    places = {
        "IPython's input transformers": [*ip.input_transformers_cleanup, *ip.input_transformers_post,
                                         *getattr(manager, "line_transforms", []),
                                         *getattr(manager, "token_transformers", [])],
        "IPython's AST transformers": list(ip.ast_transformers),
        "IPython's event callbacks": [cb for cbs in ip.events.callbacks.values() for cb in cbs],
        "the shell's own methods": [v for v in vars(ip).values()
                                    if type(v) in (types.FunctionType, types.MethodType)],
        "sys.meta_path or sys.path_hooks": [*sys.meta_path, *sys.path_hooks],
        "sys.excepthook or sys.displayhook": [sys.excepthook, sys.displayhook],
        "tracing or profiling": [f for f in (sys.gettrace(), sys.getprofile()) if f is not None],
    }
    for where, items in places.items():
        if any(prov.is_notebook(item) for item in items):
            found.append(f"notebook code was installed in {where}")
    if ip.custom_exceptions:
        found.append("a custom exception handler was set (set_custom_exc)")
    profile = sys.getprofile()
    if sys.gettrace() is not None or (profile is not None and profile is not own_profile):
        found.append("a trace or profile function is active")
    torch = sys.modules.get("torch")
    if torch is not None:
        # Autograd's saved-tensor hooks see, and may replace, every tensor a backward keeps.
        saved = torch._C._autograd._top_saved_tensors_default_hooks(False)
        if saved is not None and (not while_running or any(prov.is_notebook(h) for h in saved)):
            found.append("autograd's saved-tensor hooks are set" +
                         (" by notebook code" if while_running else ""))
    if torch is not None and (torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack()):
        if not while_running:
            found.append("a torch function or dispatch mode is active")
        else:  # the course's own code may hold a mode while it runs (04's split traces the model)
            from torch.overrides import _get_current_function_mode_stack
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
            modes = [*_get_current_function_mode_stack(), *_get_current_dispatch_mode_stack()]
            if any(prov.is_notebook(mode) for mode in modes):
                found.append("a torch function or dispatch mode that notebook code wrote is active")
    return found


# Methods through which a value can answer a check instead of being checked: comparisons, truth,
# conversions to numbers, isinstance hooks, torch's overrides, a faked __class__, membership, and
# arithmetic (a check's `abs(got - want) < tol` is decided by the answer's __sub__ and __abs__).
_LYING = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__float__", "__int__",
          "__index__", "__complex__", "__instancecheck__", "__subclasscheck__", "__torch_function__",
          "__torch_dispatch__", "__class__", "__array__", "__round__", "__abs__", "__contains__",
          "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
          "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__",
          "__matmul__", "__rmatmul__")
_LYING_NAMES = frozenset(_LYING)


def _lying_classes(prov: Provenance, originals: Originals, loaded) -> list[str]:
    """Classes whose methods decide how their values compare or convert, and that notebook code
    wrote, or that a library already `loaded` when the kernel started made while the notebook
    ran: a test double (each unittest.mock.MagicMock gets a class of its own, whose __eq__ can
    say True to anything and which passes isinstance with spec=int). A library imported since
    defines its classes as it is imported, and those are not counted. Libraries make doubles for
    their own use too (torch.distributed.pipelining's schedule visualizer, which 04 calls, makes
    MagicMocks and drops them): a class made while running counts only if it outlives a garbage
    collection, so a found one is looked at again after one (a collection each time would cost
    every graded cell for nothing)."""
    written, made = _lying_classes_now(prov, originals, loaded)
    if made:
        gc.collect()
        written, made = _lying_classes_now(prov, originals, loaded)
    return written + made


def _lying_classes_now(prov: Provenance, originals: Originals, loaded) -> tuple[list[str], list[str]]:
    """(what the notebook's classes define, what classes made while it ran define)."""
    written, made = [], []
    for cls in all_classes():
        namespace = cls.__dict__
        defined = _LYING_NAMES.intersection(namespace)  # one pass in C: most classes define none
        if not defined:
            continue
        made_while_running = not originals.existed(cls) and cls.__module__ in loaded
        for name in (n for n in _LYING if n in defined):
            value = namespace[name]
            if _unchanged_code(originals, cls, name, value) or _generated_eq(cls, name, value):
                continue
            if prov.is_notebook(value):
                written.append(f"the notebook's class {cls.__qualname__} defines {name}: its values could "
                               "answer a check instead of being checked")
            elif made_while_running:
                made.append(f"{cls.__module__}.{cls.__qualname__}, a class made while the notebook ran, "
                            f"defines {name}: its values (a test double) could answer a check instead of "
                            "being checked")
                break
    return written, made


# Kinds of value that cannot come to run notebook code while they keep their identity: a
# function's code, defaults and globals change only through a setattr the hook hears
# (object.__setattr__), and C functions and descriptors cannot change at all. Other kinds (a
# partial, whose __setstate__ swaps its function in place; a callable instance, whose class can
# gain notebook methods) are judged every time.
_FIXED_KINDS = (types.FunctionType, types.BuiltinFunctionType, types.WrapperDescriptorType,
                types.MethodDescriptorType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
                types.MemberDescriptorType, types.MethodWrapperType)


def _unchanged_code(originals: Originals, cls: type, name: str, value) -> bool:
    """Whether `value` is what `cls` held for `name` before any cell ran, and of a kind that
    cannot have changed since: then no notebook code wrote it, and judging it again (its provenance,
    a probe dataclass for an @dataclass __eq__) only costs time. That time was
    most of a graded cell's check: some 8,500 classes with torch loaded, twice per graded cell."""
    return type(value) in _FIXED_KINDS and originals.held(cls, name) is value


def _generated_eq(cls, name: str, fn) -> bool:
    """The __eq__ that @dataclass writes (field by field), which decides nothing by itself."""
    import dataclasses
    if name != "__eq__" or "__dataclass_fields__" not in cls.__dict__ or type(fn) is not types.FunctionType:
        return False
    fields = [f.name for f in dataclasses.fields(cls) if f.compare]
    probe = dataclasses.make_dataclass("Probe", fields).__eq__.__code__
    return fn.__code__.co_code == probe.co_code and fn.__code__.co_names == probe.co_names


# Long: the audit hook and its parts (record, destroy, findings_for, _walk, on_marker,
# run_graded, hook) share what this closure captured before any cell ran: the guard's own
# functions, the builtins, the engine's data, the key. As module attributes, notebook code could
# rebind them; as closure cells, it cannot reach them.
def _make_hook(ip, key: bytes, fd: int, plan: dict, signals_before: dict):
    user_ns = ip.user_ns
    cells = plan["cells"]                     # nonce -> {grade_id, kind, digest, binds}
    exempt = frozenset(plan["exempt"])        # names the submission's solution cells define
    trusted = frozenset(plan["trusted_code"])
    notebook_code: set = set()
    prov = Provenance(user_ns, trusted, notebook_code)
    # The guard's own code and what it calls, by identity: checked before the guard uses any of it,
    # so that patching this module, the parts it is built of or the standard modules it relies on is caught.
    # The guard's own modules and classes, data included (a table of what counts as plain data,
    # rebound, would blind a check as well as a function replaced).
    from nanoparallel.grading import engine_fields as fields_module, library_containers, originals as originals_module
    from nanoparallel.grading import provenance, thread_states
    parts = (globals(), vars(provenance), Provenance.__dict__, vars(fields_module), EngineFields.__dict__,
             vars(library_containers), LibraryContainers.__dict__, vars(originals_module), Originals.__dict__,
             vars(thread_states), ThreadStates.__dict__, vars(registrations), vars(sealed), vars(signal_handlers))
    own = [(namespace, key, value) for namespace in parts for key, value in list(namespace.items())]
    own += [(namespace, key, value)
            for namespace in (vars(types), vars(hmac), vars(hashlib), vars(json), vars(builtins))
            for key, value in list(namespace.items()) if callable(value) and key not in _SWAPPED]
    own += [(vars(sys), key, getattr(sys, key)) for key in ("gettrace", "getprofile", "_getframe", "audit")]
    builtins_before = dict(builtins.__dict__)
    # The engine prints each run's output through them: another library's object there runs
    # library callables in the middle of a run.
    streams_before = (type(sys.stdout), type(sys.stderr))
    # The engine's own data (constants, tables): the walk compares what it reaches with this.
    engine_data = {(name, key): _shape(value) for name, module in list(sys.modules.items())
                   if name.startswith("nanoparallel") and module is not None
                   for key, value in list(vars(module).items()) if _shape(value) is not None}
    modules_before = dict(sys.modules)
    # The kernel's own threads, running before any cell. A thread started since could change
    # what the checks use while they run, beside them, where no look in the cell's own thread
    # falls (Python 3.11 gives no running thread a profile function); no exercise starts one.
    threads_before = frozenset(sys._current_frames())
    _threads, _frames, _get_ident, _sleep = threading.enumerate, sys._current_frames, threading.get_ident, time.sleep
    # Threads with no Python frame (started on a C callable, past threading) show only as thread
    # states: more of them than the kernel had is a thread the notebook could have started.
    thread_states = ThreadStates()
    frameless_before = thread_states.count() - len(threads_before)
    # A signal handler runs between any two bytecodes, handed the frame that was running (the
    # checks' locals), and a C callable as one (a partial of setattr) changes things with no frame
    # of its own: every handler must stay as the kernel set it (ipykernel swaps SIGINT's per
    # request), and installing another destroys the key before it is in place (signal_handlers.py).
    signals_allowed, signal_changed = signal_handlers.rules(signals_before)
    # What happened that a graded cell's end cannot see any more (a transient change, a rank's
    # report): charged to the graded cell running, or else to the next one.
    pending: list = []
    state = {"key": key, "busy": False, "last_cell": None, "baseline": {}, "graded": None,
             "resumed": False, "entries": [], "captured": [], "sizes": [], "shaped": [],
             "cost_model_runs": 0}
    _getframe, _hmac_new, _dumps, _write = sys._getframe, hmac.new, json.dumps, os.write
    # Taken now, before any cell: a replaced compile() or exec() would be handed the checks' text.
    _compile, _exec, _lines, _partial = builtins.compile, builtins.exec, linecache.cache, functools.partial
    _seal = sealed.sealer()  # as functools is now: a cell could replace what opaque() calls
    _traceback_of = BaseException.__dict__["__traceback__"].__get__

    def record(entry: dict) -> None:
        if state["key"] is None:
            return
        body = _dumps(entry, sort_keys=True)
        mac = _hmac_new(state["key"], body.encode(), hashlib.sha256).hexdigest()
        try:
            # On a line of its own, whatever was written before it (autograder/guarded_execute.py,
            # read_records).
            _write(fd, f"\n{mac} {body}\n".encode())
        except OSError:
            state["key"] = None

    def destroy(reason: str) -> None:
        record({"kind": "probe", "reason": reason, "after": state["last_cell"]})
        state["key"] = None

    def report_pending(prefix: str = "") -> None:
        for reason in pending:
            record({"kind": "finding", "reason": prefix + reason})
        pending.clear()

    missing = _MISSING

    # Like the probes, a registration destroys the key: the operator stays changed for every
    # later cell, so none of them can be witnessed.
    own += registrations.watch(destroy, lambda frame: notebook_on_stack(frame, notebook_code), _importing,
                               prov.is_notebook, _getframe)
    own += signal_handlers.watch(signals_allowed)
    # Every module's and class's functions, by identity (originals.py), taken after the guard's
    # own wrappers are in place: a replacement is found whoever made it, another library's
    # MagicMock or builtin included.
    originals = Originals()
    # What the libraries' top-level containers hold now is theirs: later looks judge what is added.
    kept_by_libraries = LibraryContainers(modules_before, originals.classes(), prov)
    # What each of the engine's objects held when a locked cell or the engine first had it alone:
    # another library's object in it, which the engine then calls, is found at every look
    # (engine_fields.py).
    engine_fields = EngineFields()

    def findings_for(frame, nonce: str, watch: tuple | None = None) -> list[str]:
        found = world_findings(frame, nonce, watch) + pending
        pending.clear()
        return found

    def world_findings(frame, nonce: str, watch: tuple | None = None) -> list[str]:
        # `watch` (at a graded cell's start): four lists for the looks in its middle, the walk's
        # entries and captured variables, the libraries' containers with their fingerprints,
        # and the data the walk compared (the engine's, the locked cells') with its shape.
        patched = guard_findings()
        if patched:
            return patched
        found = []
        cell = cells[nonce]
        flags = frame.f_code.co_flags & _FUTURE_FLAGS
        expected = code_digest(compile(cell["source"], "<cell>", "exec", flags=flags, dont_inherit=True))
        if code_digest(frame.f_code) != expected:
            found.append("the code that reached this cell's last line is not the cell as the course wrote it")
        if frame.f_globals is not user_ns or frame.f_builtins is not builtins.__dict__:
            found.append("the cell ran in a namespace other than the notebook's")
        found += interpreter_findings()
        found += engine_fields.changes()
        found += _hook_findings(ip, prov, resume_watch)
        found += _lying_classes(prov, originals, modules_before)
        containers = kept_by_libraries.containers()
        kept = kept_by_libraries.notebook_code_in(containers)
        if kept:
            found.append(kept)
        if watch is not None:
            watch[2].extend(kept_by_libraries.fingerprints(containers))
        found += _walk(frame.f_code, frozenset(cell["binds"]),
                       (watch[0], watch[1], watch[3]) if watch is not None else None)
        return found

    def guard_findings() -> list[str]:
        for namespace, key, value in own:
            if namespace.get(key, missing) is not value:
                destroy(f"notebook code replaced {key}, which the grader's guard relies on")
                return [f"the grader's guard was patched ({key})"]
        return []

    def interpreter_findings() -> list[str]:
        found = []
        for name, value in builtins_before.items():
            now = builtins.__dict__.get(name, _MISSING)
            # IPython swaps input(), exit() and friends around each cell: there only a
            # notebook-made replacement counts.
            if now is _MISSING or (now is not value and (name not in _SWAPPED or prov.is_notebook(now))):
                found.append(f"the builtin {name!r} was replaced or removed")
        for name in builtins.__dict__.keys() - builtins_before.keys():
            if prov.is_notebook(builtins.__dict__[name]):
                found.append(f"a builtin {name!r} was added")
        for name, module in modules_before.items():
            if sys.modules.get(name) is not module and name != "__main__":
                found.append(f"sys.modules[{name!r}] was replaced or removed")
        if type(sys.stdout) is not streams_before[0] or type(sys.stderr) is not streams_before[1]:
            found.append("sys.stdout or sys.stderr was replaced by another kind of object")
        if stray_thread():
            found.append("a thread that notebook code could have started is running beside the checks")
        changed = signal_changed()
        if changed is not None:
            found.append(f"a handler for signal {changed} was installed")
        return found

    def stray_thread() -> bool:
        """A thread started since the kernel started that runs what anyone could have handed it:
        a plain `threading.Thread` or `Timer` (whatever target), one started past `threading`,
        one of a class the notebook wrote, or one with notebook code on its stack. A library's
        own thread class running its own code is not (pyzmq starts one for large messages)."""
        frames = _frames()
        if thread_states.count() - len(frames) > frameless_before:
            # A thread that threading started from another thread has its state a moment before
            # its first frame: look again once that moment has passed.
            _sleep(0.02)
            frames = _frames()
            if thread_states.count() - len(frames) > frameless_before:
                return True
        started = frames.keys() - threads_before
        if not started:
            return False
        known = {t.ident: t for t in _threads()}
        for ident in started:
            thread = known.get(ident)
            # A library's own thread class may run its own code, not something it was handed
            # (asked last: only of a library's class is its __dict__ read).
            if thread is None or type(thread) in _ANY_TARGET or prov.is_notebook(type(thread)) or \
                    notebook_on_stack(frames[ident], notebook_code) or _handed_a_target(thread):
                return True
        return False

    def running_findings() -> list[str]:
        """The look in the middle of a graded cell: what its start's walk read is still there
        (`entries`: each namespace entry it read that was behaviour, each of the notebook's names,
        each name it found missing; `captured`: each captured variable holding behaviour), and
        the interpreter's hooks. The whole walk costs up to a
        second on 04's cells, and a cell hands control back dozens of times."""
        found = guard_findings() or interpreter_findings()
        found += engine_fields.changes()
        found += _hook_findings(ip, prov, resume_watch, while_running=True)
        kept = kept_by_libraries.notebook_code_in(kept_by_libraries.changed(state["sizes"]))
        if kept:
            found.append(kept)
        for mapping, key, value, label in state["entries"]:
            now = mapping.get(key, missing)
            if now is not value:
                found.append(f"{label} was {'added' if value is missing else 'replaced'} while the course's code ran")
                break
            change = originals.function_change(now)
            if change:
                found.append(f"{change} while the course's code ran")
                break
        for mapping, key, shape, label in state["shaped"]:
            if _shape(mapping.get(key, missing)) != shape:
                found.append(f"{label} was changed in place while the course's code ran")
                break
        for cell, value, label in state["captured"]:
            try:
                now = cell.cell_contents
            except ValueError:
                now = missing
            if now is not value:
                found.append(f"{label} was replaced while the course's code ran")
                break
        return found

    # While a graded cell runs, the witness also looks each time the course's code takes over
    # again from notebook code: an answer the checks called returns, a __reduce__ that pickling
    # ran returns, a callback returns. A change made there and undone before the cell's end
    # (the checks' helpers swapped for stand-ins that put the originals back after their last
    # call) would otherwise decide the checks unseen. The profile function is sys.audit bound
    # to an event name (C, immutable): notebook code that reads it (sys.getprofile) reaches
    # nothing of the guard, and one that removes it (sys.setprofile) is a probe.
    resume_watch = types.MethodType(sys.audit, RESUME_EVENT)
    _setprofile, _getprofile = sys.setprofile, sys.getprofile
    code_kinds: dict = {}  # (id(code), in the notebook's namespace) -> (code, is notebook code)

    def notebook_frame(frame) -> bool:
        code, in_ns = frame.f_code, frame.f_globals is user_ns
        known = code_kinds.get((id(code), in_ns))
        if known is None or known[0] is not code:
            known = code_kinds[(id(code), in_ns)] = (code, prov.code_is_notebook(code, frame.f_globals))
        return known[1]

    def on_resume(args) -> None:
        nonce = state["graded"]
        # Once the key is gone no cell can be witnessed: looking on would only slow the notebook
        # (an operator the notebook registered returns to torch on every op).
        if nonce is None or state["resumed"] or state["key"] is None or len(args) < 2 or args[1] != "return" or \
                type(args[0]) is not types.FrameType or not notebook_frame(args[0]):
            return
        back = args[0].f_back
        if back is not None and notebook_frame(back):
            return  # notebook code returning to notebook code: the course's code has not resumed
        look_while_running("when notebook code handed control back to the course's code")

    def look_while_running(when: str) -> None:
        found = running_findings()
        if found:
            state["resumed"] = True  # one look that finds something is enough for this cell
            pending.extend(f"while {cells[state['graded']]['grade_id']} ran, {when}: {reason}" for reason in found)

    def on_engine_look() -> None:
        """The engine asks for a look as a run's replies arrive and as it ends. Library objects the
        engine calls during a run (a pickler's reducer, what its own objects hold) run with no
        notebook frame returning, and could change what the checks use for a while and put it
        back by the next run: the checks run between two runs, after a look."""
        if state["graded"] is not None and not state["resumed"] and state["key"] is not None:
            look_while_running("as the engine ran the ranks")

    # Long: one breadth-first walk over what a graded cell's code reaches; its cases (globals,
    # attributes, closures, defaults, modules) feed one queue and one seen-set.
    def _walk(code, own_binds: frozenset, watch: tuple | None = None) -> list[str]:
        """What the cell's code reaches, checked. `watch` (if given) is three lists that receive
        what a look in the middle of the cell compares again: (mapping, key, value, label) for
        each entry read that is behaviour or one of the notebook's names or was missing,
        (cell, value, label) for each captured variable that is behaviour, and (mapping, key,
        shape, label) for the data compared with the engine's or a locked cell's (an engine
        table changed through object.__setattr__ and put back by the answer's __del__ would
        otherwise decide a check's expected value unseen)."""
        entries, captured, shaped = watch if watch is not None else (None, None, None)
        found = []
        names: set = set()
        for c in nested_codes(code):
            names.update(c.co_names)
        attrs = set(names)
        queue, seen = [], set()

        def keep(mapping, key, value, label):
            if entries is not None and (value is missing or mapping is user_ns or is_code(value)):
                entries.append((mapping, key, value, label))

        def reach(name, namespace, label):
            if namespace is user_ns and (_ipython_managed(name) or name in exempt):
                return  # exempt: the submission's own answer, its business
            if name not in namespace:
                keep(namespace, name, missing, label)  # a global added later would hide a builtin
                return
            value = namespace[name]
            keep(namespace, name, value, label)
            if namespace is user_ns:
                base = state["baseline"].get(name)
                if base is not None:
                    if value is not base[0]:
                        found.append(f"{name!r}, defined by a locked cell, was rebound")
                        return
                    if base[1] is not None and _shape(value) != base[1]:
                        found.append(f"{name!r}, defined by a locked cell, was changed in place")
                    elif base[1] is not None and shaped is not None:
                        shaped.append((user_ns, name, base[1], f"{name!r}, defined by a locked cell,"))
            else:
                change = originals.module_change(namespace, name)
                if change:
                    found.append(change)
            queue.append((label, value))

        def look(obj, label, wanted) -> None:
            """The names in `wanted` that a module, a class or an object's own namespace holds."""
            t = type(obj)
            if t is types.ModuleType:
                namespace = obj.__dict__
                for n in wanted & namespace.keys():
                    before = engine_data.get((obj.__name__, n))
                    if before is not None and _shape(namespace[n]) != before:
                        found.append(f"{obj.__name__}.{n} was changed")
                    elif before is not None and shaped is not None:
                        shaped.append((namespace, n, before, f"{obj.__name__}.{n}"))
                    change = originals.module_change(namespace, n)
                    if change:
                        found.append(change)
                    keep(namespace, n, namespace[n], f"{obj.__name__}.{n}")
                    queue.append((f"{obj.__name__}.{n}", namespace[n]))
            elif isinstance(obj, type):
                # Only names the class has, or had, anywhere along its MRO can differ or be
                # followed: asking about every name the walk has read costs classes times names.
                for n in wanted & originals.names_along(obj):
                    change = originals.class_change(obj, n)
                    if change:
                        found.append(change)
                    for klass in obj.__mro__:
                        if n in klass.__dict__:
                            keep(klass.__dict__, n, klass.__dict__[n], f"{klass.__qualname__}.{n}")
                            queue.append((f"{obj.__qualname__}.{n}", klass.__dict__[n]))
                            break
                        keep(klass.__dict__, n, missing, f"{klass.__qualname__}.{n}")
            else:
                try:
                    namespace = object.__getattribute__(obj, "__dict__")
                except (AttributeError, TypeError):
                    return
                if type(namespace) is dict:
                    if entries is not None:  # a method hidden later by a value of the object's own
                        for n in (wanted & originals.names_along(type(obj))) - namespace.keys():
                            keep(namespace, n, missing, f"{label}.{n}")
                    for n in wanted & namespace.keys():
                        shadow = shadowed_method(type(obj), n, namespace[n])
                        if shadow:
                            found.append(f"{label}: {shadow}")
                        keep(namespace, n, namespace[n], f"{label}.{n}")
                        queue.append((f"{label}.{n}", namespace[n]))

        for name in names - own_binds:  # what the cell binds itself, its own code put there
            reach(name, user_ns, name)
        # The names to look up grow as the walk reads more code, so a module or class met early
        # is looked at again for the names found after it (otherwise what is checked would
        # depend on the order of the walk, which follows string hashing).
        containers, looked = [], set(attrs)
        engine_files: dict = {}
        while True:
            while queue:
                label, obj = queue.pop()
                if id(obj) in seen or len(seen) > 20000:
                    continue
                seen.add(id(obj))
                if prov.is_notebook(obj):
                    found.append(f"{label} is notebook code, not the course's ({prov.why(obj)})")
                    continue
                t = type(obj)
                if t is types.FunctionType:
                    change = originals.function_change(obj)
                    if change:
                        found.append(change)
                    if _expand(obj, engine_files):
                        fcode = obj.__code__
                        for c in nested_codes(fcode):
                            attrs.update(c.co_names)
                            for n in c.co_names:
                                reach(n, obj.__globals__, f"{obj.__module__}.{n}")
                        for d in obj.__defaults__ or ():
                            queue.append((f"a default of {obj.__qualname__}", d))
                        for d in (obj.__kwdefaults__ or {}).values():
                            queue.append((f"a default of {obj.__qualname__}", d))
                        for cell in obj.__closure__ or ():
                            try:
                                value = cell.cell_contents
                            except ValueError:
                                continue
                            if captured is not None and is_code(value):
                                captured.append((cell, value, f"a variable captured by {obj.__qualname__}"))
                            queue.append((f"a variable captured by {obj.__qualname__}", value))
                elif t is types.MethodType:
                    queue.append((label, obj.__func__))
                    queue.append((label, obj.__self__))
                elif t in (staticmethod, classmethod):
                    queue.append((label, obj.__func__))
                elif t is property:
                    queue += [(label, f) for f in (obj.fget, obj.fset, obj.fdel) if f is not None]
                else:
                    containers.append((obj, label))
                    look(obj, label, attrs)
                    if t is not types.ModuleType and not isinstance(obj, type):
                        queue.append((f"type({label})", t))
            fresh = attrs - looked
            if not fresh:
                break
            looked |= fresh
            for obj, label in list(containers):
                look(obj, label, fresh)
        return list(dict.fromkeys(found))

    def _expand(fn, engine_files: dict) -> bool:
        # Follow the engine's code and the course's cells; other libraries are checked where a
        # name reaches them, not walked through. `engine_files` remembers, for one walk, what
        # each file name was (a path lookup each time was a tenth of the walk); only plain
        # strings, whose hashing and equality no notebook class can decide.
        if fn.__globals__ is user_ns:
            return True
        filename = fn.__code__.co_filename
        if type(filename) is not str:
            return is_engine_file(filename)
        if filename not in engine_files:
            engine_files[filename] = is_engine_file(filename)
        return engine_files[filename]

    def on_marker(event: str, nonce) -> None:
        cell = cells.get(nonce) if type(nonce) is str else None
        if cell is None:
            record({"kind": "finding", "reason": f"an unknown cell marker {event}"})
            return
        if event == "nanoparallel.locked_end":
            for name in cell["binds"]:
                if name in user_ns:
                    value = user_ns[name]
                    graveyard.append(state["baseline"].get(name))  # dropped outside the hook
                    state["baseline"][name] = (value, _shape(value))
                    engine_fields.record(value, name)
            return
        if event in ("nanoparallel.locked", "nanoparallel.graded_begin"):
            state["last_cell"] = cell["grade_id"]
            if event == "nanoparallel.graded_begin":
                state["graded"] = nonce
                # What happened outside a graded cell is gone by now (a stopped rank restarts) or
                # still visible to this cell's own checks: report it, charge it to no cell.
                report_pending()
                # Tampering that is already in place is reported even if the cell then fails.
                entries: list = []
                captured: list = []
                sizes: list = []
                shaped: list = []
                before = findings_for(_getframe(_RAISER), nonce, (entries, captured, sizes, shaped))
                for reason in before:
                    record({"kind": "finding", "reason": f"before {cell['grade_id']}: {reason}"})
                # ... and costs this cell its points even if it is undone before the cell's end
                # (a reducer that takes itself out of a registry on the checks' last run).
                pending.extend(f"when {cell['grade_id']} began: {reason}" for reason in before)
                state.update(resumed=False, entries=entries, captured=captured, sizes=sizes, shaped=shaped)
                _setprofile(resume_watch)
            return
        # graded_end: the frame that called sys.audit is the cell's own code
        watched = _getprofile() is resume_watch
        _setprofile(None)
        frame = _getframe(_RAISER)
        found = findings_for(frame, nonce) if state["graded"] == nonce else \
            ["this cell's end was reached without its start"]
        if not watched and state["graded"] == nonce:
            found.append("the witness's profile function was removed or replaced while the cell ran")
        let_go()
        record({"kind": "graded", "nonce": nonce, "grade_id": cell["grade_id"],
                "status": "ok" if not found else "tampered", "findings": found[:20]})

    def prepare_graded(nonce, box) -> None:
        """Hand the kernel's request a graded cell's code, which only this closure holds, as a
        callable that runs it as the cell: in the notebook's namespace, with IPython's compiler
        flags. The request runs it, not this hook: no frame of the witness is on the stack while
        the cell runs, so no frame the cell's code reaches (a signal handler's, a generator's,
        each frame's unaudited f_back) leads to the witness's locals and closures. The callable is
        C all the way down (`sealed.opaque` of a partial of exec): nothing of it opens to
        the code. Its hidden tests are blank in linecache, so a traceback shows their messages
        but not their lines."""
        cell = cells.get(nonce) if type(nonce) is str else None
        if cell is None or cell["kind"] != "graded" or nonce in ran or type(box) is not list or box:
            # The box stays empty: the request then fails in its own frame, not in the hook's.
            pending.append("a graded cell's code was asked for twice, or for a cell that is not graded")
            return
        ran.add(nonce)
        name = f"graded-cell-{cell['grade_id']}.py"
        _lines[name] = (sum(map(len, cell["shown"])), None, list(cell["shown"]), name)
        flags = getattr(getattr(ip, "compile", None), "flags", 0)
        flags = flags & _FUTURE_FLAGS if type(flags) is int else 0
        code = _compile(cell["source"], name, "exec", flags=flags, dont_inherit=True)
        handed_over[id(code)] = code  # the request's exec of it is not notebook code's own
        box.append(_seal(_partial(_exec, code, user_ns)))

    def on_graded_failed(nonce, exc, exports) -> None:
        """The request reports that a graded cell raised: what was seen while it ran is reported
        now (no later cell may come to carry it; the last graded cell has none after it), and the
        cell is over. The checks run as a function's body (guarded_execute.wrap_graded): what their
        visible part bound before they failed reaches the notebook, as it would from a cell."""
        cell = cells.get(nonce) if type(nonce) is str else None
        if cell is None or cell["kind"] != "graded":
            return
        _setprofile(None)
        if state["graded"] == nonce:
            let_go()
        report_pending(f"in {cell['grade_id']}: ")
        # Read through BaseException's own descriptor: an exception class of the notebook's could
        # define `__traceback__` as a property, and run inside the hook.
        tb = _traceback_of(exc) if issubclass(type(exc), BaseException) else None
        while type(tb) is types.TracebackType and type(exports) is list and not exports:
            frame = tb.tb_frame
            if frame.f_code.co_name == GRADED_FUNCTION and frame.f_globals is user_ns:
                names = set(cell.get("exports", ()))  # what the visible checks bind, no more
                # bound by the request, outside the hook: a value it replaces may run a __del__
                exports.append({k: v for k, v in frame.f_locals.items() if type(k) is str and k in names})
                break
            tb = tb.tb_next

    def let_go() -> None:
        """The graded cell is over: what its looks held goes to the gate, which drops it once the
        hook has returned (a notebook object's __del__ must not run with the hook's frames below)."""
        graveyard.extend((state["entries"], state["captured"], state["sizes"], state["shaped"]))
        state.update(graded=None, entries=[], captured=[], sizes=[], shaped=[])

    graveyard: list = []

    ran: set = set()
    handed_over: dict = {}  # id -> each graded cell's code, as prepare_graded compiled it
    # The sockets (device, inode) of the channels the engine opened to its ranks, each with the
    # rank it was opened for: a rank's reply counts only if it came through one of them, read by
    # multiprocessing as the kernel started, and is filed under that channel's rank. Otherwise a
    # notebook could hand a cluster another channel (a Pipe() whose other end already holds
    # replies) and the checks would read values and traces that no rank produced, or relabel the
    # workers (`_Worker.rank`, a plain int) so that each rank's values are filed under another's.
    channels: dict = {}  # (device, inode) -> (rank, the key its worker signs with)
    _fstat, _urandom, _pack = os.fstat, os.urandom, struct.pack
    _hmac_digest, _same_digest = _hashlib.hmac_digest, hmac.compare_digest

    def channel_of(conn):
        if type(conn) is not _Connection:
            return None
        try:
            own = object.__getattribute__(conn, "__dict__")
        except AttributeError:
            return None
        # Only what Connection.__init__ sets: an instance attribute would hide recv() and friends.
        if type(own) is not dict or own.keys() - _CONNECTION_FIELDS or type(own.get("_handle")) is not int:
            return None
        if first_change([_connection_module], [_Connection, _ForkingPickler]):
            return None
        try:
            st = _fstat(own["_handle"])
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    # What a new rank is prepared and started from. A rank started from something changed (and
    # put back in a cell no look covers) could run notebook code before its guard, or none, for
    # good: so each start is looked at as it happens, and a rank started otherwise never counts.
    spawn_modules = [m for name, m in modules_before.items() if type(m) is types.ModuleType and
                     name.startswith(_SPAWN_MODULES)]
    spawn_classes = [c for c in originals.classes()
                     if type(c.__dict__.get("__module__")) is str and c.__dict__["__module__"].startswith(_SPAWN_MODULES)]

    spawn_data = [(module, name, shape) for (module, name), shape in engine_data.items()
                  if module.startswith(_SPAWN_MODULES)]

    def first_change(modules, classes) -> str | None:
        """How one of `modules` or `classes` differs from before any cell, or None."""
        for module in modules:
            namespace = module.__dict__
            for name in list(namespace):
                change = originals.module_change(namespace, name)
                if change:
                    return change
        for cls in classes:
            for name in originals.names_along(cls):
                change = originals.class_change(cls, name)
                if change:
                    return change
        return None

    def spawn_findings() -> list[str]:
        change = first_change(spawn_modules, spawn_classes)
        if change:
            return [change]
        for module, name, shape in spawn_data:
            if _shape(vars(modules_before[module]).get(name, missing)) != shape:
                return [f"{module}.{name} was changed"]
        kept = kept_by_libraries.notebook_code_in(kept_by_libraries.containers())
        if kept:
            return [kept]
        handed = _preparation()  # what multiprocessing hands a new process before its target runs
        if not _plain(handed):
            return [f"multiprocessing would hand a new rank more than plain data: {sorted(handed)}"]
        return []

    def on_rank_channel(event: str, args: tuple, caller) -> None:
        """rank_channel: (the channel, its rank, the worker and the status slot made for it, a list
        to mark that the key was sent);
        rank_reply: (the channel a reply came through, the rank it is filed under, its bytes)."""
        conn, rank = (tuple(args) + (None, None))[:2]
        made = tuple(args[2:4])
        if event == "nanoparallel.rank_channel":
            # Heard only from the engine's own code that opens the channels (Cluster._spawn in
            # runtime/cluster.py), not from code a notebook compiled to look like it.
            code = caller.f_code
            if code.co_qualname == "Cluster._spawn" and is_engine_file(code.co_filename) and \
                    code.co_filename.endswith(_SPAWN_FILE) and not frame_is_notebook(caller, notebook_code):
                socket = channel_of(conn)
                if socket is None or type(rank) is not int:
                    return
                # The key the rank's worker signs every message with (runtime/worker.py), sent
                # first: this closure and that worker's locals are the only places it lives.
                key = _urandom(32)
                # Framed as Connection.send_bytes frames it, written in one C call: the channel's
                # Python methods (and the defaults they write with) are the notebook's to change.
                _write(object.__getattribute__(conn, "__dict__")["_handle"], _pack("!i", len(key)) + key)
                if len(args) > 4 and type(args[4]) is list:
                    args[4].append(True)  # the engine sends no key of its own
                found = spawn_findings()
                if found:  # its channel is not the engine's: no reply of this rank counts
                    pending.extend(f"as the engine started a rank: {reason}" for reason in found)
                    return
                channels[socket] = (rank, key)
                for obj, label in zip(made, ("_workers", "_board._slots")):
                    engine_fields.record(obj, f"a Cluster's {label}[{rank}]")
            return
        socket = channel_of(conn)
        raw = args[2] if len(args) > 2 else None
        if socket not in channels:
            pending.append("a rank's reply reached the engine through a channel the engine did not open, "
                           "or one the kernel changed: its values and trace are not the rank's")
            return
        owner, key = channels[socket]
        if type(rank) is not int or owner != rank:
            pending.append(f"rank {owner}'s reply was filed as rank {rank!r}'s: the kernel relabelled "
                           "the engine's workers, so the checks would read one rank's values as another's")
        elif type(raw) is not bytes or len(raw) < _SIGNATURE or \
                not _same_digest(raw[-_SIGNATURE:], _hmac_digest(key, raw[:-_SIGNATURE], "sha256")):
            pending.append(f"rank {owner}'s reply was not signed by its worker: code on the rank wrote into its "
                           "channel to the kernel itself, past the rank's guard and its check of the trace")

    def on_cost_model(event: str, args) -> None:
        """COST_MODEL_RAN counts one run; COST_MODEL_RUNS appends the count to the list it carries."""
        if event == COST_MODEL_RAN:
            state["cost_model_runs"] += 1
        elif args and type(args[0]) is list:
            args[0].append(state["cost_model_runs"])

    # Long: one dispatch over every event, which must never let an exception out (see below).
    def hook(event: str, args) -> None:
        __tracebackhide__ = True  # noqa: F841
        if state["busy"]:
            return
        try:
            if event in (RESUME_EVENT, ENGINE_LOOK):  # the looks in the middle of a graded cell
                state["busy"] = True
                try:
                    on_resume(args) if event == RESUME_EVENT else on_engine_look()
                finally:
                    state["busy"] = False
                return
            if event in ("nanoparallel.graded_run", "nanoparallel.graded_failed"):
                state["busy"] = True
                try:
                    if event == "nanoparallel.graded_run":
                        prepare_graded(*(tuple(args) + (None, None))[:2])
                    else:
                        on_graded_failed(*(tuple(args) + (None, None, None))[:3])
                finally:
                    state["busy"] = False
                return
            if event == "sys.addaudithook":  # refused by the gate whatever happens here
                if state["key"] is not None and frame_is_notebook(_caller(), notebook_code):
                    destroy("the notebook tried to add an audit hook")
                return
            if event == "object.__getattr__" and state["graded"] is None and not (
                    len(args) > 1 and type(args[1]) is str and args[1] == "tb_frame"):
                return
            state["busy"] = True
            try:
                if event == "nanoparallel.guard_installing":
                    return
                if event in ("nanoparallel.rank_channel", "nanoparallel.rank_reply"):
                    on_rank_channel(event, args, _caller())
                    return
                if event in (COST_MODEL_RAN, COST_MODEL_RUNS):
                    return on_cost_model(event, args)
                if event == signal_handlers.EVENT:
                    what = args[0] if args and type(args[0]) is str else "a signal handler"  # exact: no notebook __str__ in here
                    destroy(f"notebook code installed {what}: a handler is "
                            "handed whatever frame is running, and the frames below it")
                    return
                if event.startswith("nanoparallel."):
                    if event == "nanoparallel.rank_tamper":
                        why = args[0] if args and type(args[0]) is str else "(not a message)"  # exact: no notebook __str__
                        pending.append(f"a rank was stopped by its guard: {why}" if why.startswith("rank ")
                                       else f"the engine refused to start ranks: {why}")
                    else:
                        on_marker(event, args[0] if args else None)
                    return
                if event in ("exec", "function.__new__"):
                    code = args[0]
                    if handed_over.get(id(code)) is code:
                        return  # a graded cell's code, run by the kernel's request (prepare_graded)
                    if type(code) is types.CodeType and is_library_file(code.co_filename) and \
                            _importing(_caller()):
                        return  # a library module's own code, run by an import the notebook asked for
                    if type(code) is types.CodeType and frame_is_notebook(_caller(), notebook_code):
                        notebook_code.update(id(c) for c in nested_codes(code))
                        _keep.append(code)  # ids must stay unique while remembered
                    return
                if event == "object.__setattr__":
                    on_setattr(args)
                    return
                if event == "open":
                    path, mode = args[0], args[1] if len(args) > 1 else None
                    writing = type(mode) is str and any(m in mode for m in "wax+") or (
                        type(mode) is int and mode & (os.O_WRONLY | os.O_RDWR))
                    # Python itself writes bytecode caches while it imports what a cell asked for.
                    caching = type(path) is str and "__pycache__" in path and _importing(_caller())
                    if type(path) is str and writing and not caching and is_under_library_roots(path) and \
                            notebook_on_stack(_caller(), notebook_code):
                        destroy(f"the notebook wrote to the installed file {path}")
                        return
                    if type(path) is str and path.startswith("/proc/") and path.rstrip("/").endswith(("mem", "environ")) \
                            and notebook_on_stack(_caller(), notebook_code):
                        destroy(f"the notebook opened {path}")
                    return
                if (event == "sys._getframe" or (event == "object.__getattr__" and args[1:2] and args[1] in _FRAME_ATTRS)) \
                        and on_frame_read(event, args, _caller()):
                    return
                if (event in PROBES or event.startswith("ctypes.")) and state["key"] is not None and (
                        generated_or_notebook(_caller()) or probed_for_notebook(_caller(), notebook_code)
                        or _get_ident() not in threads_before):  # a thread started since, notebook frames or not
                    destroy(f"the notebook called {event}")
            finally:
                state["busy"] = False
        except Exception as exc:
            # An exception out of the hook would carry the hook's frames (the gate drops them, as a
            # second guard) to the code that raised the event (a forged event with odd arguments).
            # It costs the cell that is running, or the next one.
            pending.append(f"the witness could not take in the event {event} ({type(exc).__name__})")

    def on_setattr(args) -> None:
        # Heard for every attribute set on a class, a module or a function (imports set hundreds):
        # the stack is asked who set it only when it is a case that counts.
        target, name = args[0], args[1]
        sets_code = name == "__code__" and len(args) > 2 and isinstance(args[2], types.CodeType)
        library_function = type(target) is types.FunctionType and not prov.is_notebook(target)
        if not (sets_code or library_function) or not frame_is_notebook(_getframe(_RAISER), notebook_code):
            return  # frame 0 is this function, 1 the hook, 2 the code that set the attribute
        if sets_code:
            # Code the notebook puts into a function is the notebook's, whatever file it names.
            notebook_code.update(id(c) for c in nested_codes(args[2]))
            _keep.append(args[2])
        if library_function:
            pending.append(f"notebook code set {name} of {target.__qualname__}")

    def _caller():
        # Frame 0 is this helper, 1 the hook; 2 is the code that raised the event.
        return _getframe(_RAISER)

    def on_frame_read(event: str, args, caller) -> bool:
        """Whether notebook code reached for frames that hold what it must not read, now reported:
        while a graded cell runs, the checks' frames (their expected values, the answers' inputs);
        outside one, a failed graded cell's traceback (IPython keeps it: sys.last_traceback),
        whose frames include the guard's hook, and with it its closures."""
        reading_a_traceback = event == "object.__getattr__" and args[1] == "tb_frame"
        if state["graded"] is None and not (reading_a_traceback and state["key"] is not None):
            return False
        if not (_reaches_frames(caller, notebook_code, trusted) or
                (event == "sys._getframe" and frame_read_for_notebook(caller, notebook_code))):
            return False
        if state["graded"] is not None:
            pending.append(f"notebook code reached for the frames of the running checks "
                           f"({event}{'' if event == 'sys._getframe' else ' ' + args[1]})")
        else:
            destroy("notebook code read a traceback's frames, which hold the grader's own, outside a graded cell")
        return True

    def generated_or_notebook(frame) -> bool:
        """Notebook code, or code made from text at run time ("<...>": torch.fx's, eval's) with
        notebook code below it on the stack: what it runs, the notebook wrote or chose."""
        return frame_is_notebook(frame, notebook_code) or (
            frame.f_code.co_filename.startswith("<") and notebook_on_stack(frame, notebook_code))

    _keep: list = []
    record({"kind": "installed"})
    # What the gate clears if it closes: the key, what the hook remembers, the cells' hidden text.
    return hook, (state, cells), graveyard


# How far up the stack, from one of the hook's helpers, the code that raised an event runs: the
# helper, the hook (the gate in front of it is C and adds no frame), then that code.
_RAISER = 2
# The events the hook reads, by name (object.__getattr__ too, while a graded cell runs or for a
# traceback's frame): the gate lets no other event in.
_HEARD = ("nanoparallel.", "sys.", "gc.", "ctypes.", "exec", "function.__new__", "object.__setattr__", "open")


_MISSING = object()
_SIGNATURE = 32  # bytes of HMAC-SHA256 at the end of each message a rank's worker sends (rank_data.py)
# Where what starts a rank comes from: the engine's runtime and the ranks' side of the witness,
# multiprocessing, and the picklers that ship the new process's start.
_SPAWN_MODULES = ("nanoparallel.runtime", "nanoparallel.grading.rank_guard", "nanoparallel.grading.rank_channels",
                  "nanoparallel.grading.comm_witness", "nanoparallel.grading.registrations", "multiprocessing",
                  "pickle", "copyreg", "cloudpickle")
_PLAIN_TYPES = (str, int, float, bool, bytes, type(None), multiprocessing.process.AuthenticationString)


def _preparation() -> dict:
    """What multiprocessing hands a new process, pickled, before the process's target runs (its
    preparation data and the process's config): unpickling anything else there runs code in the
    rank before its guard."""
    import multiprocessing.spawn
    handed = dict(multiprocessing.spawn.get_preparation_data("rank"))
    handed["config"] = multiprocessing.process.current_process()._config
    return handed


def _plain(value, depth: int = 0) -> bool:
    t = type(value)
    if t in _PLAIN_TYPES:
        return True
    if depth > 3:
        return False
    if t in (list, tuple):
        return all(_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


# How the engine talks to its ranks (cluster.py): what a reply must come through to count.
_connection_module = multiprocessing.connection
_Connection = multiprocessing.connection.Connection
_ForkingPickler = multiprocessing.reduction.ForkingPickler
_CONNECTION_FIELDS = frozenset({"_handle", "_readable", "_writable"})
_SPAWN_FILE = os.path.join("nanoparallel", "runtime", "cluster.py")
_FUTURE_FLAGS = sum(getattr(__future__, name).compiler_flag for name in __future__.all_feature_names)
# Builtins that IPython and ipykernel set per cell or per request.
_SWAPPED = frozenset({"input", "raw_input", "exit", "quit", "get_ipython", "display", "_", "__", "___"})


def _ipython_managed(name: str) -> bool:
    """Names IPython itself rebinds in the namespace: outputs (_, __, _12), inputs (_i, _i12), In, Out."""
    return name in ("In", "Out", "_oh", "_ih", "_dh", "_i", "_ii", "_iii", "exit", "quit", "get_ipython") or \
        name.strip("_") == "" or (name.startswith("_") and name.lstrip("_i").isdigit())


# Frame attributes Python audits: with one, code reaches the frames of whoever called it.
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
# Standard modules whose business is to hand frames to their caller.
_FRAME_HANDLERS = frozenset({"inspect.py", "traceback.py"})


def _reaches_frames(frame, notebook_code, trusted) -> bool:
    """Whether notebook code asked for a frame, itself or through inspect or traceback (other
    standard modules, such as warnings and logging, read a frame for their own purposes)."""
    while frame is not None and os.path.basename(frame.f_code.co_filename) in _FRAME_HANDLERS \
            and is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return False
    code = frame.f_code
    if id(code) in notebook_code:
        return True
    return not (code.co_filename.startswith("<frozen") or is_library_file(code.co_filename)
                or code_digest(code) in trusted)


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename == "<frozen importlib._bootstrap>":
            return True
        frame = frame.f_back
    return False
