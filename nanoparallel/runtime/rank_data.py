"""What a rank sends the kernel, decoded as data only (under grading).

A rank runs notebook code, and what it sends back is unpickled in the kernel. Pickle's own
bytes can call any function the kernel can import, with arguments of their choosing: `exec`, or
`setattr` on the checks' module. That happens in the kernel with no notebook frame on the stack,
between one check and the next, so a witness that watches the notebook's code cannot see it.
Under grading the kernel therefore decodes every reply with `loads`, which builds only data:
numbers, strings, bytes, containers of them, tensors and the torch values that describe them
(dtypes, sizes, devices, layouts), exceptions, and the engine's own dataclasses (trace events).
Anything else is refused with `NotData`, which says what a rank may return.

A learner's notebook keeps cloudpickle's full power (a rank may return any object); the
exercises only ever return data.
"""
from __future__ import annotations

import dataclasses
import io
import pickle
import sys
import types

import cloudpickle

from nanoparallel.grading import rank_guard

_BUILTINS = frozenset({"list", "dict", "set", "frozenset", "tuple", "int", "float", "complex", "str",
                       "bytes", "bytearray", "bool", "slice", "range"})
# torch's functions that rebuild a tensor from its parts (the parts are data, decoded here too).
_TORCH_REBUILDS = frozenset({("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
                             ("torch.serialization", "_get_layout")})


class NotData(pickle.UnpicklingError):
    """A rank's reply held something other than data."""


def _storage_from_bytes(data: bytes):
    # torch ships a tensor's storage as torch.save's bytes, and its own loader reads them with
    # pickle's full power: read them with torch's weights-only loader instead.
    import torch
    if type(data) is not bytes:
        raise NotData("a tensor's storage was not bytes")
    global _SAFE_AT_START
    if _SAFE_AT_START is None:  # not under grading (the tests): as torch is now
        _SAFE_AT_START = {id(g): g for g in _safe_globals()}
    if not all(id(g) in _SAFE_AT_START or _registered_by_torch(g) for g in _safe_globals()):
        # The weights-only loader would call whatever was registered with add_safe_globals:
        # torch registers its own as its modules are imported (DTensor's classes, a rebuild
        # function), a notebook anything, torch's own functions included (a hook registration).
        raise NotData("torch's weights-only loader has globals registered by the notebook")
    return torch.load(io.BytesIO(data), weights_only=True)


def _registered_by_torch(g) -> bool:
    """What torch registers for its loader as it imports its modules: its classes, and its
    functions that rebuild a value."""
    g = g[0] if type(g) is tuple else g
    module = getattr(g, "__module__", None)
    if type(module) is not str or not (module == "torch" or module.startswith("torch.")):
        return False
    return isinstance(g, type) or (type(g) is types.FunctionType and g.__name__.startswith("_rebuild"))


def _safe_globals() -> list:
    """What torch's weights-only loader allows beyond its own list: the set it reads itself."""
    import torch._weights_only_unpickler as loader
    return list(loader._marked_safe_globals_set)


class _DataUnpickler(pickle._Unpickler):
    # pickle's own Python unpickler, for one opcode: BUILD sets attributes on whatever object is
    # below it, and an allowed class (an engine dataclass) is an object too; set on the class,
    # a value would reach every instance.
    def load_build(self):
        if callable(self.stack[-2]):
            raise NotData("attributes set on a class or a function")
        pickle._Unpickler.load_build(self)

    dispatch = types.MappingProxyType({**pickle._Unpickler.dispatch, pickle.BUILD[0]: load_build})

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _storage_from_bytes
        if "." in name or not _allowed_module(module):  # a dotted name walks attributes anywhere
            raise NotData(f"{module}.{name} is not data")
        try:
            found = super().find_class(module, name)
        except (ImportError, AttributeError):
            raise NotData(f"{module}.{name} is not data") from None
        if found is not None and _is_data(module, name, found):
            return found
        raise NotData(f"{module}.{name} is not data")

    def persistent_load(self, pid):
        raise NotData("a persistent reference is not data")

    def get_extension(self, code):
        # copyreg's extension registry (EXT1, EXT2, EXT4) hands back any object the kernel put
        # there, eval included, and find_class is never asked.
        raise NotData("an extension code is not data")


def _allowed_module(module: str) -> bool:
    return module in ("builtins", "collections", "torch", "torch._utils", "torch.serialization") or \
        module.startswith("nanoparallel.")


def _is_data(module: str, name: str, found) -> bool:
    import torch  # loaded by now: a reply holds tensors only where the rank had torch (the grader never does)
    if isinstance(found, type) and issubclass(found, BaseException):
        return True  # a rank's exception: built from its arguments, which are data too
    if module == "builtins":
        return name in _BUILTINS
    if module == "collections":
        return name == "OrderedDict"
    if module.startswith("nanoparallel."):
        return isinstance(found, type) and dataclasses.is_dataclass(found)
    if (module, name) in _TORCH_REBUILDS or found is torch.Size or found is torch.device:
        return True
    return isinstance(found, (torch.dtype, torch.layout, torch.memory_format))


def loads(data: bytes):
    """Decode a rank's pickled reply, refusing anything but data (see the module docstring)."""
    try:
        return _DataUnpickler(io.BytesIO(data)).load()
    except NotData as refused:
        raise NotData(f"a rank sent something other than data ({refused}). Under grading a rank may "
                      "return only tensors, numbers, strings, and lists, tuples or dicts of them.") from None


# Under grading each message a rank's worker sends ends in its HMAC-SHA256 (runtime/worker.py).
SIGNATURE_BYTES = 32


def _receive_data(conn, rank: int):
    raw = conn.recv_bytes()
    # The kernel's guard checks the channel, that it is this rank's, and the worker's signature
    # (grading/guard.py), before anything of the reply is decoded.
    sys.audit("nanoparallel.rank_reply", conn, rank, raw)
    return loads(raw[:-SIGNATURE_BYTES])


def _receive_anything(conn, rank: int):
    return conn.recv()


# Chosen once, when the engine is imported (under grading, before any cell), never from the
# environment at each reply: `decode` reads a rank's returned value or exception, `receive` a
# rank's whole reply from its channel.
_GRADED = rank_guard.enabled()
# What the weights-only loader allows when the engine is imported under grading, before any cell,
# by id (each kept, so that the ids stay unique): anything registered later refuses storages.
# (Elsewhere this decoder is not used, and torch is not imported for it: the grader's own process
# imports this module.)
_SAFE_AT_START = {id(g): g for g in _safe_globals()} if _GRADED else None
decode = loads if _GRADED else cloudpickle.loads
receive = _receive_data if _GRADED else _receive_anything
