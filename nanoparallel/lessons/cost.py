"""The alpha-beta cost model of collective communication, and hardware presets.

Sending one message of n bytes over a link costs ``alpha + n / beta``: a fixed latency alpha
(software included) plus the bytes over the bandwidth beta. A collective is a sequence of
such message rounds, so its time is

    time = steps * alpha + bytes_on_busiest_rank / beta

and every algorithm below is one pair (steps, bytes): `collective_steps` and
`busiest_rank_bytes`. Formulas after Thakur, Rabenseifner &
Gropp (2005), "Optimization of collective communication operations in MPICH", section 4.

Notation, as in the course:

    P   ranks (world_size)
    N   bytes of the full message: for all_gather the gathered output, for reduce_scatter
        the full input, for scatter / gather the full buffer at the root
    a   alpha = `Link.latency`, seconds per message
    b   beta  = `Link.bandwidth`, bytes per second

The time to add up the reductions' inputs is ignored (communication only).

    algorithm          broadcast, reduce       scatter, gather      all_gather, reduce_scatter
    naive              (P-1)(a + N/b)          (P-1)(a + N/(P b))   gather + broadcast (1)
    tree (binomial)    ceil(lg P)(a + N/b)     ceil(lg P) a         gather + broadcast (1)
                                                + (P-1)/P N/b
    ring               linear scatter          as naive             (P-1)(a + N/(P b))
                        + all_gather (2)
    halving_doubling   tree scatter            as tree              lg P a + (P-1)/P N/b
                        + all_gather (2)

    all_reduce: naive and tree reduce + broadcast; ring 2(P-1)(a + N/(P b));
    halving_doubling 2 lg P a + 2(P-1)/P N/b.
    (1) reduce_scatter = reduce + scatter.   (2) reduce = reduce_scatter + gather.

halving_doubling is recursive halving / doubling (Rabenseifner). For P not a power of two,
the ranks beyond the largest power of two p' first fold their data into a partner and get
the result back at the end: the halving / doubling part runs on p' ranks (lg p' rounds) and
costs one extra (a + N/b), two for all_reduce. P = 1 costs nothing.

    import numpy as np
    from nanoparallel.lessons.cost import LINKS, collective_time
    collective_time("all_reduce", 4e6, 8, LINKS["nvlink"])            # seconds
    collective_time("all_reduce", np.logspace(0, 9), 8, LINKS["nvlink"], "tree")   # a curve
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

# Every collective's cost in this model is a `_Cost`: making one raises this audit event, which
# the grading guard counts where notebook code cannot reset the count (an exercise that must
# derive a number, not look it up here: `nanoparallel.grading.checks.cost_model_unused`).
RAN_EVENT = "nanoparallel.cost_model"
_audit = sys.audit


@dataclass(frozen=True)
class Link:
    """One kind of connection between two GPUs, as seen by one GPU."""
    name: str          # e.g. "NVLink / NVSwitch (inside a node)"
    bandwidth: float   # beta: bytes per second, one direction, per GPU
    latency: float     # alpha: seconds per message, software included

    def time(self, nbytes):
        """Seconds to send one message of `nbytes` bytes: alpha + n / beta."""
        return self.latency + _as_bytes(nbytes) / self.bandwidth


# Order-of-magnitude presets: a round ~400 GB/s per GPU inside a node (between
# an A100's 300 and an H100's 450; per generation: ACCELERATORS[...].nvlink) against
# ~25-50 GB/s between nodes. That gap of ~10x is what decides where each parallelism goes;
# the exact numbers vary by system and message size.
LINKS: dict[str, Link] = {
    "nvlink": Link("NVLink / NVSwitch (inside a node)", bandwidth=400e9, latency=3e-6),
    "pcie": Link("PCIe Gen5 x16", bandwidth=64e9, latency=5e-6),
    "infiniband": Link("InfiniBand NDR 400 Gb/s (across nodes)", bandwidth=50e9, latency=5e-6),
    "infiniband_hdr": Link("InfiniBand HDR 200 Gb/s (across nodes)", bandwidth=25e9,
                           latency=5e-6),
}


@dataclass(frozen=True)
class Accelerator:
    name: str
    flops: float        # dense bf16 FLOP/s, no sparsity
    memory: float       # bytes of HBM
    nvlink: float = 0   # NVLink bytes/s per GPU, one direction (half the "bidirectional" figure)


# NVLink per GPU and direction grows by generation: NVLink 3 (A100) 300 GB/s, NVLink 4 (H100,
# H200) 450 GB/s, NVLink 5 (B200) 900 GB/s. LINKS["nvlink"] keeps a round 400.
ACCELERATORS: dict[str, Accelerator] = {
    "B200": Accelerator("NVIDIA B200", flops=2.25e15, memory=192e9, nvlink=900e9),   # notebook 00's GPU
    "H100": Accelerator("NVIDIA H100 SXM", flops=989e12, memory=80e9, nvlink=450e9),
    "H200": Accelerator("NVIDIA H200 SXM", flops=989e12, memory=141e9, nvlink=450e9),
    "A100": Accelerator("NVIDIA A100 SXM", flops=312e12, memory=80e9, nvlink=300e9),
}

ALGORITHMS = ("naive", "tree", "ring", "halving_doubling")
COLLECTIVES = ("broadcast", "reduce", "scatter", "gather", "all_gather", "reduce_scatter",
               "all_reduce")


@dataclass(frozen=True)
class _Cost:
    """A collective in the model: `steps` alphas, `share` * N bytes through the busiest rank
    (the bandwidth term), `traffic` * N bytes over all links together."""
    steps: int
    share: float
    traffic: float

    def __post_init__(self):
        _audit(RAN_EVENT)

    def __add__(self, other: _Cost) -> _Cost:
        # Composite algorithms run their phases one after the other.
        return _Cost(self.steps + other.steps, self.share + other.share,
                     self.traffic + other.traffic)


def _naive(P: int) -> dict[str, _Cost]:
    whole = _Cost(P - 1, P - 1, P - 1)                # root sends all N to each rank in turn
    part = _Cost(P - 1, (P - 1) / P, (P - 1) / P)     # root sends each rank its N/P
    return {"broadcast": whole, "reduce": whole, "scatter": part, "gather": part,
            "all_gather": part + whole, "reduce_scatter": whole + part,
            "all_reduce": whole + whole}


def _binomial(P: int) -> tuple[_Cost, _Cost]:
    """Binomial tree: (broadcast or reduce, scatter or gather)."""
    rounds = (P - 1).bit_length()                     # ceil(log2 P): the tree doubles per round
    whole = _Cost(rounds, rounds, P - 1)
    # In scatter, the chunk for rank r hops once per set bit of r; the root's link carries
    # N/2 + N/4 + ... = (P-1)/P N.
    part = _Cost(rounds, (P - 1) / P, _set_bits_below(P) / P)
    return whole, part


def _set_bits_below(P: int) -> int:
    """Sum of popcount(r) for 0 <= r < P, in O(log P) so big clusters stay cheap to plot."""
    total, k = 0, 0
    while (1 << k) < P:
        period = 1 << (k + 1)                         # bit k is set in the upper half of each
        total += (P // period) * (1 << k) + max(0, P % period - (1 << k))
        k += 1
    return total


def _tree(P: int) -> dict[str, _Cost]:
    whole, part = _binomial(P)
    return {"broadcast": whole, "reduce": whole, "scatter": part, "gather": part,
            "all_gather": part + whole, "reduce_scatter": whole + part,
            "all_reduce": whole + whole}


def _ring(P: int) -> dict[str, _Cost]:
    ring = _Cost(P - 1, (P - 1) / P, P - 1)           # P-1 rounds, every rank passes N/P on
    part = _naive(P)["scatter"]
    return {"broadcast": part + ring, "reduce": ring + part, "scatter": part, "gather": part,
            "all_gather": ring, "reduce_scatter": ring, "all_reduce": ring + ring}


def _halving_doubling(P: int) -> dict[str, _Cost]:
    p2 = 1 << (P.bit_length() - 1)                    # largest power of two <= P
    extra = P - p2
    # Ranks beyond p2 hand their whole message to a partner (and wait for the result).
    fold = _Cost(1, 1, extra) if extra else _Cost(0, 0, 0)
    # Each round halves (or doubles) the piece exchanged with the partner at distance 2^k.
    half = _Cost(p2.bit_length() - 1, (p2 - 1) / p2, p2 - 1) + fold
    _, part = _binomial(P)
    return {"broadcast": part + half, "reduce": half + part, "scatter": part, "gather": part,
            "all_gather": half, "reduce_scatter": half, "all_reduce": half + half}


_ALGORITHM_TABLES = {"naive": _naive, "tree": _tree, "ring": _ring,
                     "halving_doubling": _halving_doubling}


def _cost(op: str, world_size: int, algorithm: str) -> _Cost:
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r}; choose one of {', '.join(COLLECTIVES)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) \
            or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    return _ALGORITHM_TABLES[algorithm](int(world_size))[op]


def _as_bytes(nbytes):
    """A float for a scalar, an array for an array; negative sizes are refused."""
    n = np.asarray(nbytes, dtype=float)
    if np.any(np.isnan(n)) or np.any(n < 0):
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    return float(n) if n.ndim == 0 else n


def collective_time(op: str, nbytes, world_size: int, link: Link, algorithm: str = "ring"):
    """Seconds for collective `op` on an N-byte message across P ranks: steps a + bytes / b.

    `nbytes` may be a numpy array, to draw a curve.
    """
    cost = _cost(op, world_size, algorithm)
    return cost.steps * link.latency + cost.share * _as_bytes(nbytes) / link.bandwidth


def collective_steps(op: str, world_size: int, algorithm: str = "ring") -> int:
    """Sequential message rounds: how many times the latency alpha is paid."""
    return _cost(op, world_size, algorithm).steps


def busiest_rank_bytes(op: str, nbytes, world_size: int, algorithm: str = "ring"):
    """Bytes through the busiest rank's link one message after another: the numerator of the
    bandwidth term. A rank that sends while it receives (the ring, halving-doubling) counts the
    bytes it sends; a root that first receives and then sends (naive, tree) counts both: the
    naive all_reduce's root receives (P-1)N, then sends (P-1)N, so 2(P-1)N."""
    return _cost(op, world_size, algorithm).share * _as_bytes(nbytes)


