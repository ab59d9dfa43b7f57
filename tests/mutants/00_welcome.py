"""Plausible wrong answers for 00_welcome. Each mutant replaces whole solution cells
(keyed by grade_id); the graded cell ``<grade_id>_tests`` must then lose points."""

import equals_everything

MUTANTS = {
    # pass_right as a chain: rank 0 sends first, every other rank waits for its left neighbour
    # (no deadlock, but P rounds where every rank could send at once).
    "chain_that_waits_for_rank_0": {
        "pass_right": '''
def pass_right(tensor):
    """Send `tensor` to rank (r+1) % P; return the tensor (same shape and dtype) received from rank (r-1) % P."""
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    if rank == 0:                    # rank 0 starts the ring, so nobody deadlocks
        dist.send(tensor, dst=1 % world)
        dist.recv(received, src=(rank - 1) % world)
    else:                            # everyone else waits for the left neighbour, then passes on
        dist.recv(received, src=(rank - 1) % world)
        dist.send(tensor, dst=(rank + 1) % world)
    return received
''',
    },
    "days_no_latency_deadlock": {
        "training_time": '''
def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    return total_flops / (n_gpus * flops_per_second * utilization) / 86400   # days, not years

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return round(total_flops / (flops_per_second * utilization * days * 86400))  # not always up
''',
        "transfer_time": '''
def transfer_seconds(nbytes, bandwidth, latency):
    return nbytes / bandwidth   # forgot the latency

def across_vs_inside(nbytes):
    ib, nv = cost.LINKS["infiniband"], cost.LINKS["nvlink"]
    return transfer_seconds(nbytes, ib.bandwidth, ib.latency) / transfer_seconds(nbytes, nv.bandwidth, nv.latency)
''',
        "pass_right": '''
def pass_right(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    dist.send(tensor, dst=(rank + 1) % world)      # everyone sends first: deadlock
    dist.recv(received, src=(rank - 1) % world)
    return received
''',
    },
    "no_utilization_hardcoded_ratio_wrong_neighbour": {
        "training_time": '''
def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    return total_flops / (n_gpus * flops_per_second) / SECONDS_PER_YEAR   # ignores utilization

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return math.ceil(total_flops / (flops_per_second * days * 86400))
''',
        "transfer_time": '''
def transfer_seconds(nbytes, bandwidth, latency):
    return latency + nbytes / bandwidth

def across_vs_inside(nbytes):
    return 400e9 / 50e9   # the bandwidth ratio: wrong for small messages
''',
        "pass_right": '''
def pass_right(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    request = dist.isend(tensor, dst=(rank - 1) % world)   # the wrong neighbour
    dist.recv(received, src=(rank + 1) % world)
    request.wait()
    return received
''',
    },
    "rounding_bits_builtin_collective": {
        "training_time": '''
def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):
    return total_flops / (n_gpus * flops_per_second * utilization) / SECONDS_PER_YEAR

def gpus_needed(total_flops, flops_per_second, days, utilization=1.0):
    return int(total_flops / (flops_per_second * utilization * days * 86400)) + 1  # one too many when it divides
''',
        "transfer_time": '''
def transfer_seconds(nbytes, bandwidth, latency):
    return latency + nbytes * 8 / bandwidth   # bits over bytes per second

def across_vs_inside(nbytes):
    ib, nv = cost.LINKS["infiniband"], cost.LINKS["nvlink"]
    return transfer_seconds(nbytes, ib.bandwidth, ib.latency) / transfer_seconds(nbytes, nv.bandwidth, nv.latency)
''',
        "pass_right": '''
def pass_right(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    everything = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(everything, tensor)            # a built-in collective does the work
    return everything[(rank - 1) % world]
''',
    },
}


# Right answers written another way than the solution, where the spec allows it: each must keep
# every point (tests/mutation_run.py). The other parities: odd ranks first, or even ranks first with the last rank receiving first at odd P (3 rounds).
EQUIVALENTS = {
    'pr_odd_first': {
        'pass_right': '''
def pass_right(tensor):
    """Send `tensor` to rank (r+1) % P; return the tensor (same shape and dtype) received from rank (r-1) % P."""
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    if rank % 2 == 1:            # odd ranks send first, even ranks receive first
        dist.send(tensor, dst=(rank + 1) % world)
        dist.recv(received, src=(rank - 1) % world)
    else:
        dist.recv(received, src=(rank - 1) % world)
        dist.send(tensor, dst=(rank + 1) % world)
    return received
''',
    },
    'pr_even_first_last_rank_receives_first': {
        'pass_right': '''
def pass_right(tensor):
    """Send `tensor` to rank (r+1) % P; return the tensor (same shape and dtype) received from rank (r-1) % P."""
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    if rank % 2 == 0 and not (world % 2 == 1 and rank == world - 1 and world > 1):  # odd P: the last (even) rank pairs like an odd one
        dist.send(tensor, dst=(rank + 1) % world)
        dist.recv(received, src=(rank - 1) % world)
    else:
        dist.recv(received, src=(rank - 1) % world)
        dist.send(tensor, dst=(rank + 1) % world)
    return received
''',
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("00_welcome"))
