"""The ring all-reduce, step by step: which chunk each rank sends, and what each rank holds.

    schedule = textbook_schedule(world_size=4, numel=10)        # pure: the algorithm on paper
    schedule = record_ring_all_reduce(cluster, ring_all_reduce, 4, 10)  # your function's sends
    plot_ring_step(schedule, step=3)                             # a Figure
    ring_stepper(ring_all_reduce, cluster)                       # slider over the 2(P-1) steps

The message is split into P chunks with ``torch.tensor_split`` (sizes differ by at most one
element). In reduce-scatter step s (s = 0 .. P-2) rank r sends chunk (r-s-1) mod P to rank r+1,
which adds it to its own copy; after P-1 steps rank r holds the full sum of chunk r (as
``dist.reduce_scatter`` leaves it). In all-gather step s rank r sends chunk (r-s) mod P, which
the receiver stores. Every rank sends 2(P-1) chunks: 2(P-1)/P·N bytes (Patarasuk & Yuan 2009).

A recording runs your all-reduce on inputs that encode where each value came from (rank r
adds 2^r, chunk c adds (c+1)·2^P per contribution), and reads every message as it is sent:
destination and bytes (as in the trace) and which chunk, summed over which ranks (from the
data). Step k is every rank's k-th send. `message_rounds` counts rounds in a trace for any
point-to-point algorithm.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from nanoparallel.runtime.timeline import match_messages, op_color
from nanoparallel.runtime.units import human_bytes
from nanoparallel.lessons.viz.widgets import show_figure

RS, AG = "reduce-scatter", "all-gather"
MAX_RANKS = 8  # one letter per rank (a, b, c, ...) must stay readable in a cell


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    chunk: int | None          # None: the message is not one whole chunk of one partial sum
    ranks: frozenset           # whose contributions the message carries
    nbytes: int


@dataclass(frozen=True)
class RingStep:
    phase: str
    transfers: tuple           # of Transfer, one per sending rank
    holds: tuple               # after the step: holds[rank][chunk] = frozenset of ranks summed in


@dataclass(frozen=True)
class RingSchedule:
    world_size: int
    chunk_sizes: tuple         # elements per chunk (torch.tensor_split)
    itemsize: int
    initial: tuple             # holds before the first step
    steps: tuple               # of RingStep
    source: str = "textbook schedule"
    note: str = ""

    @property
    def numel(self) -> int:
        return sum(self.chunk_sizes)

    def bytes_sent(self, upto: int) -> list[int]:
        """Bytes each rank has sent after `upto` steps."""
        sent = [0] * self.world_size
        for step in self.steps[:upto]:
            for t in step.transfers:
                sent[t.src] += t.nbytes
        return sent


def chunk_sizes(numel: int, world_size: int) -> tuple:
    """Sizes of ``torch.tensor_split(x, world_size)`` for a 1-D x of `numel` elements."""
    base, extra = divmod(numel, world_size)
    return tuple(base + (1 if i < extra else 0) for i in range(world_size))


def _check(world_size: int, numel: int) -> None:
    if not 1 <= world_size <= MAX_RANKS:
        raise ValueError(f"the ring stepper draws 1 to {MAX_RANKS} ranks, got {world_size}")
    if numel < 1:
        raise ValueError(f"the message needs at least one element, got {numel}")


def textbook_schedule(world_size: int, numel: int = 12, itemsize: int = 4) -> RingSchedule:
    """The ring all-reduce on paper (see the module docstring for the chunk indices)."""
    _check(world_size, numel)
    P, sizes = world_size, chunk_sizes(numel, world_size)
    holds = [[frozenset({r})] * P for r in range(P)]
    initial, steps = tuple(map(tuple, holds)), []
    for phase, offset in ((RS, 1), (AG, 0)):
        for s in range(P - 1):
            transfers = []
            for r in range(P):
                c = (r - s - offset) % P
                transfers.append(Transfer(r, (r + 1) % P, c, holds[r][c], sizes[c] * itemsize))
            for t in transfers:  # every rank sends before any adds: a simultaneous step
                holds[t.dst][t.chunk] = t.ranks | (holds[t.dst][t.chunk] if phase == RS else frozenset())
            steps.append(RingStep(phase, tuple(transfers), tuple(map(tuple, holds))))
    return RingSchedule(P, sizes, itemsize, initial, tuple(steps))


# -- reading an all-reduce from its data ---------------------------------------------------

def encode_input(rank: int, numel: int, world_size: int) -> list[float]:
    """Rank `rank`'s input: element i of chunk c is 2^rank + (c+1)·2^P (exact in float64)."""
    values = []
    for c, n in enumerate(chunk_sizes(numel, world_size)):
        values += [float(2 ** rank + (c + 1) * 2 ** world_size)] * n
    return values


