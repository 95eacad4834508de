"""Generators for the seed's graph families, parameterised by size and seed, and the shipped set.

Families (after the poprithms shift demos): `recompute` (a forward chain, its backward chain, and
recomputation of non-checkpointed activations), `tree` (random tree, each op's output read by its
children), `bifurcating` (a graph that splits in two repeatedly and merges back), `grid` (op (i, j)
after (i-1, j) and (i, j-1)), `adversary` (random DAG whose allocs are shared by ops far apart),
`layered` (layers of ops, each after 1-3 random ops of the layer before).
Every generator is a pure function of its arguments.
"""

from __future__ import annotations

import random
from pathlib import Path

from tensorplan.problems.core import write_instance_files
from tensorplan.problems.schedule import Alloc, Objective, Op, ScheduleInstance, instance_to_json


def _build(
    name: str,
    ops: list[tuple[str, list[str]]],
    allocs: list[tuple[str, int, list[str]]],
    objective: Objective,
) -> ScheduleInstance:
    return ScheduleInstance(
        tuple(Op(i, tuple(a)) for i, a in ops),
        tuple(Alloc(i, s, tuple(u)) for i, s, u in allocs),
        objective,
        name,
    )


def _outputs(
    ops: list[tuple[str, list[str]]], rng: random.Random, smax: int
) -> list[tuple[str, int, list[str]]]:
    """One alloc per op: its output, used by the op and every op that consumes it."""
    consumers: dict[str, list[str]] = {i: [] for i, _ in ops}
    for i, after in ops:
        for p in after:
            consumers[p].append(i)
    return [(f"out_{i}", rng.randint(1, smax), [i, *consumers[i]]) for i, _ in ops]


def recompute(
    layers: int, seed: int = 0, *, checkpoint_every: int = 3, objective: Objective = "sum_liveness"
) -> ScheduleInstance:
    """Training step with recomputation: forward f_i, recompute r_i, backward b_i.

    Checkpointed activations (every `checkpoint_every`-th layer) stay live until their backward
    op; the others are freed after the forward pass and recomputed from the previous checkpoint
    for the backward pass. About 2.7 ops per layer.
    """
    rng = random.Random(seed)
    ops: list[tuple[str, list[str]]] = []
    allocs: list[tuple[str, int, list[str]]] = []
    ckpt = [i % checkpoint_every == 0 for i in range(layers)]
    for i in range(layers):
        ops.append((f"f{i}", [f"f{i - 1}"] if i else []))
    for i in range(layers):  # recomputation chain, from the previous checkpoint
        if not ckpt[i]:
            src = f"f{i - 1}" if ckpt[i - 1] else f"r{i - 1}"
            ops.append((f"r{i}", [src, f"f{layers - 1}"]))
    for i in reversed(range(layers)):
        after = [f"b{i + 1}"] if i + 1 < layers else [f"f{layers - 1}"]
        if not ckpt[i]:
            after.append(f"r{i}")
        ops.append((f"b{i}", after))
    for i in range(layers):
        act = rng.randint(2, 8)
        users = [f"f{i}", f"f{i + 1}"] if i + 1 < layers else [f"f{i}"]
        if ckpt[i]:
            allocs.append(
                (
                    f"act{i}",
                    act,
                    [*users, f"b{i}"]
                    + ([f"r{i + 1}"] if i + 1 < layers and not ckpt[i + 1] else []),
                )
            )
        else:
            allocs.append((f"act{i}", act, users))
            nxt = [f"r{i + 1}"] if i + 1 < layers and not ckpt[i + 1] else []
            allocs.append((f"re{i}", act, [f"r{i}", f"b{i}", *nxt]))
        allocs.append((f"grad{i}", rng.randint(1, 4), [f"b{i}", f"b{i - 1}"] if i else [f"b{i}"]))
    return _build(f"recompute-{layers}-s{seed}", ops, allocs, objective)


def tree(n: int, seed: int = 0, *, objective: Objective = "sum_liveness") -> ScheduleInstance:
    """Random tree: op i (> 0) comes after a uniformly chosen earlier op."""
    rng = random.Random(seed)
    ops = [(f"t{i}", [f"t{rng.randrange(i)}"] if i else []) for i in range(n)]
    return _build(f"tree-{n}-s{seed}", ops, _outputs(ops, rng, 6), objective)


def bifurcating(
    depth: int, seed: int = 0, *, objective: Objective = "sum_liveness"
) -> ScheduleInstance:
    """Split into two branches `depth` times, then merge pairwise back: 2^(depth+1) + ... ops."""
    rng = random.Random(seed)
    ops: list[tuple[str, list[str]]] = [("root", [])]
    level = ["root"]
    for d in range(depth):
        nxt = []
        for k, p in enumerate(level):
            for side in "lr":
                name = f"s{d}_{k}{side}"
                ops.append((name, [p]))
                nxt.append(name)
        level = nxt
    for d in range(depth):
        nxt = []
        for k in range(0, len(level), 2):
            name = f"m{d}_{k // 2}"
            ops.append((name, [level[k], level[k + 1]]))
            nxt.append(name)
        level = nxt
    return _build(f"bifurcating-{depth}-s{seed}", ops, _outputs(ops, rng, 6), objective)


