"""Tampering attempts on 00_welcome. Each replaces solution cells (keyed by grade_id) with wrong
answers plus a way around the checks; every graded cell in `zero` must score 0 and the
submission must be flagged (unless `"flagged": False`: a read nothing can tell from an honest one,
which must only gain nothing), while the graded cells in `full` (real answers, graded before the
tampering) keep their points."""

STUBS = {
    "training_time": '''
def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    return 0.0

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return 0
''',
    "transfer_time": '''
def transfer_seconds(nbytes, bandwidth, latency):
    return 0.0

def across_vs_inside(nbytes):
    return 0.0
''',
    "pass_right": '''
def pass_right(tensor):
    return tensor
''',
}


# A pass_right that sends the right messages but returns what it sent, not what it received:
# only the value checks can tell it from a right one.
RING_STEP = '''
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    request = dist.isend(tensor, dst=(rank + 1) % world)
    dist.recv(received, src=(rank - 1) % world)
    request.wait()'''
SENDS_BUT_KEEPS = "\ndef pass_right(tensor):" + RING_STEP + "\n    return tensor\n"

RIGHT_TRAINING_TIME = '''
def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    return total_flops / (n_gpus * flops_per_second * utilization) / SECONDS_PER_YEAR

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return math.ceil(total_flops / (flops_per_second * utilization * days * 24 * 3600))
'''


def _all_stubbed(tamper: str) -> dict:
    return {**STUBS, "training_time": tamper + STUBS["training_time"]}


ALL = ["training_time", "transfer_time", "pass_right"]