def decode_value(value: float, world_size: int):
    """(chunk, ranks summed in) of one value of a partial sum, or None if it is no such sum."""
    if value != value or value != int(value) or value <= 0:
        return None
    v = int(value)
    mask, high = v % 2 ** world_size, v >> world_size
    ranks = frozenset(r for r in range(world_size) if mask >> r & 1)
    if not ranks or high % len(ranks):
        return None
    chunk = high // len(ranks) - 1
    return (chunk, ranks) if 0 <= chunk < world_size else None


def decode_message(values, world_size: int):
    """(chunk, ranks) if every value is the same chunk's same partial sum, else (None, ranks seen)."""
    decoded = {decode_value(float(v), world_size) for v in values}
    if len(decoded) == 1 and None not in decoded:
        return next(iter(decoded))
    return None, frozenset().union(*(d[1] for d in decoded if d is not None))


def schedule_from_sends(world_size: int, numel: int, itemsize: int, sends, final=None,
                        source: str = "your ring_all_reduce") -> RingSchedule:
    """A schedule from recorded sends: ``sends[r]`` lists rank r's messages in order, each
    ``(dst, values, nbytes)``; ``final[r]`` (optional) the values rank r ends with.

    Step k is every rank's k-th send. What a rank holds after a step is read from the data
    where the data shows it (the chunk it sends next, its final tensor), and otherwise
    follows from what it received (a received partial sum joins the rank's own). Falls back
    to the textbook schedule, with a note, when the sends are not 2(P-1) per rank.
    """
    _check(world_size, numel)
    P, sizes = world_size, chunk_sizes(numel, world_size)
    counts = [len(s) for s in sends]
    if P > 1 and counts != [2 * (P - 1)] * P:
        book = textbook_schedule(P, numel, itemsize)
        return replace(book, note=f"{source} did not send 2(P-1) = {2 * (P - 1)} messages per rank "
                                  f"(sends per rank: {counts}); showing the textbook schedule instead.")
    messages = [[Transfer(r, dst, *decode_message(values, P), nbytes) for dst, values, nbytes in mine]
                for r, mine in enumerate(sends)]
    holds = [[frozenset({r})] * P for r in range(P)]
    initial, steps = tuple(map(tuple, holds)), []
    for k in range(2 * (P - 1)):
        transfers = tuple(messages[r][k] for r in range(P))
        for t in transfers:
            if t.chunk is not None and 0 <= t.dst < P:
                holds[t.dst][t.chunk] = holds[t.dst][t.chunk] | t.ranks
        for r in range(P):  # what rank r sends next is what it held after this step
            nxt = messages[r][k + 1] if k + 1 < len(messages[r]) else None
            if nxt is not None and nxt.chunk is not None:
                holds[r][nxt.chunk] = nxt.ranks
        if k == 2 * (P - 1) - 1 and final is not None:
            holds = [_holds_from_values(final[r], P, sizes, holds[r]) for r in range(P)]
        phase = RS if k < P - 1 else AG
        steps.append(RingStep(phase, transfers, tuple(map(tuple, holds))))
    return RingSchedule(P, sizes, itemsize, initial, tuple(steps), source=source)


