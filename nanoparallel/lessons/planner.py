"""What notebook 07's planner is made of: a model, a cluster and a parallel plan as data, the
real run it is checked on, and the search over plans. The memory and time formulas are the
learner's; `search` only enumerates plans and ranks them with the functions it is given.

    plans = search(NEOX_20B, NEOX_CLUSTER, global_batch=1536, memory=my_memory, time=my_time)
    plans[0].plan, plans[0].seconds            # the fastest plan that fits

GPT-NeoX-20B (Black et al. 2022): 44 layers, hidden 6144, 64 heads, a 50,432-token vocabulary
(the embedding matrix, padded), 2048-token sequences, trained on 12 machines of 8
A100-SXM4-40GB with TP = 2, PP = 4, DP = 12, ZeRO-1, micro-batches of 4 and 32 accumulation
steps (1536 sequences per step; the paper rounds to ~3.15M tokens, 1538 sequences). Its section 3
reports 117 TFLOP/s per GPU; the preset's `hfu` is that over the A100's 312 TFLOP/s.

Ranks are laid out with PP outermost and TP innermost (Megatron's tp-dp-pp order, DeepSpeed's
pipe, data, model axes): rank = (i_p * dp + i_d) * tp + i_t.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ModelSpec:
    name: str
    n_layer: int
    hidden: int
    heads: int
    vocab: int
    seq: int

    @property
    def params(self) -> int:
        """12 L h^2 for the blocks (attention 4h^2, MLP 8h^2) plus untied input and output
        embeddings, 2 V h; biases and LayerNorms left out (under 0.1 % at these sizes)."""
        return 12 * self.n_layer * self.hidden ** 2 + 2 * self.vocab * self.hidden


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    machines: int
    gpus_per_machine: int
    memory: float             # bytes per GPU
    flops: float              # peak dense bf16/fp16 FLOP/s per GPU
    hfu: float                # hardware FLOPs utilisation: the fraction of peak FLOP/s executed,
                              # recomputed FLOPs included (8 Psi per token with recomputation)
    nvlink: float             # bytes/s per GPU per direction, inside a machine
    nvlink_latency: float     # seconds
    ib_per_machine: float     # bytes/s per direction, all of a machine's HCAs together
    ib_latency: float         # seconds

    @property
    def gpus(self) -> int:
        return self.machines * self.gpus_per_machine

    @property
    def ib_per_gpu(self) -> float:
        """What one GPU gets when all GPUs of its machine talk across machines at once."""
        return self.ib_per_machine / self.gpus_per_machine


@dataclass(frozen=True)
class Plan:
    tp: int                 # tensor-parallel ranks (with sequence parallelism)
    pp: int                 # pipeline stages (1F1B)
    dp: int                 # data-parallel replicas
    zero: int               # ZeRO stage over the data-parallel group: 0, 1, 2 or 3
    micro_batch: int        # sequences per micro-batch (b)
    n_micro: int            # micro-batches per replica per step (m, gradient accumulation)
    recompute: bool = False  # full activation recomputation (keep only each layer's input)

    def describe(self) -> str:
        return (f"TP {self.tp} x PP {self.pp} x DP {self.dp}, ZeRO-{self.zero}, b = {self.micro_batch}, "
                f"m = {self.n_micro}{', recompute' if self.recompute else ''}")


@dataclass(frozen=True)
class Ranked:
    plan: Plan
    memory: dict          # bytes per GPU, by part
    time: dict            # seconds per step, by part

    @property
    def bytes(self) -> float:
        return sum(self.memory.values())

    @property
    def seconds(self) -> float:
        return sum(self.time.values())


NEOX_20B = ModelSpec("GPT-NeoX-20B", n_layer=44, hidden=6144, heads=64, vocab=50432, seq=2048)
# 12 Supermicro AS-4124GO-NART: 8 A100-SXM4-40GB each (312 TFLOP/s bf16, NVLink 3 at 300 GB/s
# per direction), four 200 Gb/s HDR ConnectX-6 HCAs per machine (4 x 25 GB/s).
# hfu: 117 TFLOP/s per GPU reported (Black et al. 2022, section 3) over the A100's 312 TFLOP/s.
NEOX_CLUSTER = ClusterSpec("12 x 8 A100-40GB", machines=12, gpus_per_machine=8, memory=40e9, flops=312e12,
                           hfu=117 / 312, nvlink=300e9, nvlink_latency=3e-6, ib_per_machine=100e9, ib_latency=5e-6)
NEOX_PLAN = Plan(tp=2, pp=4, dp=12, zero=1, micro_batch=4, n_micro=32, recompute=True)

MODELS = {m.name: m for m in (
    NEOX_20B,
    ModelSpec("GPT-3 175B", n_layer=96, hidden=12288, heads=96, vocab=50257, seq=2048),
    ModelSpec("LLaMA-2 7B (as a GPT)", n_layer=32, hidden=4096, heads=32, vocab=32000, seq=4096),
)}
CLUSTERS = {c.name: c for c in (
    NEOX_CLUSTER,
    ClusterSpec("64 x 8 H100-80GB", machines=64, gpus_per_machine=8, memory=80e9, flops=989e12, hfu=0.4,
                nvlink=450e9, nvlink_latency=3e-6, ib_per_machine=400e9, ib_latency=5e-6),
)}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_plans(model: ModelSpec, cluster: ClusterSpec, global_batch: int,
                    micro_batches=(1, 2, 4, 8, 16)) -> list[Plan]:
    """Every plan that uses all the GPUs and divides the work evenly: TP a power of two dividing
    the heads, PP dividing the layers, DP the rest; a micro-batch size dividing each replica's
    share of the global batch; every ZeRO stage; with and without recomputation. ZeRO-2 and
    ZeRO-3 only without a pipeline: sharded gradients need a reduce-scatter after every
    micro-batch, and ZeRO-3 gathers the parameters again for every micro-batch, so DeepSpeed's
    pipeline engine refuses both ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"),
    which is why GPT-NeoX-20B used ZeRO-1."""
    plans = []
    for tp in (d for d in _divisors(cluster.gpus) if d & (d - 1) == 0 and model.heads % d == 0):
        for pp in (d for d in _divisors(model.n_layer) if (cluster.gpus // tp) % d == 0):
            dp = cluster.gpus // (tp * pp)
            if global_batch % dp:
                continue
            for b in (b for b in micro_batches if (global_batch // dp) % b == 0):
                for zero in (range(4) if pp == 1 else range(2)):
                    for recompute in (False, True):
                        plans.append(Plan(tp, pp, dp, zero, b, global_batch // (dp * b), recompute))
    return plans


def search(model: ModelSpec, cluster: ClusterSpec, global_batch: int,
           memory: Callable[[ModelSpec, Plan], dict],
           time: Callable[[ModelSpec, ClusterSpec, Plan], dict]) -> list[Ranked]:
    """The plans that fit in a GPU's memory by `memory`, fastest first by `time` (ties: the
    lower ZeRO stage, then less memory)."""
    ranked = []
    for plan in candidate_plans(model, cluster, global_batch):
        mem = memory(model, plan)
        if sum(mem.values()) <= cluster.memory:
            ranked.append(Ranked(plan, mem, time(model, cluster, plan)))
    return sorted(ranked, key=lambda r: (round(r.seconds, 9), r.plan.zero, r.bytes))
