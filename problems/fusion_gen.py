"""Fusion instances: the seed's worked programs, programs written from the paper's benchmark
descriptions, and a seeded random program generator. `write_shipped` writes instances/fusion/."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tensorplan.problems.core import write_instance_files
from tensorplan.problems.fusion import FusionInstance, instance_to_json, parse_instance


def _b(
    name: str, op: str, inputs: list[str], scalars: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    item: dict[str, Any] = {"name": name, "op": op, "inputs": inputs}
    if scalars:
        item["scalars"] = scalars
    item.update(extra)
    return item


def _prog(
    name: str, inputs: list[str], bindings: list[dict[str, Any]], outputs: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        "problem": "fusion",
        "name": name,
        "inputs": inputs,
        **extra,
        "bindings": bindings,
        "outputs": outputs,
    }


# The seed's two worked examples.
NORMALIZE_INC = _prog(
    "normalizeInc",
    ["us"],
    [
        _b("incs", "map", ["us"]),
        _b("sum", "fold", ["us"]),
        _b("norm", "map", ["incs"], ["sum"]),
    ],
    ["norm"],
)

NORMALIZE2 = _prog(
    "normalize2",
    ["xs"],
    [
        _b("sum1", "fold", ["xs"]),
        _b("gts", "filter", ["xs"]),
        _b("sum2", "fold", ["gts"]),
        _b("ys1", "map", ["xs"], ["sum1"]),
        _b("ys2", "map", ["xs"], ["sum2"]),
    ],
    ["ys1", "ys2"],
)

# QuickHull's inner step (filterMax): distances to the line, the points above it, the farthest.
QUICKHULL = _prog(
    "quickhull",
    ["xs", "ys"],
    [
        _b("dists", "map", ["xs", "ys"]),
        _b("above", "filter", ["dists"]),
        _b("axs", "map", ["above"]),
        _b("best", "fold", ["dists"]),
        _b("nabove", "fold", ["above"]),
        _b("far", "map", ["xs", "ys"], ["best"]),
    ],
    ["axs", "nabove", "far"],
)

# Closest points, one divide-and-conquer step: split at the mean, recurse (externals), then the
# strip near the split line, all pairs in it (cross) and their minimum distance.
CLOSEST_POINTS = _prog(
    "closestPoints",
    ["xs"],
    [
        _b("mid", "fold", ["xs"]),
        _b("lefts", "filter", ["xs"], ["mid"]),
        _b("rights", "filter", ["xs"], ["mid"]),
        {"name": "recl", "op": "external", "inputs": ["lefts"], "outputs": ["dl"]},
        {"name": "recr", "op": "external", "inputs": ["rights"], "outputs": ["dr"]},
        _b("strip", "filter", ["xs"], ["dl", "dr"]),
        _b("pairs", "cross", ["strip", "strip"]),
        _b("pd", "map", ["pairs"]),
        _b("best", "fold", ["pd"], ["dl", "dr"]),
    ],
    ["best"],
)

# QuadTree, one level: bounding box, then the points of each quadrant and their counts.
QUADTREE = _prog(
    "quadtree",
    ["xs", "ys"],
    [
        _b("minx", "fold", ["xs"]),
        _b("maxx", "fold", ["xs"]),
        _b("miny", "fold", ["ys"]),
        _b("maxy", "fold", ["ys"]),
        _b("q1", "filter", ["xs"], ["minx", "miny"]),
        _b("q2", "filter", ["xs"], ["maxx", "miny"]),
        _b("q3", "filter", ["ys"], ["minx", "maxy"]),
        _b("q4", "filter", ["ys"], ["maxx", "maxy"]),
        _b("n1", "fold", ["q1"]),
        _b("n2", "fold", ["q2"]),
        _b("n3", "fold", ["q3"]),
        _b("n4", "fold", ["q4"]),
    ],
    ["q1", "q2", "q3", "q4", "n1", "n2", "n3", "n4"],
)

# QuadTree, one level with the split point computed by an external from four folds (the seed's
# `external ins` takes scalars): bounding box, midpoint, two half-planes and their counts.
QUADTREE_MID = _prog(
    "quadtreeMid",
    ["xs", "ys"],
    [
        _b("minx", "fold", ["xs"]),
        _b("maxx", "fold", ["xs"]),
        _b("miny", "fold", ["ys"]),
        _b("maxy", "fold", ["ys"]),
        {
            "name": "mid",
            "op": "external",
            "inputs": ["minx", "maxx", "miny", "maxy"],
            "outputs": ["midx", "midy"],
        },
        _b("left", "filter", ["xs"], ["midx"]),
        _b("low", "filter", ["ys"], ["midy"]),
        _b("nleft", "fold", ["left"]),
        _b("nlow", "fold", ["low"]),
    ],
    ["left", "low", "nleft", "nlow"],
)

# Sum and count of the positive products of two vectors, and the products rescaled by the mean.
DOT_FILTER = _prog(
    "dotFilter",
    ["xs", "ys"],
    [
        _b("prods", "map", ["xs", "ys"]),
        _b("pos", "filter", ["prods"]),
        _b("total", "fold", ["pos"]),
        _b("count", "fold", ["pos"]),
        _b("scaled", "map", ["prods"], ["total", "count"]),
    ],
    ["scaled"],
)

# Gather through indices computed by a filter: a lookup of the selected rows.
FILTER_GATHER = _prog(
    "filterGather",
    ["keys", "vals"],
    [
        _b("sel", "filter", ["keys"]),
        _b("idx", "map", ["sel"]),
        _b("rows", "gather", ["vals", "idx"]),
        _b("rsum", "fold", ["rows"]),
        _b("vmax", "fold", ["vals"]),
        _b("norm", "map", ["vals"], ["vmax"]),
    ],
    ["rows", "rsum", "norm"],
)

# Same-rate maps and folds only (the shape the Exo realisation handles): rescale by the sum of
# squares, then shift by the maximum.
SUMSQ = _prog(
    "sumSquares",
    ["xs"],
    [
        _b("sq", "map", ["xs"]),
        _b("ss", "fold", ["sq"]),
        _b("mx", "fold", ["xs"]),
        _b("ys", "map", ["xs"], ["ss"]),
        _b("zs", "map", ["ys"], ["mx"]),
    ],
    ["zs"],
)

HAND_WRITTEN = [
    NORMALIZE_INC,
    NORMALIZE2,
    QUICKHULL,
    CLOSEST_POINTS,
    QUADTREE,
    QUADTREE_MID,
    DOT_FILTER,
    FILTER_GATHER,
    SUMSQ,
]

# Known optima of the hand-written programs (verified by brute force and every exact solver).
KNOWN_OPTIMA = {"normalizeInc": 9, "normalize2": 51}


def random_program(
    n: int,
    seed: int = 0,
    *,
    filter_p: float = 0.15,
    gather_p: float = 0.06,
    cross_p: float = 0.02,
    external_p: float = 0.03,
    generate_p: float = 0.03,
    fold_p: float = 0.2,
    inputs: int = 2,
    scalar_external_p: float = 0.0,
    name: str | None = None,
) -> FusionInstance:
    """A random well-formed program of `n` bindings. Operands prefer recent arrays, filters nest
    at most two deep, crosses read root-rate arrays only (keeps the interpreter's data small).
    With `scalar_external_p` > 0 an external takes that often scalars only (or, with no scalar
    bound yet, nothing): the seed's `external ins` over any values."""
    rng = random.Random(seed)
    ins = [f"in{k}" for k in range(max(1, inputs))]
    rates = {x: "n" for x in ins}
    depth = {"n": 0}
    arrays: list[str] = list(ins)
    scalars: list[str] = []
    bindings: list[dict[str, Any]] = []
    used: set[str] = set()

    def pick(pool: list[str]) -> str:
        if rng.random() < 0.7:
            return rng.choice(pool[-6:])
        return rng.choice(pool)

    def some_scalars() -> list[str]:
        return [rng.choice(scalars)] if scalars and rng.random() < 0.35 else []

    for k in range(n):
        name_k = f"b{k}"
        r = rng.random()
        cum = [
            ("filter", filter_p),
            ("gather", gather_p),
            ("cross", cross_p),
            ("external", external_p),
            ("generate", generate_p),
            ("fold", fold_p),
        ]
        op = "map"
        for o, p in cum:
            if r < p:
                op = o
                break
            r -= p
        if op == "filter":
            a = pick(arrays)
            if depth.get(rates[a], 0) >= 2:
                op = "map"
        if op == "cross":
            roots = [
                x
                for x in arrays
                if depth.get(rates[x], 0) == 0 and not rates[x].startswith(("ext", "cross"))
            ]
            if not roots:
                op = "map"
        if op == "map":
            a = pick(arrays)
            args = [a]
            same = [x for x in arrays if rates[x] == rates[a] and x != a]
            if same and rng.random() < 0.4:
                args.append(pick(same))
            item = _b(name_k, "map", args, some_scalars())
            rates[name_k] = rates[a]
        elif op == "fold":
            item = _b(name_k, "fold", [pick(arrays)], some_scalars())
        elif op == "filter":
            item = _b(name_k, "filter", [a], some_scalars())
            rates[name_k] = f"filter:{name_k}"
            depth[rates[name_k]] = depth.get(rates[a], 0) + 1
        elif op == "gather":
            idx = pick(arrays)
            item = _b(name_k, "gather", [pick(arrays), idx])
            rates[name_k] = rates[idx]
        elif op == "cross":
            a, b = rng.choice(roots), rng.choice(roots)
            item = _b(name_k, "cross", [a, b])
            rates[name_k] = f"cross:{name_k}"
            depth[rates[name_k]] = 1
        elif op == "generate":
            item = _b(name_k, "generate", [], some_scalars())
            rates[name_k] = "n"
        else:
            outs = [f"{name_k}_{m}" for m in range(rng.randint(1, 2))]
            ins_k = [pick(arrays)]
            if scalar_external_p and rng.random() < scalar_external_p:
                ins_k = sorted(set(rng.sample(scalars, min(len(scalars), 2))))
            item = {"name": name_k, "op": "external", "inputs": ins_k, "outputs": outs}
            for o in outs:
                rates[o] = f"ext:{name_k}"
        bindings.append(item)
        used.update(item["inputs"])
        used.update(item.get("scalars", []))
        if op == "fold":
            scalars.append(name_k)
        elif op == "external":
            arrays.extend(item["outputs"])
        else:
            arrays.append(name_k)
    results = [o for b in bindings for o in (b.get("outputs") or [b["name"]])]
    outputs = [x for x in results if x not in used] or [results[-1]]
    return parse_instance(_prog(name or f"random-{n}-s{seed}", ins, bindings, outputs))


SHIPPED_RANDOM = [(8, 1), (12, 2), (20, 3), (30, 4)]


def write_shipped(outdir: Path) -> list[Path]:
    """Write the shipped set deterministically; returns the paths written."""
    docs = [instance_to_json(parse_instance(d)) for d in HAND_WRITTEN]
    docs += [instance_to_json(random_program(n, s)) for n, s in SHIPPED_RANDOM]
    return write_instance_files(outdir, docs)


if __name__ == "__main__":
    for p in write_shipped(Path(__file__).resolve().parent.parent / "instances" / "fusion"):
        print(p)


def sample(size: int, seed: int = 0) -> FusionInstance:
    """A random program of `size` bindings: the problem's generator for tests and widgets."""
    return random_program(max(1, size), seed)