def _holds_from_values(values, P, sizes, fallback):
    out, start = list(fallback), 0
    for c, n in enumerate(sizes):
        if n:
            chunk, ranks = decode_message(values[start:start + n], P)
            out[c] = ranks if chunk == c else frozenset()
        start += n
    return out


def _probe(all_reduce, numel: int):
    """Runs on every rank: your all-reduce on encoded data, reading each message as it is sent."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    rank, world = dist.get_rank(), dist.get_world_size()
    sends, depth = [], [0]
    originals = {name: getattr(c10d, name) for name in ("send", "isend")}

    def recording(name):
        original = originals[name]

        def call(tensor, dst=None, *args, **kwargs):
            if depth[0] == 0:  # send calls isend inside torch: record the outer call only
                sends.append((dst, tensor.detach().flatten().double().tolist(),
                              tensor.numel() * tensor.element_size()))
            depth[0] += 1
            try:
                return original(tensor, dst, *args, **kwargs)
            finally:
                depth[0] -= 1
        return call

    patched = {name: recording(name) for name in originals}
    for name, fn in patched.items():  # both names: P2POp checks its op against c10d's
        setattr(c10d, name, fn)
        setattr(dist, name, fn)
    try:
        x = torch.tensor(encode_input(rank, numel, world), dtype=torch.float64)
        result = all_reduce(x)
        final = (result if isinstance(result, torch.Tensor) else x).flatten().double().tolist()
    finally:
        for name, fn in originals.items():
            setattr(c10d, name, fn)
            setattr(dist, name, fn)
    return {"sends": sends, "final": final}


def record_ring_all_reduce(cluster, all_reduce, world_size: int, numel: int) -> RingSchedule:
    """Run ``all_reduce(x)`` (in place, SUM) on `world_size` ranks of `cluster`, return its schedule.

    The cluster is resized for the run and back afterwards.
    """
    _check(world_size, numel)
    previous = cluster.world_size
    if world_size != previous:
        cluster.resize(world_size)
    try:
        out = cluster.run(_probe, all_reduce, numel)
    finally:
        if cluster.world_size != previous:
            cluster.resize(previous)
    return schedule_from_sends(world_size, numel, 8, [o["sends"] for o in out],
                               [o["final"] for o in out])


# -- rounds in a trace ---------------------------------------------------------------------

def message_rounds(trace) -> list:
    """Each message of `trace` as ``(send, recv, round)``, in the single-port model.

    In one round a rank sends at most one message and receives at most one, in the order it
    posted them, and a message leaves only after every message its sender finished receiving
    before posting it (a rank forwards only what it has). A binomial-tree broadcast takes
    ceil(log2 P) rounds, a ring all-gather P-1, a flat broadcast from one root P-1.
    """
    pairs = match_messages(trace)
    sent_by, received_by = defaultdict(list), defaultdict(list)
    for i, (s, r) in enumerate(pairs):
        sent_by[s.rank].append(i)
        received_by[r.rank].append(i)
    for lists, side in ((sent_by, 0), (received_by, 1)):
        for ids in lists.values():
            ids.sort(key=lambda i: pairs[i][side].start)
    prev_send = {i: ids[k - 1] for ids in sent_by.values() for k, i in enumerate(ids) if k}
    prev_recv = {i: ids[k - 1] for ids in received_by.values() for k, i in enumerate(ids) if k}
    depends = {i: [j for j in received_by[s.rank]
                   if pairs[j][1].end is not None and pairs[j][1].end <= s.start]
               for i, (s, _) in enumerate(pairs)}
    rounds = [1] * len(pairs)
    for _ in range(len(pairs) + 1):  # longest path in a DAG: at most len(pairs) relaxations
        changed = False
        for i in range(len(pairs)):
            before = [prev_send.get(i), prev_recv.get(i), *depends[i]]
            need = 1 + max((rounds[j] for j in before if j is not None), default=0)
            if need > rounds[i]:
                rounds[i], changed = need, True
        if not changed:
            break
    return [(s, r, rounds[i]) for i, (s, r) in enumerate(pairs)]


def count_rounds(trace) -> int:
    """How many rounds the trace's point-to-point messages take (see `message_rounds`)."""
    return max((k for _, _, k in message_rounds(trace)), default=0)