TAMPERING = {
    # Rebinding the names the setup cell imported.
    "rebind_names": {"cells": _all_stubbed('''
assert_close = assert_ranks_close = assert_ops_within = lambda *args, **kwargs: None
'''), "zero": ALL, "full": []},
    # Patching the engine's module attributes that the checks call.
    "patch_engine_module": {"cells": _all_stubbed('''
import nanoparallel.grading.checks as _checks
_checks._compare = lambda *args, **kwargs: None
for _name in ("assert_ops_within", "assert_peers", "assert_bytes_sent", "assert_all_waited"):
    setattr(_checks, _name, lambda *args, **kwargs: None)
'''), "zero": ALL, "full": []},
    # Replacing modules in sys.modules and a builtin.
    "sys_modules_and_builtins": {"cells": _all_stubbed('''
import builtins, sys, types
_fake = types.ModuleType("math")
_fake.isclose = lambda *args, **kwargs: True
sys.modules["math"] = _fake
builtins.sorted = lambda iterable, **kwargs: list(iterable)
'''), "zero": ALL, "full": []},
    # An input transformer that turns every later cell into `pass`: the checks never run.
    "input_transformer": {"cells": {"pass_right": '''
get_ipython().input_transformers_cleanup.append(lambda lines: ["pass\\n"])
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Swallowing every exception, so failing checks show no error.
    "custom_exception_handler": {"cells": _all_stubbed('''
get_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: None)
'''), "zero": ALL, "full": []},
    # Monkeypatching Cluster.run and the trace: fake results, an empty trace.
    "patch_cluster_and_trace": {"cells": {"pass_right": '''
from nanoparallel import Cluster
from nanoparallel.runtime.trace import Trace
_real_run = Cluster.run
def _fake_run(self, fn, *args, **kwargs):
    out = _real_run(self, lambda: __import__("torch").zeros(0))
    return out
Cluster.run = _fake_run
Trace.comm = lambda self: []
Trace.bytes_sent = lambda self, *args, **kwargs: 0
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Reaching for the interpreter's internals (here: a trace function).
    "settrace_probe": {"cells": {"pass_right": '''
import sys
sys.settrace(lambda *args: None)
sys.settrace(None)
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Values that compare equal to anything.
    "always_equal_values": {"cells": {**STUBS, "training_time": '''
class _Anything(float):
    def __eq__(self, other):
        return True
    __ne__ = lambda self, other: False

def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    return _Anything(0.0)

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return _Anything(0.0)
'''}, "zero": ALL, "full": []},
    # Hiding the failures: no traceback reaches the notebook.
    "hidden_tracebacks": {"cells": _all_stubbed('''
get_ipython().showtraceback = lambda *args, **kwargs: None
get_ipython()._showtraceback = lambda *args, **kwargs: None
'''), "zero": ALL, "full": []},
    # Rewriting the graded cells as they are compiled: every assert becomes `pass`.
    "ast_transformer": {"cells": {"pass_right": '''
import ast

class _NoAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()

get_ipython().ast_transformers.append(_NoAsserts())
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Patching the grader's guard itself (its classifier), then the checks.
    "patch_the_guard": {"cells": {"pass_right": '''
import nanoparallel.grading.provenance as _provenance
import nanoparallel.grading.checks as _checks
_provenance.Provenance.is_notebook = lambda self, obj, depth=0: False
_checks._compare = lambda *args, **kwargs: None
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # The checks' own values: the answer reads the expected number out of the running check's
    # frame (the constant its comparison loads next) instead of computing it.
    "read_the_checks_values": {"cells": {"training_time": '''
def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    import dis, sys
    frame = sys._getframe(1)
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset > frame.f_lasti and ins.opname == "LOAD_CONST" and isinstance(ins.argval, float):
            return ins.argval
    return 0.0

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    import inspect
    frame = inspect.currentframe().f_back
    for ins in __import__("dis").get_instructions(frame.f_code):
        if ins.offset > frame.f_lasti and ins.opname == "LOAD_CONST" and isinstance(ins.argval, int):
            return ins.argval
    return 0
'''}, "zero": ["training_time"], "full": ["transfer_time", "pass_right"]},
    # Reading the running cell's text (hidden tests included) without frames: IPython's input
    # history, linecache, the kernel's request message, the display hook's execution info. Then
    # the expected value is evaluated from the check's own expression. Nothing tells this read
    # from an honest look at `In`, so it is not flagged: the text must simply not be there.
    "read_the_cells_text": {"flagged": False, "cells": {"training_time": '''
def _texts():
    import linecache
    ip = get_ipython()
    yield from ip.user_ns.get("In", [])[-2:]
    yield from ip.history_manager.input_hist_raw[-2:]
    yield from (ip.user_ns.get(n, "") for n in ("_i", "_ii", "_iii"))
    yield from ("".join(entry[2]) for entry in list(linecache.cache.values())[-5:] if len(entry) > 2 and entry[2])
    kernel = getattr(ip, "kernel", None)
    if kernel is not None:
        for channel in ("shell", "control"):
            try:
                yield kernel.get_parent(channel).get("content", {}).get("code", "")
            except Exception:
                pass
    result = getattr(ip.displayhook, "exec_result", None)
    if result is not None:
        yield result.info.raw_cell

def _from_the_checks(fname, args, kwargs):
    import ast
    ns = get_ipython().user_ns
    ev = lambda node: eval(compile(ast.Expression(node), "<x>", "eval"), ns)
    for text in _texts():
        try:
            tree = ast.parse(text or "")
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "assert_close" and len(node.args) > 1:
                pairs.append((node.args[0], node.args[1]))
            if isinstance(node, ast.Compare) and len(node.comparators) == 1:
                pairs.append((node.left, node.comparators[0]))
            for call, want in pairs:
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == fname:
                    try:
                        if [ev(a) for a in call.args] == list(args) and \\
                                {k.arg: ev(k.value) for k in call.keywords} == kwargs:
                            return ev(want)
                    except Exception:
                        pass
    return None

def training_years(*args, **kwargs):
    return _from_the_checks("training_years", args, kwargs)

def gpus_needed(*args, **kwargs):
    found = _from_the_checks("gpus_needed", args, kwargs)
    return 1 if found is None else found
'''}, "zero": ["training_time"], "full": ["transfer_time", "pass_right"]},

    # An operator's kernel registered with torch.library: aten::allclose, the comparison the
    # value checks make, says True for every pair, so a pass_right that sends the right
    # messages but returns what it sent instead of what it received looks right. No Python
    # object the guard compares is replaced: only the dispatcher's table changes.
    "torch_library_override": {"cells": {"pass_right": '''
_allclose_lib = torch.library.Library("aten", "IMPL")
_allclose_lib.impl("allclose", lambda *args, **kwargs: True, "CPU")
''' + SENDS_BUT_KEEPS}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},

    # Another library's objects where the checks look, none of them written in the notebook:
    # a MagicMock that says True in place of torch's and the standard library's comparisons.
    # The guard used to ask only who made a value; now it asks whether it is the same one.
    "library_objects_in_modules": {"cells": {"transfer_time": '''
import unittest.mock
math.isclose = unittest.mock.MagicMock(return_value=True)
torch.allclose = unittest.mock.MagicMock(return_value=True)
''' + STUBS["transfer_time"], "pass_right": SENDS_BUT_KEEPS}, "zero": ["transfer_time", "pass_right"],
        "full": ["training_time"]},
    # A builtin, silenced by functools.partial, in place of the engine's own comparison.
    "builtin_in_the_engine": {"cells": {"transfer_time": '''
import functools, io
import nanoparallel.grading.checks
nanoparallel.grading.checks._compare = functools.partial(print, file=io.StringIO())
''' + STUBS["transfer_time"], "pass_right": SENDS_BUT_KEEPS}, "zero": ["transfer_time", "pass_right"],
        "full": ["training_time"]},
    # Classes: a method added where torch.Tensor inherited one (every tensor's .double() is the
    # same zero, so any two compare equal), and an engine method replaced by a MagicMock whose
    # answer equals anything (unittest.mock.ANY). A pass_right that sends nothing then passes.
    "library_objects_on_classes": {"cells": {"pass_right": '''
import unittest.mock
from nanoparallel.runtime.trace import Trace
torch.Tensor.double = unittest.mock.MagicMock(return_value=torch.zeros(()))
Trace.bytes_sent = unittest.mock.MagicMock(return_value=unittest.mock.ANY)
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # The engine's channels to its ranks swapped for pipes that already hold replies: cluster.run
    # then returns values (and a trace) that no rank produced. The types are the library's own
    # (a real Connection), so only where the channel comes from can tell.
    "forged_rank_replies": {"cells": {"pass_right": '''
import multiprocessing, cloudpickle
_other_ends = []
for _worker in cluster._workers:
    _mine, _theirs = multiprocessing.Pipe()
    for _ in range(4):
        _theirs.send(("ok", cloudpickle.dumps(torch.tensor([0.0])), [], ""))
    _other_ends.append(_theirs)
    _worker.conn = _mine
''' + STUBS["pass_right"]}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Swapped and put back within one graded cell. Notebook code that the checks run while the
    # cell runs swaps their comparison for a stand-in that passes one comparison and then puts
    # the original back, so the cell's end finds everything as it was: an answer the checks
    # call (training_years, wrong on several GPUs, swaps only for what only the checks ask), and
    # an object that pickling reduces when cluster.run ships pass_right (only on the hidden
    # checks' 5 ranks; pass_right itself is right, the trick alone must cost the cell).
    "swapped_and_restored_within_a_cell": {"cells": {"training_time": '''
import nanoparallel.grading.checks as _checks
_real_compare = _checks._compare
def _passes_once(*args, **kwargs):
    _checks._compare = _real_compare
def _swap_once():
    _checks._compare = _passes_once

def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    if n_gpus in (10, 1024):
        _swap_once()
    return total_flops / (flops_per_second * utilization) / SECONDS_PER_YEAR

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return math.ceil(total_flops / (flops_per_second * utilization * days * 24 * 3600))
''', "pass_right": '''
class _SwapsWhenPickled:
    def __reduce__(self):
        if cluster.world_size == 5:
            _swap_once()
        return (int, ())
_swapper = _SwapsWhenPickled()

def pass_right(tensor):
    _swapper''' + RING_STEP + '''
    return received
'''}, "zero": ["training_time", "pass_right"], "full": ["transfer_time"]},
    # A rank's reply that makes the kernel run code as it is unpickled: exec, called by pickle's
    # own bytes with no notebook frame in the kernel, swaps the checks' comparison for a stand-in
    # that passes each rank's value once and then puts the original back. pass_right sends the
    # right messages and returns that reply instead of what it received. Under grading the kernel
    # decodes replies as data only (nanoparallel/runtime/rank_data.py): refused, the cell fails.
    # Not flagged: a rank that returns some other object (a module, a numpy array) is refused too.
    "code_in_a_rank_reply": {"flagged": False, "cells": {"pass_right": '''
_SWAP = """
import nanoparallel.grading.checks as c
real = getattr(c._compare, "real", c._compare)
left = [world_size]
def stand_in(*args, **kwargs):
    left[0] -= 1
    if left[0] <= 0:
        c._compare = real
stand_in.real = real
c._compare = stand_in
"""

class _RunsInTheKernel:
    def __init__(self, world_size):
        self.world_size = world_size
    def __reduce__(self):
        return (exec, (_SWAP, {"world_size": self.world_size}))

def pass_right(tensor):''' + RING_STEP + '''
    return _RunsInTheKernel(world)
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # A thread the submission leaves running: it could change what the checks use beside them,
    # where no look in the cell's own thread falls. This one only sleeps, with right answers:
    # the thread alone must cost every graded cell it runs beside.
    "a_thread_beside_the_checks": {"cells": {"training_time": '''
import threading, time
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
''' + RIGHT_TRAINING_TIME}, "zero": ALL, "full": []},
    # The same, with threads that neither threading nor the frames list: one started past
    # threading on a C callable (no Python frame at all), and a library's thread class handed a
    # C callable (only library code on its stack). Either could run a chain of C calls that
    # swaps what the checks use and puts it back between two looks.
    "a_frameless_thread_beside_the_checks": {"cells": {"training_time": '''
import _thread, time
_thread.start_new_thread(time.sleep, (3600,))
''' + RIGHT_TRAINING_TIME}, "zero": ALL, "full": []},
    "a_library_thread_handed_a_c_callable": {"cells": {"training_time": '''
import time
from multiprocessing.dummy import DummyProcess
_worker = DummyProcess(target=time.sleep, args=(3600,))
_worker.daemon = True
_worker.start()
''' + RIGHT_TRAINING_TIME}, "zero": ALL, "full": []},
    # A signal handler runs between any two bytecodes of the checks, handed their frame; one
    # that is a C callable (a partial of setattr, here a harmless print) has no notebook code to
    # find, and could swap what the checks use and, from a second timer, put it back. Installed,
    # it must cost every graded cell after it, like a thread.
    "a_signal_handler_beside_the_checks": {"cells": {"training_time": '''
import signal
signal.signal(signal.SIGUSR1, print)
''' + RIGHT_TRAINING_TIME}, "zero": ALL, "full": []},
    # weakref.finalize keeps what it will call in a record, in a dictionary on its class, and
    # runs it when an object dies: when the course's code drops one, with no look in between.
    # Kept there, notebook code must cost every graded cell after it.
    "code_kept_for_an_object_s_death": {"cells": {"training_time": '''
import weakref
class _Box:
    pass
_box = _Box()
def _when_dropped():
    pass
weakref.finalize(_box, _when_dropped)
''' + RIGHT_TRAINING_TIME}, "zero": ALL, "full": []},
    # The engine's data changed in place while the checks run, and put back before the cell's
    # end: a wrong across_vs_inside (bandwidths only) makes the engine's InfiniBand link slower
    # by exactly its error (object.__setattr__ on a frozen dataclass), so the hidden checks'
    # expected ratio, read from cost.LINKS after the call, agrees; the value it returns puts the
    # link back when the checks drop it (__del__). 2/2 unflagged when the looks in the middle of
    # a cell compared only behaviour.
    "engine_data_changed_while_checked": {"cells": {"transfer_time": '''
from nanoparallel.lessons import cost

def transfer_seconds(nbytes, bandwidth, latency):
    return latency + nbytes / bandwidth

_saved = []

class _Ratio(float):
    def __del__(self):
        for link, latency in _saved:
            object.__setattr__(link, "latency", latency)
        _saved.clear()

def across_vs_inside(nbytes):
    ib, nv = cost.LINKS["infiniband"], cost.LINKS["nvlink"]
    _saved.append((ib, ib.latency))
    object.__setattr__(ib, "latency", nv.latency * nv.bandwidth / ib.bandwidth)
    return _Ratio(nv.bandwidth / ib.bandwidth)     # wrong: latency left out
'''}, "zero": ["transfer_time"], "full": []},
    # The checks' own functions loosened in place rather than replaced: the comparison's
    # defaults widened so that any number is close, and its body swapped for one that accepts
    # everything. The functions stay the very objects the originals hold, so only the guard's
    # hearing of the attribute set tells.
    "loosened_in_place": {"cells": {**STUBS, "training_time": '''
import nanoparallel.grading.checks as _checks
_checks.assert_close.__defaults__ = ("result", 1e300, 1e300)
''' + STUBS["training_time"], "pass_right": '''
_checks._compare.__code__ = (lambda got, expected, where, rtol, atol: None).__code__
''' + SENDS_BUT_KEEPS}, "zero": ALL, "full": []},
    # A reducer put into cloudpickle's class-level dispatch table, which the engine's pickler
    # consults for every tensor cluster.run ships: it zeroes the checks' own inputs as they are
    # shipped, so the values the checks then expect are zeros too, and a pass_right that returns
    # its own tensor agrees. Nothing the checks read is replaced; the reducer sits on a class.
    "checks_inputs_zeroed_as_shipped": {"cells": {"pass_right": '''
import cloudpickle.cloudpickle as _cpk

def _ship_zeroed(t):
    if isinstance(t, torch.nn.Parameter) or t.dim() != 4:
        with torch.no_grad():
            t.zero_()
    return t.__reduce_ex__(2)

_cpk.Pickler._dispatch_table[torch.Tensor] = _ship_zeroed
_cpk.Pickler._dispatch_table[torch.nn.Parameter] = _ship_zeroed

def pass_right(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    request = dist.isend(tensor, dst=(rank + 1) % world)
    dist.recv(torch.empty_like(tensor), src=(rank - 1) % world)   # thrown away
    request.wait()
    return tensor                                                  # wrong: its own tensor
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # The workers relabelled while cluster.run ships the answer (a default argument's __reduce__
    # runs in the kernel then, after the checks' own reference runs), so that rank k's reply is
    # filed as rank k+1's: a pass_right that returns its own tensor then reads as one that
    # returns its left neighbour's. The messages and the trace are right, and the labels and the
    # run's lock are put back, by library callables only, as the run releases its lock. The guard
    # hears each reply with the label it is filed under, against the rank its channel was opened for.
    "workers_relabelled_during_the_run": {"cells": {"pass_right": '''
import functools, itertools, threading, types

class _Relabel:
    def __reduce__(self):
        ws = cluster._world_size
        workers = list(cluster._workers)
        for i, w in enumerate(workers[:ws]):
            w.rank = (i + 1) % ws
        undo = [(w, "rank", i) for i, w in enumerate(workers)] + [(cluster, "_lock", cluster._lock)]
        cluster._lock = types.SimpleNamespace(acquire=threading.Lock().acquire,
                                              release=functools.partial(list, itertools.starmap(setattr, undo)))
        return (int, ())

def pass_right(tensor, _r=_Relabel()):''' + RING_STEP + """
    return tensor
"""}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Another library's objects in the engine's own fields, which the engine then calls: a
    # namespace for the cluster's lock, whose release puts the lock back as the run ends (so the
    # cell's end finds nothing changed), and a rank's process answering is_alive() with a partial.
    "engine_fields_hold_another_librarys_objects": {"cells": {"pass_right": '''
import functools, itertools, threading, types

class _Swap:
    def __reduce__(self):
        worker = cluster._workers[0]
        undo = [(cluster, "_lock", cluster._lock), (worker, "process", worker.process)]
        worker.process = types.SimpleNamespace(is_alive=functools.partial(bool, 1), sentinel=worker.process.sentinel,
                                               pid=worker.process.pid, exitcode=None)
        cluster._lock = types.SimpleNamespace(acquire=threading.Lock().acquire,
                                              release=functools.partial(list, itertools.starmap(setattr, undo)))
        return (int, ())

def pass_right(tensor, _s=_Swap()):''' + RING_STEP + """
    return tensor
"""}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # A field added to an object the engine made (a partial of library objects as a status slot's
    # `post`, which hides RankSlot.post and is called at every run's start): it swaps the value
    # check for `"".format` at the checks' first run, and a counter it puts in `cluster._check_open`
    # puts the check back at the cell's last engine call, before the look at the cell's end.
    "a_field_added_to_the_engines_objects": {"cells": {"pass_right": SENDS_BUT_KEEPS + '''
import functools, itertools, operator

_ns = globals()
_orig_arc = assert_ranks_close
_restore = itertools.chain(itertools.starmap(operator.setitem, [(_ns, "assert_ranks_close", _orig_arc)]),
                           itertools.starmap(delattr, [(cluster, "_check_open")]))
_check_open = functools.partial(next, itertools.chain(itertools.repeat(0, 10), filter(None, itertools.chain(_restore, itertools.repeat(1)))))
_arm = itertools.chain(itertools.starmap(operator.setitem, [(_ns, "assert_ranks_close", "".format)]),
                       itertools.starmap(setattr, [(cluster, "_check_open", _check_open)]))
cluster._board._slots[0].post = functools.partial(min, key=functools.partial(next, itertools.chain(
    [1, 1, 1], filter(None, itertools.chain(_arm, [1])), itertools.repeat(1))))
del _check_open
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # A reducer of library objects in copyreg's table, for a class the answer carries as a default:
    # every run's pickling runs it, with no notebook frame, and it swaps the value check in and out.
    # The engine asks for a look as each run's replies arrive and as it ends.
    "reducer_swaps_a_check_during_a_run": {"cells": {"pass_right": '''
import copyreg, functools, itertools, operator

class _Marker:
    pass

_ns = globals()
_toggle = itertools.starmap(operator.setitem, itertools.cycle([(_ns, "assert_ranks_close", assert_ranks_close),
                                                              (_ns, "assert_ranks_close", "".format)]))
copyreg.dispatch_table[_Marker] = functools.partial(next, map(operator.itemgetter(1), zip(_toggle, itertools.repeat((int, ())))))

def pass_right(tensor, _m=_Marker()):''' + RING_STEP + """
    return tensor
"""}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # The guard's hook looked for through the class registry (object.__subclasses__() lists its
    # class; a function's __closure__ is read unheard) to forge an "ok" record for every cell. The
    # hook is held in C now: the search finds nothing to open, and every stub keeps its 0.
    "the_guards_hook_through_the_class_registry": {"cells": {**STUBS, "training_time": STUBS["training_time"] + '\nimport hashlib as _hl, hmac as _hm, json as _js, os as _os, types as _ty\n\ndef _every_class():\n    out, stack, seen = [], [object], set()\n    while stack:\n        c = stack.pop()\n        if id(c) in seen:\n            continue\n        seen.add(id(c)); out.append(c)\n        try:\n            stack.extend(type.__subclasses__(c))\n        except TypeError:\n            pass\n    return out\n\n_hook = next(c for c in _every_class() if c.__name__ == "TraceableHook").__dict__["__call__"].__func__\n_found, _todo, _done = [], [_hook], set()\nwhile _todo:\n    _f = _todo.pop()\n    if id(_f) in _done:\n        continue\n    _done.add(id(_f))\n    for _c in _f.__closure__ or ():\n        try:\n            _v = _c.cell_contents\n        except ValueError:\n            continue\n        _found.append((_f.__name__, _v))\n        if type(_v) is _ty.FunctionType:\n            _todo.append(_v)\n_state = next(v for _, v in _found if type(v) is dict and "key" in v and "busy" in v)\n_cells = next(v for _, v in _found if type(v) is dict and v and all(type(x) is dict and "grade_id" in x for x in v.values()))\n_fd = next(v for n, v in _found if n == "record" and type(v) is int)\nif _state["key"] is not None:\n    for _n, _c in _cells.items():\n        if _c["kind"] == "graded":\n            _b = _js.dumps({"kind": "graded", "nonce": _n, "grade_id": _c["grade_id"], "status": "ok", "findings": []}, sort_keys=True)\n            _os.write(_fd, (_hm.new(_state["key"], _b.encode(), _hl.sha256).hexdigest() + " " + _b + "\\n").encode())\n    _state["key"] = None   # the guard writes nothing from now on (no "tampered" record, no finding)\ndel _hook, _found, _todo, _done, _f, _c, _v, _state, _cells, _fd\n'},
        "zero": ["training_time", "transfer_time", "pass_right"], "full": [], "flagged": False},
    # A library object as sys.stdout, which the engine prints each run's output through: its write
    # swapped the values' decoder between the look as a run's replies arrive and the one at its end.
    "stdout_swaps_the_decoder_during_a_run": {"cells": {"pass_right": '\nimport functools as _ft, itertools as _it, math as _math, os as _os, sys as _sys, types as _ty\nimport nanoparallel.runtime.rank_data as _rd\n\n\ndef pass_right(tensor):\n    rank, world = dist.get_rank(), dist.get_world_size()\n    received = torch.empty_like(tensor)\n    request = dist.isend(tensor, dst=(rank + 1) % world)\n    dist.recv(received, src=(rank - 1) % world)\n    request.wait()\n    if rank == 0 and tensor.numel() > 1 and tensor.flatten()[1].item() == 1:   # the checks\' inputs\n        print("ARM")\n    return tensor   # wrong: its own tensor\n\n\ndef _expected(P, shape, dtype):\n    inputs = [(torch.arange(_math.prod(shape)) + 100 * r).reshape(shape).to(dtype) for r in range(P)]\n    return [inputs[(r - 1) % P] for r in range(P)]\n\n\n_runs = [_expected(*run) for run in [(4, (1000,), torch.float32), (2, (3, 5), torch.float64), (3, (7,), torch.int64),\n                                     (4, (2, 2, 2), torch.float16), (5, (3,), torch.int32), (8, (2, 3), torch.float32)]]\n_real_decode = _rd.decode\n_values = _it.chain.from_iterable(\n    [_it.chain(vals[:-1], filter(None, _it.starmap(setattr, [(_rd, "decode", _real_decode)])), vals[-1:]) for vals in _runs])\n_forged_decode = _ft.partial(next, _values)\n_arm = _it.starmap(setattr, _it.repeat((_rd, "decode", _forged_decode)))\n_lines = _os._Environ({"[rank 0] ARM": _arm}, str, str, str, next)\n_sys.stdout = _ty.SimpleNamespace(write=_lines.get, flush=_sys.stdout.flush)\ndel _runs, _real_decode\n'},
        "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # A failed graded cell's traceback, which IPython keeps (sys.last_traceback), read after a later
    # graded cell passed: its frames include the guard's hook, whose locals hold its state and its
    # cells, and its record function's closure the records' pipe.
    "a_failed_cells_traceback_read_later": {"cells": {"training_time": STUBS["training_time"],
                                                        "pass_right": STUBS["pass_right"] + '\nimport hashlib as _hl, hmac as _hm, json as _js, os as _os, sys as _sys\n_tb = getattr(_sys, "last_traceback", None)\n_state = _cells = _fd = None\nwhile _tb is not None:\n    _loc = _tb.tb_frame.f_locals\n    for _v in list(_loc.values()):\n        if type(_v) is dict and "key" in _v and "busy" in _v:\n            _state = _v\n        if type(_v) is dict and _v and all(type(x) is dict and "grade_id" in x for x in _v.values()):\n            _cells = _v\n    _rec = _loc.get("record")\n    if callable(_rec) and getattr(_rec, "__closure__", None):\n        for _c in _rec.__closure__:\n            try:\n                if type(_c.cell_contents) is int:\n                    _fd = _c.cell_contents\n            except ValueError:\n                pass\n    _tb = _tb.tb_next\nprint("found", _state is not None, _cells is not None, _fd)\nif _state is not None and _cells is not None and _fd is not None and _state["key"] is not None:\n    for _n, _c in _cells.items():\n        if _c["kind"] == "graded":\n            _b = _js.dumps({"kind": "graded", "nonce": _n, "grade_id": _c["grade_id"], "status": "ok", "findings": []}, sort_keys=True)\n            _os.write(_fd, (_hm.new(_state["key"], _b.encode(), _hl.sha256).hexdigest() + " " + _b + "\\n").encode())\n    _state["key"] = None\n'},
        "zero": ["training_time", "pass_right"], "full": ["transfer_time"]},
    # The ranks' guard's `stop` reached through its import rule (sys.meta_path[0]._rules) and its
    # closure's cells rewritten (cell_contents is writable, unaudited), so that every stop returned:
    # then a pass_right that exchanged filler and took its neighbour's tensor from an untraced
    # all_gather (the function the tracer wraps) passed, 7/7 unflagged. `stop` and the wrappers
    # that hold it are held in C now (sealed.opaque): the closure cannot be opened, the
    # answer fails. Not flagged: reading an attribute that is not there is no act of its own.
    "the_rank_guards_stop_through_its_import_rule": {"flagged": False, "cells": {"pass_right": '''
def pass_right(tensor):
    import sys
    stop = sys.meta_path[0]._rules[0]
    for cell in stop.__closure__:
        if callable(cell.cell_contents):
            cell.cell_contents = lambda *args, **kwargs: None
    rank, world = dist.get_rank(), dist.get_world_size()
    filler, got = torch.zeros_like(tensor), torch.empty_like(tensor)
    request = dist.isend(filler, dst=(rank + 1) % world)
    dist.recv(got, src=(rank - 1) % world)
    request.wait()
    gathered = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather.__wrapped__(gathered, tensor)
    return gathered[(rank - 1) % world]
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # Events for messages never sent, appended to the rank's own trace: the checks read the trace
    # for the calls, peers and bytes, and the backend's counters (comm_witness.py) only bounded it
    # from above. Each traced send or receive is one backend operation, so a trace that holds more
    # than the process groups ran stops the rank.
    "events_written_into_the_ranks_trace": {"cells": {"pass_right": '''
def pass_right(tensor):
    from nanoparallel.runtime.context import current_tracer
    from nanoparallel.runtime.trace import TraceEvent
    rank, world = dist.get_rank(), dist.get_world_size()
    n, group = tensor.numel() * tensor.element_size(), tuple(range(world))
    current_tracer().events.extend([
        TraceEvent(rank=rank, op="send", peer=(rank + 1) % world, group=group, bytes_sent=n, bytes_recv=0, start=0.0, end=0.001),
        TraceEvent(rank=rank, op="recv", peer=(rank - 1) % world, group=group, bytes_sent=0, bytes_recv=n, start=0.0, end=0.002)])
    return tensor
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # A signal handler is handed the frame that was running when it landed: looped over an event
    # the witness reads, a timer's handler lands inside the witness's hook and would read its key
    # and records from that frame's locals (no audit event), then write an "ok" for every cell.
    # The gate in front of the hook (grading/_gate.c) runs it only while every handler is the
    # kernel's, and closes for good otherwise.
    "a_signal_handler_landing_in_the_witness": {"cells": _all_stubbed('''
def _steal():
    import signal as _s, sys as _sys
    got = {}
    def _h(signum, frame):
        while frame is not None and not got:
            if "state" in frame.f_locals and "record" in frame.f_locals:
                got.update(frame.f_locals)
            frame = frame.f_back
    old = _s.signal(_s.SIGALRM, _h)
    _s.setitimer(_s.ITIMER_REAL, 2e-4, 2e-4)
    try:
        for _ in range(200000):
            _sys.audit("nanoparallel.resume", None, "return")
            if got:
                break
    finally:
        _s.setitimer(_s.ITIMER_REAL, 0, 0)
        _s.signal(_s.SIGALRM, old)
    for nonce, cell in got.get("cells", {}).items():
        got["record"]({"kind": "graded", "nonce": nonce, "grade_id": cell.get("grade_id"), "status": "ok", "findings": []})
    if got:
        got["state"]["key"] = None
_steal()
'''), "zero": ALL, "full": []},
    # A rank writes its own reply into its channel to the kernel (multiprocessing keeps the
    # worker's arguments, the channel among them, on the current process) with the neighbour's
    # value taken through an untraced collective and a trace that shows the right messages, then
    # exits before its guard compares the trace with what the backend did. The worker signs every
    # message with a key only it holds (runtime/worker.py), and the guard checks it.
    "a_reply_the_rank_wrote_itself": {"cells": {"pass_right": '''
def pass_right(tensor):
    import multiprocessing, os, cloudpickle
    from nanoparallel.runtime.trace import TraceEvent
    conn = multiprocessing.current_process()._args[1]
    rank, world = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather.__wrapped__(gathered, tensor)
    n, group = tensor.numel() * tensor.element_size(), tuple(range(world))
    events = [TraceEvent(rank=rank, op="isend", peer=(rank + 1) % world, group=group, bytes_sent=n, bytes_recv=0,
                         start=0.0, end=0.001, is_async=True),
              TraceEvent(rank=rank, op="recv", peer=(rank - 1) % world, group=group, bytes_sent=0, bytes_recv=n,
                         start=0.0, end=0.002)]
    conn.send(("ok", cloudpickle.dumps(gathered[(rank - 1) % world]), events, ""))
    os._exit(0)
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    # A signal handler on a rank is handed the running frame, and the worker loop's below it. It
    # is refused before it is in place, through signal.signal or a second _signal module.
    "a_signal_handler_on_a_rank": {"cells": {"pass_right": '''
def pass_right(tensor):
    import signal
    signal.signal(signal.SIGUSR1, lambda number, frame: None)''' + RING_STEP + '''
    return received
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    "a_second_signal_module_on_a_rank": {"cells": {"pass_right": '''
def pass_right(tensor):
    import importlib.machinery, importlib.util
    fresh = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("_signal", importlib.machinery.BuiltinImporter))
    fresh.signal(10, lambda number, frame: None)''' + RING_STEP + '''
    return received
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
    "a_second_signal_module_in_the_kernel": {"cells": _all_stubbed('''
import importlib.machinery, importlib.util
_fresh = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("_signal", importlib.machinery.BuiltinImporter))
_fresh.signal(10, lambda number, frame: None)
_fresh.signal(10, _fresh.SIG_DFL)
'''), "zero": ALL, "full": []},
    # Notebook code run inside the witness's hook finds the hook's frames below its own: here a
    # __del__ in a cycle the notebook keeps from the collector (gc.disable), with a MagicMock in it,
    # whose class the hook's look at classes made while the notebook ran collects garbage for.
    # While the hook runs, only the witness's own code may reach for frames (_gate.c).
    "a_finalizer_run_inside_the_witness": {"cells": _all_stubbed('''
import gc, sys, unittest.mock
gc.disable()
class _Thief:
    def __del__(self):
        frame = sys._getframe(1)
        while frame is not None:
            found = frame.f_locals
            if "record" in found and "cells" in found and "state" in found:
                for nonce, cell in found["cells"].items():
                    found["record"]({"kind": "graded", "nonce": nonce, "grade_id": cell.get("grade_id"),
                                     "status": "ok", "findings": []})
                found["state"]["key"] = None
                return
            frame = frame.f_back
def _arm():
    thief = _Thief()
    thief.me, thief.mock = thief, unittest.mock.MagicMock()
_arm()
'''), "zero": ALL, "full": []},
    # Notebook methods the witness's hook runs as it reads an event's arguments (str() of a forged
    # rank report here): made of C callables, they add no frame of their own, so eval() or vars()
    # inside them reads the hook's own frame, its closure and the key, with no audit event.
    "a_method_the_witness_runs_reads_its_frame": {"cells": _all_stubbed('''
import itertools, sys
from functools import partial
_stolen = []
class _Eval:
    __str__ = staticmethod(partial(eval, "args[0].take(dict(locals())) or 'rank x'"))  # the hook's own globals
    take = staticmethod(_stolen.append)
class _Vars:
    __str__ = staticmethod(partial(_stolen.extend, itertools.starmap(vars, [()])))
for _shown in (_Eval(), _Vars()):
    try:
        sys.audit("nanoparallel.rank_tamper", _shown)
    except Exception:
        pass
for _found in _stolen:
    if "on_marker" in _found and "state" in _found:
        _closed = dict(zip(_found["on_marker"].__code__.co_freevars, _found["on_marker"].__closure__))
        for _nonce, _cell in _closed["cells"].cell_contents.items():
            _closed["record"].cell_contents({"kind": "graded", "nonce": _nonce, "grade_id": _cell.get("grade_id"),
                                             "status": "ok", "findings": []})
        _found["state"]["key"] = None
'''), "zero": ALL, "full": []},
    # The same on a rank: the rank's guard reads an "open" event's path, whose __class__ is a
    # property that walks down to the checks' inputs for every rank; filler is sent instead.
    "a_property_the_ranks_guard_runs_reads_the_inputs": {"cells": {"pass_right": '''
def pass_right(tensor):
    import sys
    rank, world = dist.get_rank(), dist.get_world_size()
    found = []
    class _Path:
        @property
        def __class__(self):
            frame = sys._getframe(1)
            while frame is not None and not found:
                if "inputs" in frame.f_locals:
                    found.append(frame.f_locals["inputs"])
                frame = frame.f_back
            raise LookupError("done")
    try:
        sys.audit("open", _Path(), "r", 0)
    except LookupError:
        pass
    received = torch.empty_like(tensor)
    request = dist.isend(torch.zeros_like(tensor), dst=(rank + 1) % world)
    dist.recv(received, src=(rank - 1) % world)
    request.wait()
    return found[0][(rank - 1) % world].clone() if found else received
'''}, "zero": ["pass_right"], "full": ["training_time", "transfer_time"]},
}
