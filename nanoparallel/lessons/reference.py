"""Single-process training: the answer every parallel version in the course must reproduce.

    from nanoparallel.lessons.models import MLPConfig, TinyMLP, make_mlp_batch
    from nanoparallel.lessons.reference import follow_reference, train_reference, split_batch
    cfg = MLPConfig()
    batches = [make_mlp_batch(8, cfg, seed=s) for s in range(3)]
    run = train_reference(TinyMLP(cfg), batches, optimizer="adam")
    run.states[-1]   # parameters after the last step; a DDP run must match it on every rank
    run.losses       # one loss per optimizer step
    split_batch(batches[0], 4)   # the shard each of 4 data-parallel ranks trains on
    rows_by_rank(batches, 4)     # the batches as each of 4 ranks holds them: its own rows only
    fresh_batches(lambda seed: make_mlp_batch(8, cfg, seed=seed), TinyMLP(cfg), 3)   # seeds no rank can guess
    follow_reference(TinyMLP(cfg), batches, held)   # step i from held[i], a parallel run's parameters then

Data parallelism is exact, not approximate: P ranks that each take 1/P of the batch and average
their gradients take the same step as one process on the whole batch (notebook 02). So is
gradient accumulation over k micro-batches, which is why `accumulate` divides each loss by k.
Same inputs, same process -> bit-identical outputs; across processes compare with a tolerance.
"""
from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.nn import functional as F

from nanoparallel.lessons.models import TinyGPT

Batch = tuple[torch.Tensor, ...]  # (inputs, targets), batch along dim 0


@dataclass
class ReferenceRun:
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)  # after each step
    losses: list[float] = field(default_factory=list)  # each step's loss, before its update
    grads: list[dict[str, torch.Tensor]] = field(default_factory=list)  # each step's, by name