# -- the picture ---------------------------------------------------------------------------

def rank_letter(rank: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[rank]


def holding_label(ranks: frozenset, world_size: int) -> str:
    """``a+b``, ``Σ`` for everyone's sum, ``a–d+f`` for long sums, ``?`` for unknown data."""
    if not ranks:
        return "?"
    if len(ranks) == world_size and world_size > 1:
        return "Σ"
    order, runs = sorted(ranks), []
    for r in order:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = [f"{rank_letter(run[0])}–{rank_letter(run[-1])}" if len(run) >= 4
             else "+".join(map(rank_letter, run)) for run in runs]
    return "+".join(parts)


def _fill(ranks: frozenset, P: int) -> str:
    if not ranks:
        return "#f4cccc"
    if len(ranks) == P:
        return "#93c47d"
    share = len(ranks) / P
    g = int(245 - 100 * share)  # light to mid green as more ranks are summed in
    return f"#{g - 20:02x}{245:02x}{g:02x}"


def plot_ring_step(schedule: RingSchedule, step: int, ax=None) -> Figure:
    """What each rank holds after `step` steps (0: the inputs), and what moved in that step."""
    P, sizes = schedule.world_size, schedule.chunk_sizes
    if not 0 <= step <= len(schedule.steps):
        raise ValueError(f"step must be between 0 and {len(schedule.steps)}, got {step}")
    holds = schedule.initial if step == 0 else schedule.steps[step - 1].holds
    moved = () if step == 0 else schedule.steps[step - 1].transfers
    if ax is None:
        fig = Figure(figsize=(2.6 + 1.15 * P, 1.9 + 0.62 * P), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    sending = {(t.src, t.chunk) for t in moved}
    color = op_color("isend")
    for r in range(P):
        for c in range(P):
            edge = (color, 2.4) if (r, c) in sending else ("white", 1.0)
            ax.add_patch(Rectangle((c - 0.45, r - 0.38), 0.9, 0.76, facecolor=_fill(holds[r][c], P),
                                   edgecolor=edge[0], linewidth=edge[1], gid="cell"))
            label = holding_label(holds[r][c], P)
            ax.text(c, r, label, ha="center", va="center", fontsize=10 if len(label) < 8 else 8,
                    fontweight="bold" if label == "Σ" else "normal")
    for t in moved:
        c = t.chunk
        if c is None or not 0 <= t.dst < P:
            ax.text(P - 0.4, t.src, "mixed data →", fontsize=8, color="#c0392b", va="center")
            continue
        if t.dst == (t.src + 1) % P and t.dst == 0 and P > 1:  # wrap-around: leave below, enter above
            for a, b in (((c, P - 1 + 0.38), (c, P - 0.05)), ((c, -0.95), (c, -0.38))):
                ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=11, color=color,
                                             linewidth=1.4, gid="message"))
            ax.text(c + 0.08, P - 0.12, f"to {rank_letter(0)}", fontsize=7, color=color, va="center")
            ax.text(c + 0.08, -0.8, f"from {rank_letter(P - 1)}", fontsize=7, color=color, va="center")
        else:
            y0, y1 = (t.src + 0.38, t.dst - 0.38) if t.dst > t.src else (t.src - 0.38, t.dst + 0.38)
            ax.add_patch(FancyArrowPatch((c + 0.18, y0), (c + 0.18, y1), arrowstyle="-|>",
                                         mutation_scale=11, color=color, linewidth=1.4, gid="message",
                                         connectionstyle="arc3,rad=0.0"))
    sent = schedule.bytes_sent(step)
    for r in range(P):
        ax.text(P - 0.4, r, f"sent {human_bytes(sent[r])}", fontsize=8, color="#333333", va="center")
    ax.set_xlim(-0.55, P + 0.6)
    ax.set_ylim(P - 0.5 + 0.55, -1.05)
    ax.set_xticks(range(P), [f"chunk {c}\n{sizes[c]} elem" for c in range(P)], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(P), [f"rank {r} ({rank_letter(r)})" for r in range(P)])
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    total = 2 * (P - 1) * schedule.numel * schedule.itemsize / P if P else 0
    if step == 0:
        what = "before the first step: each rank holds only its own data (rank 0: a, rank 1: b, ...)"
    else:
        phase = schedule.steps[step - 1].phase
        verb = "adds it to its own" if phase == RS else "stores it"
        what = (f"step {step} of {len(schedule.steps)}, {phase}: each outlined chunk goes to the next "
                f"rank, which {verb}")
    ax.set_title(f"{what}\n{schedule.source}; each rank sends 2(P-1)/P·N = {human_bytes(total)} in all",
                 fontsize=9)
    return fig