def total_traffic(op: str, nbytes, world_size: int, algorithm: str = "ring"):
    """Bytes crossing all links together, every message counted once."""
    return _cost(op, world_size, algorithm).traffic * _as_bytes(nbytes)


def send_time(nbytes, link: Link):
    """Seconds for one point-to-point message: alpha + n / beta."""
    return link.time(nbytes)


def crossover_size(op: str, world_size: int, link: Link, algorithm_a: str, algorithm_b: str,
                   lo: float = 1, hi: float = 1 << 40) -> float | None:
    """The message size in bytes at which `algorithm_a` and `algorithm_b` cost the same.

    Bisection on a log scale over [lo, hi]; None where one is never cheaper than the other
    there (including when both cost the same everywhere). Below the crossover the algorithm
    with fewer steps wins (latency-bound), above it the one with fewer bytes (bandwidth-bound).
    """
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo!r}, hi={hi!r}")

    def gap(n: float) -> float:
        return (collective_time(op, n, world_size, link, algorithm_a)
                - collective_time(op, n, world_size, link, algorithm_b))

    g_lo, g_hi = gap(lo), gap(hi)
    if g_lo == 0:
        return None if g_hi == 0 else float(lo)
    if g_hi == 0:
        return float(hi)
    if (g_lo > 0) == (g_hi > 0):
        return None
    log_lo, log_hi = math.log(lo), math.log(hi)
    for _ in range(100):                              # 2^-100 of the log range: exact enough
        mid = (log_lo + log_hi) / 2
        if (gap(math.exp(mid)) > 0) == (g_lo > 0):
            log_lo = mid
        else:
            log_hi = mid
    return math.exp((log_lo + log_hi) / 2)
