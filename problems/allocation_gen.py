"""Allocation instance families, parameterised by size and seed, and the shipped set.

Families: `random` (uniform sizes and lifetimes), `aligned` (small, mixed sizes, alignment 3-8),
`mixed` (a few long-lived buffers such as
weights beside many short-lived activations), `pow2` (power-of-two sizes with alignment, as
allocators round them), `layered` (a training-step profile: activations kept for the backward
pass). Lifetimes are bounded so the live set stays realistic as n grows.
"""

from __future__ import annotations

import heapq
import random
from pathlib import Path
from typing import Any

import numpy as np

from tensorplan.problems.allocation import AllocationInstance, Buffer, instance_to_json
from tensorplan.problems.allocation_conflicts import Pairs, from_clocks
from tensorplan.problems.core import write_instance_files


def random_family(
    n: int, seed: int = 0, *, horizon: int | None = None, max_size: int = 64, max_life: int = 20
) -> AllocationInstance:
    rng = random.Random(seed)
    horizon = horizon or max(4, n // 2)
    bufs = []
    for i in range(n):
        start = rng.randrange(horizon)
        bufs.append(
            Buffer(str(i), rng.randint(1, max_size), start, start + rng.randrange(max_life))
        )
    return AllocationInstance(tuple(bufs), name=f"random-{n}-s{seed}")


def aligned_family(seed: int = 0, lo: int = 14, hi: int = 24) -> AllocationInstance:
    """lo..hi buffers over 6-16 steps, sizes 1-40 or 1-9, an alignment of 3, 4 or 8: small,
    and the alignment often keeps the max-load bound out of reach or hard to meet, so exact
    searches run long on them."""
    rng = random.Random(seed)
    n, horizon = rng.randint(lo, hi), rng.randint(6, 16)
    raw = []
    for i in range(n):
        s = rng.randint(0, horizon)
        size = rng.choice([rng.randint(1, 40), rng.randint(1, 9)])
        raw.append(Buffer(str(i), size, s, s + rng.randint(0, 7)))
    return AllocationInstance(
        tuple(raw), alignment=rng.choice([3, 4, 8]), name=f"aligned-{lo}-{hi}-s{seed}"
    )


def mixed_family(n: int, seed: int = 0, *, n_long: int | None = None) -> AllocationInstance:
    """A few long-lived large buffers (weights: min(n / 10, 64) of them) among many
    short-lived activations, as in a real program whose live set stays bounded as it grows."""
    rng = random.Random(seed)
    horizon = max(8, n // 2)
    n_long = max(1, min(n // 10, 64)) if n_long is None else n_long
    bufs = []
    for i in range(n):
        if i < n_long:
            start = rng.randrange(horizon // 4 + 1)
            end = min(horizon, start + rng.randint(horizon // 2, horizon))
            size = rng.randint(32, 256)
        else:
            start = rng.randrange(horizon)
            end = start + rng.randrange(1, 6)
            size = rng.randint(1, 64)
        bufs.append(Buffer(str(i), size, start, end))
    return AllocationInstance(tuple(bufs), name=f"mixed-{n}-s{seed}")


def pow2_family(n: int, seed: int = 0, *, alignment: int = 8) -> AllocationInstance:
    rng = random.Random(seed)
    horizon = max(4, n // 2)
    bufs = []
    for i in range(n):
        start = rng.randrange(horizon)
        bufs.append(Buffer(str(i), 2 ** rng.randint(3, 10), start, start + rng.randrange(12)))
    return AllocationInstance(tuple(bufs), alignment=alignment, name=f"pow2-{n}-s{seed}")


def layered_family(layers: int, seed: int = 0) -> AllocationInstance:
    """Forward activations live until their backward step; gradients are short-lived."""
    rng = random.Random(seed)
    t_end = 2 * layers + 1
    bufs = []
    for k in range(layers):
        act = rng.choice([64, 128, 256, 512])
        bufs.append(Buffer(f"act{k}", act, k, t_end - k))
        bufs.append(Buffer(f"tmp{k}", rng.randint(16, 256), k, k))
        bufs.append(Buffer(f"grad{k}", act, t_end - k - 1, t_end - k))
    return AllocationInstance(tuple(bufs), name=f"layered-{layers}-s{seed}")


SEED_EXAMPLE: dict[str, Any] = {
    "problem": "allocation",
    "name": "seed-example",
    "buffers": [
        {"id": str(i), "size": s, "start": a, "end": b}
        for i, (s, a, b) in enumerate(
            [(10, 1, 5), (5, 2, 6), (8, 1, 3), (4, 4, 7), (6, 3, 8), (12, 5, 9)]
        )
    ],
    "alignment": 1,
    "capacity": None,
}


def concurrent_family(
    n: int, seed: int = 0, *, streams: int = 4, syncs: int | None = None, max_size: int = 64
) -> AllocationInstance:
    """Concurrent lifetimes: `streams` workers each run their own timeline of about n / 2 steps
    and exchange `syncs` messages (default n / 8), each merging the sender's vector clock into
    the receiver's. A buffer lives on one stream for up to 20 local steps; one in eight is handed
    to another stream and freed there after a message. Buffers conflict unless one is freed
    before the other is allocated in every clock component (`allocation_conflicts.from_clocks`)."""
    rng = random.Random(seed)
    horizon = max(8, n // 2)
    syncs = max(1, n // 8) if syncs is None else syncs
    # clock of each stream after each local step: history[s][t] (t = 0..horizon)
    known = [[0] * streams for _ in range(streams)]
    history = [[tuple(row)] for row in known]
    messages = sorted(
        (rng.randrange(1, horizon), rng.sample(range(streams), 2)) for _ in range(syncs)
    )
    if streams < 2:
        messages = []
    at = 0
    for t in range(1, horizon + 1):
        for s in range(streams):
            known[s][s] = t
        while at < len(messages) and messages[at][0] == t:
            sender, receiver = messages[at][1]
            known[receiver] = [
                max(x, y) for x, y in zip(known[receiver], known[sender], strict=True)
            ]
            at += 1
        for s in range(streams):
            history[s].append(tuple(known[s]))
    starts, ends, bufs = [], [], []
    for i in range(n):
        s = rng.randrange(streams)
        begin = rng.randrange(horizon)
        stop = min(horizon, begin + 1 + rng.randrange(20))
        end_clock = history[s][stop]
        if streams > 1 and rng.random() < 0.125:  # freed on a stream that heard of its start
            later = [
                (u, t)
                for u in range(streams)
                for t in range(stop, min(horizon, stop + 20) + 1)
                if u != s and history[u][t][s] >= begin + 1
            ]
            if later:
                u, t = later[0]
                end_clock = tuple(max(x, y) for x, y in zip(end_clock, history[u][t], strict=True))
        starts.append(history[s][begin])
        ends.append(end_clock)
        bufs.append(Buffer(str(i), rng.randint(1, max_size), 0, 0))
    pairs = from_clocks(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    return AllocationInstance(
        tuple(bufs), name=f"concurrent-{n}-s{seed}", conflicts=pairs if bufs else Pairs.of(())
    )


FEATURE_SAMPLES = {"conflicts": concurrent_family}
"""Per instance feature (`Problem.features`), a generator (n, seed) of instances that ask it:
the contract test holds every solver to taking them or refusing them as declared."""

FAMILIES = {
    "random": random_family,
    "mixed": mixed_family,
    "pow2": pow2_family,
    "layered": layered_family,
    "concurrent": concurrent_family,
}


def shipped() -> list[dict[str, Any]]:
    """The shipped set: the seed example, small instances the exact models close, a few larger."""
    out = [SEED_EXAMPLE]
    out += [instance_to_json(random_family(n, s)) for n, s in ((8, 1), (12, 2), (20, 3), (200, 4))]
    out += [instance_to_json(mixed_family(n, s)) for n, s in ((10, 1), (16, 2), (300, 3))]
    out += [instance_to_json(pow2_family(n, s)) for n, s in ((10, 1), (16, 2), (150, 3))]
    out += [instance_to_json(layered_family(n, s)) for n, s in ((4, 1), (8, 2), (40, 3))]
    out += [instance_to_json(tight_family(n, s)[0]) for n, s in TIGHT_SHIPPED]
    out += [instance_to_json(concurrent_family(n, s)) for n, s in ((12, 1), (40, 2), (150, 3))]
    return out


TIGHT_SHIPPED = ((150, 0), (250, 2), (350, 4), (500, 7))
"""The shipped tight instances (optimum = max load, listed in instances/allocation/README.md);
`benchmarks/allocation_tight.py` generates its larger set on the fly."""


def write_shipped(outdir: Path) -> list[Path]:
    return write_instance_files(outdir, shipped())


def tight_family(
    n: int,
    seed: int = 0,
    *,
    capacity: int | None = None,
    horizon: int | None = None,
    pinwheel: float = 0.15,
    holes: float = 0.5,
) -> tuple[AllocationInstance, tuple[int, ...]]:
    """Buffers cut from a capacity x time rectangle, so optimum = max load = capacity.

    The rectangle is split until about n pieces exist, each split either a guillotine cut (in
    time or in address, at a skewed random position, so sizes and lifetimes spread over orders
    of magnitude) or, with probability `pinwheel`, a non-guillotine pinwheel of five pieces.
    Pieces clear of one chosen peak step are dropped with a probability growing with their
    distance from it, up to `holes` (real traces rise to a peak and fall); the peak step stays
    full, so the max live size is still `capacity`. Returns the
    instance (buffers shuffled, alignment 1) and the generator's own packing (its offsets),
    which reaches exactly `capacity`.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = random.Random(seed)
    cap = capacity if capacity is not None else rng.randint(2**16, 2**20)
    width = horizon if horizon is not None else max(16, n)
    target = max(1, round(n / (1 - holes / 2)))
    for _ in range(6):  # re-cut with more pieces until the kept ones are about n
        keep = _tight_pieces(random.Random(rng.random()), cap, width, target, pinwheel, holes)
        if len(keep) >= 0.95 * n:
            break
        target = round(target * n / max(1, len(keep))) + 1
    rng.shuffle(keep)
    bufs = tuple(Buffer(str(i), y1 - y0, t0, t1 - 1) for i, (t0, t1, y0, y1) in enumerate(keep))
    offsets = tuple(y0 for _, _, y0, _ in keep)
    return AllocationInstance(bufs, name=f"tight-{n}-s{seed}"), offsets


def _tight_pieces(
    rng: random.Random, cap: int, width: int, target: int, pinwheel: float, holes: float
) -> list[tuple[int, int, int, int]]:
    """Cut [0, width) x [0, cap) into about `target` pieces, then drop some clear of the peak."""
    # (t0, t1, y0, y1): lifetime [t0, t1) and addresses [y0, y1); a heap picks the next piece
    # to split by its area share times a random factor
    rects: list[tuple[int, int, int, int]] = []
    heap: list[tuple[float, int]] = []

    def add(r: tuple[int, int, int, int]) -> None:
        rects.append(r)
        heapq.heappush(heap, (-_weight(r, width, cap) * rng.random(), len(rects) - 1))

    def cut(lo: int, hi: int) -> int:
        """A cut strictly inside (lo, hi), skewed toward the ends: uneven pieces."""
        f = rng.random() ** 1.5
        if rng.random() < 0.5:
            f = 1 - f
        return min(hi - 1, max(lo + 1, lo + round(f * (hi - lo))))

    add((0, width, 0, cap))
    done: list[tuple[int, int, int, int]] = []
    while heap and len(heap) + len(done) < target:
        t0, t1, y0, y1 = rects[heapq.heappop(heap)[1]]
        w, h = t1 - t0, y1 - y0
        if w < 2 and h < 2:
            done.append((t0, t1, y0, y1))
            continue
        if w >= 3 and h >= 3 and rng.random() < pinwheel and len(heap) + len(done) + 5 <= target:
            x1 = cut(t0, t1 - 1)
            x2 = cut(x1, t1)
            ya = cut(y0, y1 - 1)
            yb = cut(ya, y1)
            for r in ((t0, x2, y0, ya), (x2, t1, y0, yb), (x1, t1, yb, y1), (t0, x1, ya, y1)):
                add(r)
            add((x1, x2, ya, yb))
            continue
        in_time = h < 2 or (w >= 2 and rng.random() < w / width / (w / width + h / cap))
        if in_time:
            x = cut(t0, t1)
            add((t0, x, y0, y1))
            add((x, t1, y0, y1))
        else:
            y = cut(y0, y1)
            add((t0, t1, y0, y))
            add((t0, t1, y, y1))
    pieces = done + [rects[k] for _, k in sorted(heap, key=lambda e: e[1])]
    peak_step = rng.randrange(width // 4, width - width // 4)
    far = max(peak_step, width - 1 - peak_step)

    def dropped(r: tuple[int, int, int, int]) -> bool:
        gap = r[0] - peak_step if r[0] > peak_step else peak_step - (r[1] - 1)
        return gap > 0 and rng.random() < holes * min(1.0, 8 * gap / far)

    return [r for r in pieces if not dropped(r)]


def _weight(rect: tuple[int, int, int, int], width: int, cap: int) -> float:
    """Split priority of a piece: its share of the rectangle's area."""
    t0, t1, y0, y1 = rect
    return (t1 - t0) / width * (y1 - y0) / cap


def sample(size: int, seed: int = 0) -> AllocationInstance:
    """A random instance of about `size` buffers: the problem's generator for tests and widgets."""
    return random_family(size, seed)