# -- the widget ----------------------------------------------------------------------------

def ring_stepper(all_reduce=None, cluster=None, world_size: int = 4, numel: int = 12,
                 world_sizes=(2, 3, 4, 5, 6, 8)) -> widgets.VBox:
    """Slide through the 2(P-1) steps of a ring all-reduce on P ranks and `numel` elements.

    With `all_reduce` and `cluster`, the steps are your function's own messages
    (`record_ring_all_reduce`); if it fails or is no ring, the textbook schedule is shown with
    a note. Attributes: ``world_size``, ``numel``, ``step_slider``, ``note``, ``output``,
    ``schedule`` and ``figure``.
    """
    sizes = sorted(set(world_sizes) | {world_size})
    size_box = widgets.Dropdown(options=[(f"P = {n}", n) for n in sizes], value=world_size,
                                description="ranks", layout=widgets.Layout(width="160px"))
    numel_box = widgets.BoundedIntText(value=numel, min=1, max=64, description="elements",
                                       layout=widgets.Layout(width="170px"))
    step_slider = widgets.IntSlider(value=0, min=0, max=1, description="step",
                                    layout=widgets.Layout(width="420px"))
    note = widgets.HTML()
    out = widgets.Output()
    box = widgets.VBox([widgets.HBox([size_box, numel_box]), step_slider, note, out])
    box.world_size, box.numel, box.step_slider, box.note, box.output = size_box, numel_box, step_slider, note, out
    box.schedule, box.figure = None, None

    def rebuild(change=None):
        P, n = size_box.value, max(1, numel_box.value)
        text = ""
        if all_reduce is not None and cluster is not None:
            try:
                schedule = record_ring_all_reduce(cluster, all_reduce, P, n)
                text = schedule.note
            except Exception as exc:  # the learner's code failed: explain, show the textbook
                schedule = textbook_schedule(P, n, 8)
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                text = (f"your function raised {type(exc).__name__}{': ' + first if first else ''}; "
                        "showing the textbook schedule instead.")
        else:
            schedule = textbook_schedule(P, n, 8)
        box.schedule = schedule
        note.value = f'<span style="color:#b45f06">{text}</span>' if text else ""
        last = len(schedule.steps)
        if step_slider.max != max(last, 1) or step_slider.value > last:
            step_slider.max = max(last, 1)
        redraw()

    def redraw(change=None):
        step = min(step_slider.value, len(box.schedule.steps))
        box.figure = plot_ring_step(box.schedule, step)
        show_figure(out, box.figure)

    size_box.observe(rebuild, names="value")
    numel_box.observe(rebuild, names="value")
    step_slider.observe(redraw, names="value")
    rebuild()
    return box