def loss_fn(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Scalar training loss: the model's own cross-entropy for `TinyGPT`, MSE otherwise.

    Both are means over the batch (over B*T tokens for the GPT), so equal shards' losses
    average to the whole batch's loss, and so do their gradients.
    """
    inputs, targets = batch
    if isinstance(model, TinyGPT):
        _, loss = model(inputs, targets)
        return loss
    return F.mse_loss(model(inputs), targets)


def _make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)  # default betas (0.9, 0.999), eps 1e-8
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise ValueError(f"optimizer must be 'adam' or 'sgd', got {name!r}")


def train_reference(model: nn.Module, batches: list[Batch], steps: int | None = None,
                    lr: float = 1e-2, optimizer: str = "adam", accumulate: int = 1,
                    shards: int = 1) -> ReferenceRun:
    """Train a deep copy of `model` in one process and record every step.

    Step i accumulates gradients over micro-batches batches[i*accumulate : (i+1)*accumulate],
    each loss divided by `accumulate` so the gradient is the mean over the big batch, then takes
    one optimizer step. With `shards` = P, each batch's gradient is the mean of the gradients of
    its P shards' own losses (`split_batch`), what P data-parallel ranks compute: the same as the
    whole batch's unless the samples of one forward meet (`models.Centred`, batch normalization).
    `steps` defaults to len(batches) // accumulate; more steps than that cycle through `batches`
    again (pass one batch and steps=20 to fit a fixed batch).

    Returns a `ReferenceRun`: `states[i]` is a cloned state_dict after step i, `losses[i]` the
    big-batch loss at step i, measured before its update, `grads[i]` the gradients step i applied
({name: tensor}; a tied weight appears once). `model` itself is left untouched.
    """
    if accumulate < 1:
        raise ValueError(f"accumulate must be >= 1, got {accumulate}")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if not batches:
        raise ValueError("batches is empty: pass at least one (inputs, targets) batch")
    if steps is None:
        steps = len(batches) // accumulate
        if steps == 0:
            raise ValueError(f"{len(batches)} batches is fewer than accumulate={accumulate}")

    model = copy.deepcopy(model)  # deepcopy keeps tied weights tied
    model.train()
    opt = _make_optimizer(optimizer, model.parameters(), lr)
    run = ReferenceRun()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for micro in range(accumulate):
            batch = batches[(step * accumulate + micro) % len(batches)]
            for piece in split_batch(batch, shards) if shards > 1 else [batch]:
                loss = loss_fn(model, piece) / (accumulate * shards)
                loss.backward()  # gradients add up across micro-batches (and shards)
                step_loss += loss.item()
        run.grads.append({k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                          for k, p in model.named_parameters()})
        opt.step()
        run.losses.append(step_loss)
        run.states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return run


def follow_reference(model: nn.Module, batches: list[Batch], held: list[dict[str, torch.Tensor]],
                     lr: float = 1e-2, optimizer: str = "adam") -> ReferenceRun:
    """One process's steps taken from the parameters a parallel run held before each of them.

    Before step i, a deep copy of `model` takes the parameters held[i] ({name: whole tensor}, as
    `named_parameters` names them; held[0] is the model's own when both runs start together),
    computes batches[i]'s loss and gradients there and takes one optimizer step, its optimizer
    state (Adam's moments) carried from step to step as in `train_reference`. Returns a
    `ReferenceRun`: `grads[i]` and `losses[i]` at held[i], `states[i]` after the step from held[i].

    Why not `train_reference`'s own trajectory: two runs that sum in different orders round
    differently, and Adam scales some of that rounding up to a whole step of lr (where a gradient
    is zero up to rounding: checks.assert_close_after_adam). The entries it moves change every
    later gradient a little, and Adam divides each entry's change by that entry's gradient size,
    so after a few steps both runs' parameters differ by much more than any one step's rounding.
    Against this reference a parallel run's step i differs from one process's by the rounding of
    step i alone, and every step can be compared as tightly as the first.
    """
    if len(held) != len(batches):
        raise ValueError(f"{len(batches)} batches but {len(held)} sets of held parameters: one per step")
    model = copy.deepcopy(model)  # deepcopy keeps tied weights tied
    model.train()
    opt = _make_optimizer(optimizer, model.parameters(), lr)
    params = dict(model.named_parameters())
    run = ReferenceRun()
    for batch, start in zip(batches, held):
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(start[name])
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        loss.backward()
        run.grads.append({k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                          for k, p in params.items()})
        opt.step()
        run.losses.append(loss.item())
        run.states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return run


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """Split every tensor of `batch` along dim 0 into `parts` contiguous, equal pieces.

    Piece r is rank r's shard in data parallelism, or micro-batch r in accumulation and
    pipelining. Unequal pieces would weight samples unequally when shard losses are averaged,
    so a batch size that `parts` does not divide is an error.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    size = batch[0].size(0)
    for t in batch:
        if t.size(0) != size:
            raise ValueError(f"batch tensors disagree on dim 0: {[t.size(0) for t in batch]}")
    if size % parts != 0:
        raise ValueError(f"batch size {size} is not divisible by parts={parts}: "
                         f"each part would not get the same number of samples")
    n = size // parts
    # clones, not views: a shard pickled to a rank carries only its own samples
    return [tuple(t[r * n:(r + 1) * n].clone() for t in batch) for r in range(parts)]


def fresh_batches(make_batch, model: nn.Module, steps: int, optimizer: str = "adam",
                  shards: int = 1, tiny: float = 1e-6, attempts: int = 1000) -> list[Batch]:
    """`steps` batches `make_batch(seed)`, each seed drawn afresh, so that no rank can rebuild the
    rows it is not handed (`own_rows`) by trying seeds. Drawn again until training `model` on
    them in one process (`train_reference`, with `optimizer` and `shards`) takes no gradient
    element in (0, `tiny`) in size.

    Why: Adam steps each element by about lr * sign(g) at first, so a gradient that is almost
    zero, which the ranks' sum in another order rounds differently, can step the other way, and a
    right answer would miss the tolerance. Measured, 3 or 8 ranks' sums against one process, two
    Adam steps of an MLP with 24 hidden units: 2 runs in 150 missed 1e-5 without the redraw, none
    in 150 with it; about one draw in two is kept (one in 13 for the default MLPConfig). The tiny
    GPT and the deep MLPs always hold elements near 1e-14: their checks keep fixed seeds.
    """
    for _ in range(attempts):
        batches = [make_batch(secrets.randbits(63)) for _ in range(steps)]
        run = train_reference(model, batches, optimizer=optimizer, shards=shards)
        if all(((g == 0) | (g.abs() >= tiny)).all() for grads in run.grads for g in grads.values()):
            return batches
    raise RuntimeError(f"{attempts} draws all held a gradient element in (0, {tiny}): this model's gradients "
                       "always hold elements that small; check it with fixed seeds, or pass a smaller `tiny`")


def own_rows(batch: Batch, rank: int, parts: int) -> Batch:
    """The global `batch` as rank `rank` of `parts` holds it in data parallelism: the same shapes,
    its own shard (`split_batch(batch, parts)[rank]`) in place, every other row blanked.

    A data loader that shards the data (PyTorch's DistributedSampler) never loads the other
    ranks' samples, and the checks hand each rank this view, so that a rank can learn about the
    others' samples only by communicating. Blank is NaN in a float tensor and -1 in an integer
    one (no token id): a rank that computes on rows it does not own gets NaN or an index error.
    When `parts` does not divide the batch no rank owns a shard, and every row is blank.
    """
    if not 0 <= rank < parts:
        raise ValueError(f"rank must be in [0, {parts}), got {rank}")
    size = batch[0].size(0)
    n = size // parts if size % parts == 0 else 0
    mine = slice(rank * n, (rank + 1) * n)
    view = []
    for t in batch:
        blank = blank_like(t)
        blank[mine] = t[mine]
        view.append(blank)
    return tuple(view)


def blank_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor like `t` that holds no sample: NaN if it is floating point, else -1 (no token id)."""
    return torch.full_like(t, float("nan") if t.is_floating_point() else -1)


def rows_by_rank(batches: list[Batch], parts: int) -> list[list[Batch]]:
    """For each of `parts` ranks, every batch as that rank holds it (`own_rows`): the inputs of
    `cluster.run_each` for a data-parallel run."""
    return [[own_rows(batch, rank, parts) for batch in batches] for rank in range(parts)]