def grid(
    rows: int,
    cols: int,
    seed: int = 0,
    *,
    objective: Objective = "sum_liveness",
    max_size: int = 6,
) -> ScheduleInstance:
    """Op (i, j) after (i-1, j) and (i, j-1); its output (size 1..max_size) is read by (i+1, j)
    and (i, j+1). Named grid-RxC-sS, or grid-RxC-wM-sS when max_size M is not 6."""
    rng = random.Random(seed)
    ops = [
        (f"g{i}_{j}", ([f"g{i - 1}_{j}"] if i else []) + ([f"g{i}_{j - 1}"] if j else []))
        for i in range(rows)
        for j in range(cols)
    ]
    wide = "" if max_size == 6 else f"-w{max_size}"
    name = f"grid-{rows}x{cols}{wide}-s{seed}"
    return _build(name, ops, _outputs(ops, rng, max_size), objective)


def layered(
    width: int, depth: int, seed: int = 0, *, objective: Objective = "sum_liveness"
) -> ScheduleInstance:
    """Random layered DAG: `depth` layers of `width` ops, each after 1-3 ops of the layer
    before; one output alloc per op (size 1-6) read by its consumers. Named
    layered-WxD-sS."""
    rng = random.Random(seed)
    ops: list[tuple[str, list[str]]] = []
    for d in range(depth):
        for i in range(width):
            preds = sorted(rng.sample(range(width), rng.randint(1, min(3, width)))) if d else []
            ops.append((f"l{d}_{i}", [f"l{d - 1}_{j}" for j in preds]))
    name = f"layered-{width}x{depth}-s{seed}"
    return _build(name, ops, _outputs(ops, rng, 6), objective)


def adversary(
    n: int,
    seed: int = 0,
    *,
    edge_p: float | None = None,
    allocs: int | None = None,
    objective: Objective = "sum_liveness",
) -> ScheduleInstance:
    """Random DAG (edges i -> j, i < j, mostly local) with allocs shared by ops far apart."""
    rng = random.Random(seed)
    p = edge_p if edge_p is not None else min(1.0, 2.0 / max(n, 1))
    ops = []
    for j in range(n):
        near = [i for i in range(max(0, j - 6), j) if rng.random() < 0.3]
        far = (
            [i for i in range(max(0, j - 6)) if rng.random() < p]
            if n <= 200
            else [rng.randrange(j - 6) for _ in range(int(rng.random() < 0.5))]
            if j > 6
            else []
        )
        ops.append((f"v{j}", [f"v{i}" for i in sorted(set(near + far))]))
    out = []
    for k in range(allocs if allocs is not None else n):
        users = rng.sample(range(n), min(n, rng.randint(1, 3)))
        out.append((f"m{k}", rng.randint(1, 9), [f"v{i}" for i in users]))
    return _build(f"adversary-{n}-s{seed}", ops, out, objective)


def seed_example(objective: Objective = "sum_liveness") -> ScheduleInstance:
    """The seed's graph: ops a..f without precedence, allocs A..E of size 1."""
    ops: list[tuple[str, list[str]]] = [(x, []) for x in "abcdef"]
    allocs = [
        ("A", 1, list("abcde")),
        ("B", 1, list("bcd")),
        ("C", 1, list("cd")),
        ("D", 1, ["d"]),
        ("E", 1, ["e", "f"]),
    ]
    name = "seed-example" if objective == "sum_liveness" else "seed-example-peak"
    return _build(name, ops, allocs, objective)


def shipped() -> list[ScheduleInstance]:
    """The instance set in instances/schedule: small ones the exact solvers close, one large."""
    return [
        seed_example(),
        seed_example("peak"),
        recompute(4, 1),
        recompute(4, 2, objective="peak"),
        tree(12, 1),
        tree(12, 2, objective="peak"),
        bifurcating(2, 1),
        bifurcating(2, 2, objective="peak"),
        grid(3, 4, 1),
        grid(3, 3, 2, objective="peak"),
        adversary(12, 1),
        adversary(10, 2, objective="peak"),
        recompute(375, 7),
    ]


def write_shipped(outdir: Path) -> list[Path]:
    """Write the shipped set deterministically; returns the paths written."""
    return write_instance_files(outdir, (instance_to_json(i) for i in shipped()))


def sample(size: int, seed: int = 0) -> ScheduleInstance:
    """A random DAG of `size` ops, sum-liveness for even seeds and peak for odd ones: the
    problem's generator for tests and widgets."""
    return adversary(max(2, size), seed, objective="peak" if seed % 2 else "sum_liveness")


if __name__ == "__main__":  # python -m tensorplan.problems.schedule_gen
    for p in write_shipped(Path(__file__).resolve().parent.parent / "instances" / "schedule"):
        print(p)
