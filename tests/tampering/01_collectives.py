"""Tampering attempts on 01_collectives (see 00_welcome.py for the format): the answer uses the
backend's own all-reduce (the trace checks would fail it) and the tampering hides that."""

LAZY = '''
def naive_all_reduce(tensor, root=0):
    dist.all_reduce(tensor)
    return tensor
'''

TAMPERING = {
    # Disable the trace checks where the graded cells call them, and the names they imported.
    "silence_trace_checks": {"cells": {"naive_all_reduce": '''
import nanoparallel.checks as _checks
for _name in ("assert_ops_within", "assert_peers", "assert_bytes_sent", "assert_all_waited"):
    setattr(_checks, _name, lambda *args, **kwargs: None)
    globals()[_name] = lambda *args, **kwargs: None
''' + LAZY}, "zero": ["naive_all_reduce"], "full": []},
    # Tampering inside the ranks: the answer rewrites torch and the tracer where it runs.
    "tamper_inside_ranks": {"cells": {"naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    import torch.distributed as d
    import nanoparallel.tracing as tracing
    for name in dir(tracing):
        if name.startswith("_record") or name == "record":
            setattr(tracing, name, lambda *args, **kwargs: None)
    torch.allclose = lambda *args, **kwargs: True
    d.all_reduce(tensor)
    return tensor
'''}, "zero": ["naive_all_reduce"], "full": ["tree_broadcast"]},
    # Another module under the checks' name, and Cluster.run and the trace monkeypatched.
    "sys_modules_and_cluster_run": {"cells": {"naive_all_reduce": '''
import sys, types
from nanoparallel import Cluster
from nanoparallel.trace import Trace
_fake = types.ModuleType("nanoparallel.checks")
_fake.assert_ops_within = _fake.assert_peers = lambda *args, **kwargs: None
sys.modules["nanoparallel.checks"] = _fake
_real_run = Cluster.run
Cluster.run = lambda self, fn, *args, **kwargs: _real_run(self, fn, *args, **kwargs)
Trace.comm = lambda self: []
''' + LAZY}, "zero": ["naive_all_reduce"], "full": []},
}
