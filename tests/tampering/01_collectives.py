"""Tampering attempts on 01_collectives (see 00_welcome.py for the format): the answer uses the
backend's own all-reduce (the trace checks would fail it) and the tampering hides that."""
import library_objects


LAZY = '''
def naive_all_reduce(tensor, root=0):
    dist.all_reduce(tensor)
    return tensor
'''

TAMPERING = {
    # Disable the trace checks where the graded cells call them, and the names they imported.
    "silence_trace_checks": {"cells": {"naive_all_reduce": '''
import nanoparallel.grading.checks as _checks
for _name in ("assert_ops_within", "assert_peers", "assert_bytes_sent", "assert_all_waited"):
    setattr(_checks, _name, lambda *args, **kwargs: None)
    globals()[_name] = lambda *args, **kwargs: None
''' + LAZY}, "zero": ["naive_all_reduce"], "full": []},
    # Tampering inside the ranks: the answer rewrites torch and the tracer where it runs.
    "tamper_inside_ranks": {"cells": {"naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    import torch.distributed as d
    import nanoparallel.runtime.tracing as tracing
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
from nanoparallel.runtime.trace import Trace
_fake = types.ModuleType("nanoparallel.grading.checks")
_fake.assert_ops_within = _fake.assert_peers = lambda *args, **kwargs: None
sys.modules["nanoparallel.grading.checks"] = _fake
_real_run = Cluster.run
Cluster.run = lambda self, fn, *args, **kwargs: _real_run(self, fn, *args, **kwargs)
Trace.comm = lambda self: []
''' + LAZY}, "zero": ["naive_all_reduce"], "full": []},
    # Communication the trace does not see, then the traffic the checks expect: the sum comes from
    # an all-reduce reached without the traced function (the function it wraps), and the messages
    # through root are filler that carries nothing the answer uses.
    "untraced_collective_with_filler": {"cells": {"naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = tensor.clone()
    dist.all_reduce.__wrapped__(tensor)
    if rank == root:
        for src in range(world):
            if src != root:
                dist.recv(torch.empty_like(tensor), src=src)
        for dst in range(world):
            if dst != root:
                dist.send(tensor, dst=dst)
    else:
        dist.send(mine, dst=root)
        dist.recv(torch.empty_like(tensor), src=root)
    return tensor
'''}, "zero": ["naive_all_reduce"], "full": ["tree_broadcast"]},
    # The same with point-to-point messages of the process group's own (which no trace wrapper
    # sees) carrying the data, and traced filler in the pattern of a ring.
    "untraced_p2p_with_filler": {"cells": {"naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.distributed_c10d._get_default_group()
    mine = tensor.clone()
    if rank == root:
        incoming = torch.empty_like(tensor)
        for src in range(world):
            if src != root:
                group.recv([incoming], src, 7).wait()
                tensor += incoming
        for dst in range(world):
            if dst != root:
                group.send([tensor], dst, 7).wait()
        for src in range(world):
            if src != root:
                dist.recv(torch.empty_like(tensor), src=src)
        for dst in range(world):
            if dst != root:
                dist.send(tensor, dst=dst)
    else:
        group.send([tensor], root, 7).wait()
        group.recv([tensor], root, 7).wait()
        dist.send(mine, dst=root)
        dist.recv(torch.empty_like(tensor), src=root)
    return tensor
'''}, "zero": ["naive_all_reduce"], "full": ["tree_broadcast"]},

    # Channels between ranks that are not torch.distributed at all, each with traced filler in
    # the pattern the checks expect: files in the shared /tmp (naive_all_reduce), the process
    # group's own key-value store (tree_broadcast), UDP on the ranks' loopback
    # (ring_reduce_scatter), torch.save's files, written in C++ (ring_all_gather), and POSIX
    # shared memory read and written with os.read/os.write (halving_doubling): the last two raise
    # no audit event at all. The data never travels in a traced message.
    "untraced_side_channels": {"cells": {"naive_all_reduce": """
def naive_all_reduce(tensor, root=0):
    import os
    rank, world = dist.get_rank(), dist.get_world_size()
    filler = torch.zeros_like(tensor)
    folder = "/tmp/side-channel"
    os.makedirs(folder, exist_ok=True)
    if rank != root:
        torch.save(tensor.clone(), f"{folder}/{rank}.pt")
        dist.send(filler, dst=root)
        dist.recv(filler, src=root)
        tensor.copy_(torch.load(f"{folder}/sum.pt"))
    else:
        for src in range(world):
            if src != root:
                dist.recv(filler, src=src)
        for src in range(world):
            if src != root:
                tensor += torch.load(f"{folder}/{src}.pt")
        torch.save(tensor.clone(), f"{folder}/sum.pt")
        for dst in range(world):
            if dst != root:
                dist.send(filler, dst=dst)
    return tensor
""", "tree_broadcast": """
def tree_broadcast(tensor, src=0):
    import pickle
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    key = f"answer-{store.add(f'calls-{rank}', 1)}"
    if rank == src:
        store.set(key, pickle.dumps(tensor.clone()))
    filler = torch.zeros_like(tensor)
    relative, mask = (rank - src) % world, 1
    while mask < world:
        if relative < mask and relative + mask < world:
            dist.send(filler, dst=(relative + mask + src) % world)
        elif mask <= relative < 2 * mask:
            dist.recv(filler, src=(relative - mask + src) % world)
        mask *= 2
    if rank != src:
        tensor.copy_(pickle.loads(store.get(key)))
    return tensor
""", "ring_reduce_scatter": """
def ring_reduce_scatter(tensor):
    import pickle, socket
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = tensor.reshape(-1).tensor_split(world)
    me = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    me.bind(("127.0.0.1", 47000 + rank))
    for step in range(world - 1):  # the ring's messages, as filler; after them every port is bound
        request = dist.isend(torch.zeros_like(chunks[(rank - step - 1) % world]), dst=(rank + 1) % world)
        dist.recv(torch.empty_like(chunks[(rank - step - 2) % world]), src=(rank - 1) % world)
        request.wait()
    for peer in range(world):
        if peer != rank:
            me.sendto(pickle.dumps(chunks[peer].clone()), ("127.0.0.1", 47000 + peer))
    total = chunks[rank].clone()
    for _ in range(world - 1):
        total += pickle.loads(me.recv(1 << 16))
    me.close()
    return total
""", "ring_all_gather": """
def ring_all_gather(chunk, numel, out=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    calls = torch.__dict__.setdefault("_side_channel_calls", {})  # per world size: a parked rank makes none
    calls[world] = calls.get(world, 0) + 1
    name = lambda r: f"/tmp/gather-{world}-{calls[world]}-{r}.pt"
    torch.save(chunk.clone(), name(rank))  # torch writes it in C++: no audit event
    sizes = [len(p) for p in torch.empty(numel).tensor_split(world)]
    for step in range(world - 1):  # the ring's messages, as filler; after them every file exists
        request = dist.isend(torch.zeros(sizes[(rank - step) % world], dtype=chunk.dtype), dst=(rank + 1) % world)
        dist.recv(torch.empty(sizes[(rank - step - 1) % world], dtype=chunk.dtype), src=(rank - 1) % world)
        request.wait()
    whole = torch.cat([torch.load(name(r)) for r in range(world)])
    if out is None:
        return whole
    out.copy_(whole)
    return out
""", "halving_doubling": """
def halving_doubling_all_reduce(tensor):
    import os, _posixshmem
    rank, world = dist.get_rank(), dist.get_world_size()
    if world & (world - 1):
        raise ValueError(f"recursive halving-doubling needs a power-of-two number of ranks, got {world}")
    calls = torch.__dict__.setdefault("_side_channel_calls_hd", {})
    calls[world] = calls.get(world, 0) + 1
    name = lambda r: f"/hd-{world}-{calls[world]}-{r}"
    data = tensor.contiguous().view(-1).clone()
    fd = _posixshmem.shm_open(name(rank), os.O_CREAT | os.O_RDWR, 0o600)  # no audit event either
    os.write(fd, data.view(torch.uint8).numpy().tobytes())
    os.close(fd)
    flat, lo, hi, segments, distance = torch.zeros_like(data), 0, data.numel(), [], world // 2
    while distance >= 1:  # the algorithm's messages, on zeros
        partner, mid = rank ^ distance, (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if rank & distance else ((lo, mid), (mid, hi))
        incoming = torch.empty(keep[1] - keep[0], dtype=flat.dtype)
        request = dist.isend(flat[give[0]:give[1]], dst=partner)
        dist.recv(incoming, src=partner)
        request.wait()
        segments.append((lo, hi))
        (lo, hi), distance = keep, distance // 2
    distance = 1
    while distance < world:
        partner = rank ^ distance
        outer_lo, outer_hi = segments.pop()
        other = (outer_lo, lo) if lo > outer_lo else (hi, outer_hi)
        request = dist.isend(flat[lo:hi], dst=partner)
        dist.recv(flat[other[0]:other[1]], src=partner)
        request.wait()
        lo, hi, distance = outer_lo, outer_hi, distance * 2
    total = torch.zeros_like(data)
    for r in range(world):
        fd = _posixshmem.shm_open(name(r), os.O_RDONLY, 0o600)
        total += torch.frombuffer(bytearray(os.read(fd, data.numel() * data.element_size())), dtype=torch.uint8).view(data.dtype)
        os.close(fd)
    tensor.view(-1).copy_(total)
    return tensor
"""}, "zero": ["naive_all_reduce", "tree_broadcast", "ring_reduce_scatter", "ring_all_gather",
              "halving_doubling"], "full": []},
    # The engine's functions replaced by another library's objects beside right answers.
    "library_objects": library_objects.case("01_collectives"),
}


def _before_the_side_channels(switch: str) -> dict:
    cells = dict(TAMPERING["untraced_side_channels"]["cells"])
    cells["naive_all_reduce"] = switch + cells["naive_all_reduce"]
    return {"cells": cells, "zero": TAMPERING["untraced_side_channels"]["zero"], "full": []}


# The same side channels, with the ranks' guard turned off first: the engine used to read
# whether ranks are guarded from os.environ each time it started them, so writing it and
# restarting the ranks gave ranks with no guard and no flight recorder (15/21 unflagged).
TAMPERING["ranks_restarted_unguarded"] = _before_the_side_channels("""
import os as _os
_os.environ["NANOPARALLEL_GUARDED"] = "0"
cluster._restart()
""")
# multiprocessing prepares a new process from what its parent hands it, before the process's
# target runs: in a kernel the parent's __main__ is the notebook's namespace, so a __file__
# set there ran that file in every new rank ahead of its guard, which the file disabled
# (15/21 unflagged).
TAMPERING["code_run_in_ranks_before_their_guard"] = _before_the_side_channels("""
import os as _os, tempfile as _tempfile
_path = _os.path.join(_tempfile.gettempdir(), "before_the_guard.py")
with open(_path, "w") as _f:
    _f.write("from nanoparallel.grading import rank_guard\\n"
             "rank_guard.install = lambda: None\\n")
__file__ = _path
cluster._restart()
""")
# What multiprocessing hands a new process before its target runs is unpickled there: an
# argument list whose item unpickles by calling exec ran notebook code in every new rank, put
# back in the kernel right after the ranks started. The engine's start of a rank is now looked
# at as it happens, and a rank started from more than plain data never counts.
TAMPERING["code_unpickled_in_ranks_before_their_guard"] = _before_the_side_channels("""
import sys as _sys

class _RunsFirst(str):
    def __reduce__(self):
        return (exec, ("from nanoparallel.grading import rank_guard\\nrank_guard.install = lambda: None", {}))

_argv = _sys.argv
_sys.argv = [_RunsFirst("kernel")]
cluster._restart()
_sys.argv = _argv
""")
