"""Allocation instance families, parameterised by size and seed, and the shipped set.

Families: `random` (uniform sizes and lifetimes), `mixed` (a few long-lived buffers such as
weights beside many short-lived activations), `pow2` (power-of-two sizes with alignment, as
allocators round them), `layered` (a training-step profile: activations kept for the backward
pass). Lifetimes are bounded so the live set stays realistic as n grows.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tensorplan.problems.allocation import AllocationInstance, Buffer, instance_to_json
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

FAMILIES = {
    "random": random_family,
    "mixed": mixed_family,
    "pow2": pow2_family,
    "layered": layered_family,
}


def shipped() -> list[dict[str, Any]]:
    """The shipped set: the seed example, small instances the exact models close, a few larger."""
    out = [SEED_EXAMPLE]
    out += [instance_to_json(random_family(n, s)) for n, s in ((8, 1), (12, 2), (20, 3), (200, 4))]
    out += [instance_to_json(mixed_family(n, s)) for n, s in ((10, 1), (16, 2), (300, 3))]
    out += [instance_to_json(pow2_family(n, s)) for n, s in ((10, 1), (16, 2), (150, 3))]
    out += [instance_to_json(layered_family(n, s)) for n, s in ((4, 1), (8, 2), (40, 3))]
    return out


def write_shipped(outdir: Path) -> list[Path]:
    return write_instance_files(outdir, shipped())
