"""Plausible wrong answers for 01_collectives. Each mutant replaces whole solution cells
(keyed by grade_id); the graded cell ``<grade_id>_tests`` must then lose points.

Five mutants, at most one wrong answer per exercise in each, to keep autograde runs few. At most one
function per mutant deadlocks (each deadlock costs the cluster's 10 s deadline in its "try it"
cell and again in its graded cell), and the functions later cells reuse do not.
"""

import equals_everything

# The solution's recursive halving-doubling after its check of P, for mutants that change the check.
_HALVING_DOUBLING_AFTER_CHECK = '''
    flat = tensor.view(-1)
    lo, hi, segments = 0, flat.numel(), []
    distance = world // 2
    while distance >= 1:
        partner, mid = rank ^ distance, (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if rank & distance else ((lo, mid), (mid, hi))
        incoming = torch.empty(keep[1] - keep[0], dtype=flat.dtype)
        request = dist.isend(flat[give[0]:give[1]], dst=partner)
        dist.recv(incoming, src=partner)
        request.wait()
        flat[keep[0]:keep[1]] += incoming
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
    return tensor
'''

MUTANTS = {
    # Messages that wait their turn (a red-team pass found each keeping its points): rank 0 starts
    # every step and each other rank waits for its left neighbour, so a step takes P rounds, not 1;
    # and a reduce-scatter that sends the chunks round the ring one after another.
    "chains_that_wait_for_rank_0": {
        "ring_reduce_scatter": '''
def ring_reduce_scatter(tensor):
    """Reduce-scatter (SUM) over a ring; return chunk `rank` of the sum, a 1-D tensor."""
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = tensor.reshape(-1).tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for c in range(world):                 # chunk c travels the ring from rank c+1 to rank c
        start = (c + 1) % world
        if world == 1:
            break
        if rank != start:                  # add what came from the left
            buffer = torch.empty_like(chunks[c])
            dist.recv(buffer, src=left)
            chunks[c].add_(buffer)
        if rank != c:                      # pass it on, unless it has arrived home
            dist.send(chunks[c], dst=right)
    return chunks[rank]
''',
        "ring_all_gather": '''
def ring_all_gather(chunk, numel, out=None):
    """All-gather over a ring: return the whole flat tensor (`numel` elements) on every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if out is None:
        out = torch.empty(numel, dtype=chunk.dtype, device=chunk.device)
    parts = out.tensor_split(world)
    parts[rank].copy_(chunk)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        if rank == 0:
            dist.send(parts[(rank - step) % world], dst=right)
            dist.recv(parts[(rank - step - 1) % world], src=left)
        else:
            dist.recv(parts[(rank - step - 1) % world], src=left)
            dist.send(parts[(rank - step) % world], dst=right)
    return out
''',
        "ring_all_reduce": '''
def ring_all_reduce(tensor):
    """Sum `tensor` in place over a ring: reduce-scatter then all-gather; return it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    chunks = flat.tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    incoming = torch.empty_like(chunks[0])
    def exchange(send, recv):               # rank 0 goes first: no deadlock
        if rank == 0:
            dist.send(send, dst=right)
            dist.recv(recv, src=left)
        else:
            dist.recv(recv, src=left)
            dist.send(send, dst=right)
    for step in range(world - 1):
        s, r = (rank - step - 1) % world, (rank - step - 2) % world
        buffer = incoming[:chunks[r].numel()]
        exchange(chunks[s], buffer)
        chunks[r].add_(buffer)
    for step in range(world - 1):
        exchange(chunks[(rank - step) % world], chunks[(rank - step - 1) % world])
    return tensor
''',
    },
    # Wrong results or a wrong algorithm that still computes the right numbers.
    "forgot_sum_flat_off_by_one_not_a_ring_builtin": {
        "naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == root:
        for src in range(world):
            if src != root:
                dist.recv(tensor, src=src)          # overwrites instead of adding
        for dst in range(world):
            if dst != root:
                dist.send(tensor, dst=dst)
    else:
        dist.send(tensor, dst=root)
        dist.recv(tensor, src=root)
    return tensor
''',
        "tree_broadcast": '''
def tree_broadcast(tensor, src=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == src:                                 # flat: the root sends to each rank in turn
        for dst in range(world):
            if dst != src:
                dist.send(tensor, dst=dst)
    else:
        dist.recv(tensor, src=src)
    return tensor
''',
        "ring_reduce_scatter": '''
def ring_reduce_scatter(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = tensor.flatten().clone().tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        send_chunk, recv_chunk = (rank - step) % world, (rank - step - 1) % world   # off by one
        incoming = torch.empty_like(chunks[recv_chunk])
        request = dist.isend(chunks[send_chunk], dst=right)
        dist.recv(incoming, src=left)
        request.wait()
        chunks[recv_chunk].add_(incoming)
    return chunks[rank]
''',
        "ring_all_gather": '''
def ring_all_gather(chunk, numel, out=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = torch.empty(numel, dtype=chunk.dtype) if out is None else out
    parts = out.tensor_split(world)
    parts[rank].copy_(chunk)
    requests = [dist.isend(chunk, dst=r) for r in range(world) if r != rank]   # everyone to everyone
    for r in range(world):
        if r != rank:
            dist.recv(parts[r], src=r)
    for request in requests:
        request.wait()
    return out
''',
        "ring_all_reduce": '''
def ring_all_reduce(tensor):
    dist.all_reduce(tensor)                          # the built-in collective does the work
    return tensor
''',
        "halving_doubling": '''
def halving_doubling_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and world & (world - 1):            # only rank 0 checks: the others go on
        raise ValueError(f"needs a power-of-two number of ranks, got {world}")
    flat = tensor.view(-1)
    lo, hi, segments = 0, flat.numel(), []
    distance = world // 2
    while distance >= 1:
        partner, mid = rank ^ distance, (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if rank & distance else ((lo, mid), (mid, hi))
        incoming = torch.empty(keep[1] - keep[0], dtype=flat.dtype)
        request = dist.isend(flat[give[0]:give[1]], dst=partner)
        dist.recv(incoming, src=partner)
        request.wait()
        flat[keep[0]:keep[1]] += incoming
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
    return tensor
''',
        "sharded_matmul": '''
def sharded_matmul(a, b, sharded_dim):
    rank, world = dist.get_rank(), dist.get_world_size()
    if sharded_dim == "J":
        c = a @ b
        dist.all_reduce(c)
        return c
    rows = a @ b                                     # right numbers, twice the bytes:
    c = torch.zeros(rows.shape[0] * world, rows.shape[1], dtype=rows.dtype)
    c[rank * rows.shape[0]:(rank + 1) * rows.shape[0]] = rows
    dist.all_reduce(c)                               # an all-reduce of zero-padded rows
    return c
''',
    },
    # A deadlock, a chain, forgotten adds, averaging instead of summing.
    "deadlock_chain_no_add_average_wrong_half_no_reduce": {
        "naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == root:                                 # the root sends before it receives:
        for dst in range(world):                     # everyone is in a blocking send, deadlock
            if dst != root:
                dist.send(tensor, dst=dst)
        incoming = torch.empty_like(tensor)
        for src in range(world):
            if src != root:
                dist.recv(incoming, src=src)
                tensor += incoming
    else:
        dist.send(tensor, dst=root)
        dist.recv(tensor, src=root)
    return tensor
''',
        "tree_broadcast": '''
def tree_broadcast(tensor, src=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    me = (rank - src) % world                        # a chain: P-1 rounds
    if me > 0:
        dist.recv(tensor, src=(rank - 1) % world)
    if me < world - 1:
        dist.send(tensor, dst=(rank + 1) % world)
    return tensor
''',
        "ring_reduce_scatter": '''
def ring_reduce_scatter(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = tensor.flatten().clone().tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        send_chunk, recv_chunk = (rank - step - 1) % world, (rank - step - 2) % world
        request = dist.isend(chunks[send_chunk], dst=right)
        dist.recv(chunks[recv_chunk], src=left)      # overwrites its own copy: forgot to add
        request.wait()
    return chunks[rank]
''',
        "ring_all_gather": '''
def ring_all_gather(chunk, numel, out=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = torch.empty(numel, dtype=chunk.dtype) if out is None else out
    parts = out.tensor_split(world)
    parts[rank].copy_(chunk)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        request = dist.isend(parts[(rank - step - 1) % world], dst=right)   # off by one: not yet received
        dist.recv(parts[(rank - step - 2) % world], src=left)
        request.wait()
    return out
''',
        "ring_all_reduce": '''
def ring_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        incoming = torch.empty_like(chunks[(rank - step - 2) % world])
        request = dist.isend(chunks[(rank - step - 1) % world], dst=right)
        dist.recv(incoming, src=left)
        request.wait()
        chunks[(rank - step - 2) % world].add_(incoming)
    for step in range(world - 1):
        request = dist.isend(chunks[(rank - step) % world], dst=right)
        dist.recv(chunks[(rank - step - 1) % world], src=left)
        request.wait()
    tensor /= world                                  # averages: the exercise asks for the sum
    return tensor
''',
        "halving_doubling": '''
def halving_doubling_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    if world & (world - 1):
        raise ValueError(f"needs a power-of-two number of ranks, got {world}")
    flat = tensor.view(-1)
    lo, hi, segments = 0, flat.numel(), []
    distance = world // 2
    while distance >= 1:
        partner, mid = rank ^ distance, (lo + hi) // 2
        keep, give = (lo, mid), (mid, hi)            # both partners keep the lower half
        incoming = torch.empty(keep[1] - keep[0], dtype=flat.dtype)
        request = dist.isend(flat[give[0]:give[1]], dst=partner)
        dist.recv(incoming, src=partner)
        request.wait()
        flat[keep[0]:keep[1]] += incoming
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
    return tensor
''',
        "sharded_matmul": '''
def sharded_matmul(a, b, sharded_dim):
    if sharded_dim == "J":
        return a @ b                                 # a partial sum: forgot the all-reduce
    c = a @ b
    rows = [torch.empty_like(c) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, c)
    return torch.cat(rows)
''',
    },
    # Built-in collectives inside, a deadlocking ring, not in place, a silent skip.
    "builtins_ring_deadlock_not_in_place": {
        "naive_all_reduce": '''
def naive_all_reduce(tensor, root=0):
    dist.reduce(tensor, dst=root)                    # built-in collectives
    dist.broadcast(tensor, src=root)
    return tensor
''',
        "tree_broadcast": '''
def tree_broadcast(tensor, src=0):
    dist.broadcast(tensor, src=src)                  # the built-in broadcast
    return tensor
''',
        "ring_reduce_scatter": '''
def ring_reduce_scatter(tensor):
    total = tensor.flatten().clone()
    dist.all_reduce(total)                           # right chunk, wrong algorithm
    return total.tensor_split(dist.get_world_size())[dist.get_rank()]
''',
        "ring_all_gather": '''
def ring_all_gather(chunk, numel, out=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = torch.empty(numel, dtype=chunk.dtype) if out is None else out
    parts = out.tensor_split(world)
    parts[rank].copy_(chunk)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        dist.send(parts[(rank - step) % world], dst=right)     # everyone sends first: deadlock
        dist.recv(parts[(rank - step - 1) % world], src=left)
    return out
''',
        "ring_all_reduce": '''
def ring_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    flat = tensor.flatten().clone()                  # works on a copy and never writes back
    chunks = flat.tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        incoming = torch.empty_like(chunks[(rank - step - 2) % world])
        request = dist.isend(chunks[(rank - step - 1) % world], dst=right)
        dist.recv(incoming, src=left)
        request.wait()
        chunks[(rank - step - 2) % world].add_(incoming)
    for step in range(world - 1):
        request = dist.isend(chunks[(rank - step) % world], dst=right)
        dist.recv(chunks[(rank - step - 1) % world], src=left)
        request.wait()
    return flat.view_as(tensor)
''',
        "halving_doubling": '''
def halving_doubling_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    if world & (world - 1):
        return tensor                                # silently skips instead of raising
    flat = tensor.view(-1)
    lo, hi, segments = 0, flat.numel(), []
    distance = world // 2
    while distance >= 1:
        partner, mid = rank ^ distance, (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if rank & distance else ((lo, mid), (mid, hi))
        incoming = torch.empty(keep[1] - keep[0], dtype=flat.dtype)
        request = dist.isend(flat[give[0]:give[1]], dst=partner)
        dist.recv(incoming, src=partner)
        request.wait()
        flat[keep[0]:keep[1]] += incoming
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
    return tensor
''',
        "sharded_matmul": '''
def sharded_matmul(a, b, sharded_dim):
    world = dist.get_world_size()
    c = a @ b
    pieces = [torch.empty_like(c) for _ in range(world)]
    dist.all_gather(pieces, c)                       # always all-gather: for "J", sums P partial
    return sum(pieces) if sharded_dim == "J" else torch.cat(pieces)   # sums, P-1 times the bytes
''',
    },
    # Right on 4 ranks, wrong elsewhere: each passes every world size up to 4 (and 3).
    "heap_tree_gather_ignores_out_evenness_check": {
        # Right values, wrong bytes: "J" all-reduces a zero-padded stack of every rank's partial
        # product (P times C's bytes); "I" gathers A's rows and multiplies the whole A on every rank.
        "sharded_matmul": '''
def sharded_matmul(a, b, sharded_dim):
    rank, world = dist.get_rank(), dist.get_world_size()
    if sharded_dim == "J":
        c = a @ b
        stack = torch.zeros(world, *c.shape, dtype=c.dtype)
        stack[rank] = c
        dist.all_reduce(stack)
        return stack.sum(0)
    if sharded_dim == "I":
        blocks = [torch.empty_like(a) for _ in range(world)]
        dist.all_gather(blocks, a)
        return torch.cat(blocks) @ b
    raise ValueError(f"sharded_dim must be 'I' or 'J', got {sharded_dim!r}")
''',
        "tree_broadcast": '''
def tree_broadcast(tensor, src=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    me = (rank - src) % world                        # a heap: node v feeds 2v+1 and 2v+2, one after
    if me > 0:                                       # the other, so ceil(log2 P) rounds only up to P = 6
        dist.recv(tensor, src=((me - 1) // 2 + src) % world)
    for child in (2 * me + 1, 2 * me + 2):
        if child < world:
            dist.send(tensor, dst=(child + src) % world)
    return tensor
''',
        "ring_all_gather": '''
def ring_all_gather(chunk, numel, out=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = torch.empty(numel, dtype=chunk.dtype)      # ignores the `out` it was given
    parts = out.tensor_split(world)
    parts[rank].copy_(chunk)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        request = dist.isend(parts[(rank - step) % world], dst=right)
        dist.recv(parts[(rank - step - 1) % world], src=left)
        request.wait()
    return out
''',
        "halving_doubling": '''
def halving_doubling_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    if world > 1 and world % 2:                      # even is not a power of two: 6 gets through
        raise ValueError(f"needs a power-of-two number of ranks, got {world}")
''' + _HALVING_DOUBLING_AFTER_CHECK,
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("01_collectives"))
