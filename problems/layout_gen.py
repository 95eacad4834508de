"""Layout instances: the seed's examples (003, poprithms unwinding) and a random graph generator.

Every function returns a validated `LayoutInstance`; `write_shipped` writes the shipped set of
`instances/layout/` deterministically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tensorplan.problems.core import write_instance_files
from tensorplan.problems.layout import LayoutInstance, Pair, Tensor, instance_to_json


def _inst(name: str, tensors: list[Tensor], pairs: list[tuple[str, str, float]]) -> LayoutInstance:
    return LayoutInstance(tuple(tensors), tuple(Pair(a, b, float(v)) for a, b, v in pairs), name)


def one_pair() -> LayoutInstance:
    """Sink and source of shape (2,3) tied with value 5, the sink feeding a barrier: 30.0."""
    return _inst(
        "one-pair",
        [
            Tensor("sink", "sink", (2, 3)),
            Tensor("source", "source", (2, 3)),
            Tensor("out", "barrier", (2, 3), ("sink",)),
        ],
        [("sink", "source", 5.0)],
    )


def exercise(shared: bool = False) -> LayoutInstance:
    """The objective-function exercise: 80.0 with distinct labels, 85.0 when A[2] == D[2]."""
    d = (4, 5, 2, 7) if shared else (4, 5, 6, 7)
    return _inst(
        "exercise-shared" if shared else "exercise",
        [
            Tensor("A", "source", (1, 4), layout=(0, 1, 2, 3)),
            Tensor("B", "sink", (1, 4)),
            Tensor("E", "reshape", (2, 2), ("B",)),
            Tensor("C", "sink", (2, 2)),
            Tensor("D", "source", (2, 2), layout=d),
        ],
        [("A", "B", 5.0), ("C", "D", 2.0), ("C", "E", 7.0), ("D", "E", 11.0)],
    )


def dim_shuffle_example() -> LayoutInstance:
    """A sink seen through a dim_shuffle, tied to a source with value 7.5 per element: 30.0."""
    return _inst(
        "dim-shuffle",
        [
            Tensor("sink", "sink", (2, 2)),
            Tensor("shuffled", "dim_shuffle", inputs=("sink",), permutation=(1, 0)),
            Tensor("source", "source", (2, 2), layout=("red", "green", "blue", "yellow")),
        ],
        [("shuffled", "source", 7.5)],
    )


def matmul_example() -> LayoutInstance:
    """out = matmul(X.dimShuffle(perm), concat(Y, Z.reverse(dims))); the matmul is a fixed point."""
    return _inst(
        "matmul",
        [
            Tensor("X", "sink", (3, 2)),
            Tensor("Y", "sink", (2, 4)),
            Tensor("Z", "sink", (1, 4)),
            Tensor("Xt", "dim_shuffle", inputs=("X",), permutation=(1, 0)),
            Tensor("Zr", "reverse", inputs=("Z",), axes=(1,)),
            Tensor("rhs", "concat", inputs=("Y", "Zr"), axis=0),
            Tensor("lhs_target", "source", (2, 3)),
            Tensor("rhs_target", "source", (3, 4)),
            Tensor("out", "fixed_point", (2, 4), ("Xt", "rhs")),
        ],
        [("Xt", "lhs_target", 1.0), ("rhs", "rhs_target", 1.0)],
    )


def unbroadcast_add() -> LayoutInstance:
    """Out = matmul(A, B) + C, the matmul a barrier; the add ties its two inputs."""
    return _inst(
        "unbroadcast-add",
        [
            Tensor("A", "sink", (2, 3)),
            Tensor("B", "sink", (3, 2)),
            Tensor("C", "sink", (2, 2)),
            Tensor("A_target", "source", (2, 3)),
            Tensor("B_target", "source", (3, 2)),
            Tensor("mm", "barrier", (2, 2), ("A", "B")),
            Tensor("out", "sum_like", inputs=("mm", "C"), unwind_index=0),
        ],
        [("A", "A_target", 1.0), ("B", "B_target", 1.0), ("mm", "C", 1.0)],
    )


def broadcast_add() -> LayoutInstance:
    """act + bias with bias (4,1) broadcast to (4,3): a sum_like_reduce ties the bias's layout."""
    return _inst(
        "broadcast-add",
        [
            Tensor("act", "sink", (4, 3)),
            Tensor("bias", "sink", (4, 1)),
            Tensor("act_target", "source", (4, 3)),
            Tensor("sum", "sum_like", inputs=("act", "bias"), unwind_index=0),
            Tensor("reduced", "sum_like_reduce", (4, 1), ("act",)),
        ],
        [("act", "act_target", 1.0), ("reduced", "bias", 1.0)],
    )


def call_copies(v_target: float = 1.0, v_copy: float = 1.0, v_sum: float = 1.0) -> LayoutInstance:
    """Call(a, b) = matmul(a.T, b.reshape(3, 2)); sumOut = Call(A, B) + Call(C, D): 9 pairs."""
    return _inst(
        "call-copies",
        [
            Tensor("A", "sink", (3, 2)),
            Tensor("B", "sink", (6,)),
            Tensor("C", "sink", (3, 2)),
            Tensor("D", "sink", (6,)),
            Tensor("a", "sink", (3, 2)),
            Tensor("b", "sink", (6,)),
            Tensor("aT", "dim_shuffle", inputs=("a",), permutation=(1, 0)),
            Tensor("bR", "reshape", (3, 2), ("b",)),
            Tensor("lhs_target", "source", (2, 3)),
            Tensor("rhs_target", "source", (3, 2)),
            Tensor("mm", "fixed_point", (2, 2), ("aT", "bR")),
            Tensor("E", "sink", (2, 2)),
            Tensor("F", "sink", (2, 2)),
            Tensor("sumOut", "sum_like", inputs=("E", "F"), unwind_index=0),
        ],
        [
            ("aT", "lhs_target", v_target),
            ("bR", "rhs_target", v_target),
            ("A", "a", v_copy),
            ("C", "a", v_copy),
            ("B", "b", v_copy),
            ("D", "b", v_copy),
            ("mm", "E", v_copy),
            ("mm", "F", v_copy),
            ("E", "F", v_sum),
        ],
    )


def chained_matmuls(
    v_target: float, v_chain: float, v_copy: float, name: str = "chained-matmuls"
) -> LayoutInstance:
    """Call(x) = matmul(w, x); out = Call(Call(Call(input))); the matmul is a fixed point.

    The seed's two candidates score 10 vT + 24 vC (x takes its target layout) and
    4 vT + 6 vM + 36 vC (x takes the matmul output's layout).
    """
    return _inst(
        name,
        [
            Tensor("w", "sink", (2, 2)),
            Tensor("x", "sink", (2, 3)),
            Tensor("input", "sink", (2, 3)),
            Tensor("a", "sink", (2, 3)),
            Tensor("b", "sink", (2, 3)),
            Tensor("c", "sink", (2, 3)),
            Tensor("w_target", "source", (2, 2)),
            Tensor("x_target", "source", (2, 3)),
            Tensor("mm", "fixed_point", (2, 3), ("w", "x")),
        ],
        [
            ("w", "w_target", v_target),
            ("x", "x_target", v_target),
            ("x", "mm", v_chain),
            ("input", "x", v_copy),
            ("mm", "a", v_copy),
            ("a", "x", v_copy),
            ("mm", "b", v_copy),
            ("b", "x", v_copy),
            ("mm", "c", v_copy),
        ],
    )


# --- random graphs ------------------------------------------------------------------------------


def _base_shape(size: int, rng: np.random.Generator) -> tuple[int, ...]:
    divisors = [d for d in range(2, int(size**0.5) + 1) if size % d == 0]
    if not divisors:
        return (size,)
    a = int(rng.choice(divisors))
    rest = size // a
    sub = [d for d in range(2, int(rest**0.5) + 1) if rest % d == 0]
    if sub and rng.random() < 0.5:
        b = int(rng.choice(sub))
        return (a, b, rest // b)
    return (a, rest)


def _tile_layout(shape: tuple[int, ...], tiles: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A tile mapping: the flat tensor cut into `tiles` contiguous blocks on random tiles."""
    n = int(np.prod(shape))
    block = np.minimum(np.arange(n) * tiles // max(n, 1), tiles - 1)
    return tuple(rng.permutation(tiles)[block].tolist())


def random_graph(
    num_ops: int, size: int, seed: int = 0, *, tiles: int = 8, num_sinks: int | None = None
) -> LayoutInstance:
    """A random unwinding graph: sinks of about `size` elements, `num_ops` ops and pairs.

    Ops are drawn among the view ops, barriers, sum_like(_reduce) and target sources; about one
    op in three adds a valued pair (to another tensor of the same shape or to a new source with a
    random tile layout over `tiles` tiles). Values are multiples of 0.5 in [0.5, 10].
    """
    rng = np.random.default_rng(seed)
    tensors: list[Tensor] = []
    shapes: dict[str, tuple[int, ...]] = {}
    pairs: list[tuple[str, str, float]] = []
    counter = [0]

    def add(t: Tensor, shape: tuple[int, ...]) -> str:
        tensors.append(t)
        shapes[t.id] = shape
        return t.id

    def new_id(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def value() -> float:
        return float(rng.integers(1, 21)) / 2

    def target(of: str) -> None:
        sid = new_id("t")
        layout = _tile_layout(shapes[of], tiles, rng) if rng.random() < 0.7 else None
        add(Tensor(sid, "source", shapes[of], layout=layout), shapes[of])
        pairs.append((of, sid, value()))

    k = num_sinks or max(1, min(8, num_ops // 6 + 1))
    base = _base_shape(size, rng)
    for _ in range(k):
        add(Tensor(new_id("s"), "sink", base), base)
    kinds = [
        "reshape",
        "reverse",
        "dim_shuffle",
        "slice",
        "sub_sample",
        "concat",
        "sum_like",
        "barrier",
        "sum_like_reduce",
        "pair",
        "target",
    ]
    weights = np.array([2, 2, 2, 1, 1, 1, 1, 1, 0.5, 3, 2], dtype=float)
    weights /= weights.sum()
    ops = 0
    while ops < num_ops:
        kind = str(rng.choice(kinds, p=weights))
        ids = list(shapes)
        src = ids[int(rng.integers(len(ids)))]
        shp = shapes[src]
        n = int(np.prod(shp))
        tid = new_id("v")
        if kind == "reshape":
            new = _base_shape(n, rng)
            add(Tensor(tid, "reshape", new, (src,)), new)
        elif kind == "reverse":
            axes = tuple(sorted(set(rng.integers(0, len(shp), size=1 + len(shp) // 2).tolist())))
            add(Tensor(tid, "reverse", inputs=(src,), axes=axes), shp)
        elif kind == "dim_shuffle":
            perm = tuple(rng.permutation(len(shp)).tolist())
            add(
                Tensor(tid, "dim_shuffle", inputs=(src,), permutation=perm),
                tuple(shp[p] for p in perm),
            )
        elif kind == "slice":
            if max(shp) < 2:
                continue
            start, end = [], []
            for d in shp:
                s = int(rng.integers(0, max(1, d // 2)))
                e = int(rng.integers(s + 1, d + 1))
                start.append(s)
                end.append(e)
            add(
                Tensor(tid, "slice", inputs=(src,), start=tuple(start), end=tuple(end)),
                tuple(e - s for s, e in zip(start, end, strict=True)),
            )
        elif kind == "sub_sample":
            strides = tuple(int(rng.integers(1, 3)) for _ in shp)
            add(
                Tensor(tid, "sub_sample", inputs=(src,), strides=strides),
                tuple(-(-d // s) for d, s in zip(shp, strides, strict=True)),
            )
        elif kind == "concat":
            same = [i for i in ids if len(shapes[i]) == len(shp)]
            axis = int(rng.integers(len(shp)))
            fits = [
                i for i in same if all(shapes[i][d] == shp[d] for d in range(len(shp)) if d != axis)
            ]
            other = fits[int(rng.integers(len(fits)))]
            if n + int(np.prod(shapes[other])) > 2 * size:
                continue
            out = tuple(shp[d] + shapes[other][d] if d == axis else shp[d] for d in range(len(shp)))
            add(Tensor(tid, "concat", inputs=(src, other), axis=axis), out)
        elif kind == "sum_like":
            same = [i for i in ids if shapes[i] == shp and i != src]
            if not same:
                continue
            other = same[int(rng.integers(len(same)))]
            add(Tensor(tid, "sum_like", inputs=(other, src), unwind_index=1), shp)
            if rng.random() < 0.5:
                pairs.append((src, other, value()))
        elif kind == "barrier":
            add(Tensor(tid, "barrier", shp, (src,)), shp)
        elif kind == "sum_like_reduce":
            red = (*shp[:-1], 1)
            add(Tensor(tid, "sum_like_reduce", red, (src,)), red)
            bias = add(Tensor(new_id("s"), "sink", red), red)
            pairs.append((tid, bias, value()))
        elif kind == "pair":
            same = [i for i in ids if shapes[i] == shp and i != src]
            if not same:
                target(src)
            else:
                pairs.append((src, same[int(rng.integers(len(same)))], value()))
        else:
            target(src)
        ops += 1
    for sink in [t.id for t in tensors if t.op == "sink"]:
        if not any(sink in (a, b) for a, b, _ in pairs) and rng.random() < 0.5:
            target(sink)
    return _inst(f"random-{num_ops}ops-{size}el-s{seed}", tensors, pairs)


def scaled_exercise(n: int, seed: int = 0, *, labels: int | None = None) -> LayoutInstance:
    """The exercise graph with n-element tensors: B (1,n) reshaped to E (n//m, m) etc.

    A and D get random labels from `labels` values (default: all distinct), so some positions share
    labels like the 85.0 variant.
    """
    rng = np.random.default_rng(seed)
    m = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
    pool = labels or 2 * n
    a = tuple(rng.integers(0, pool, n).tolist())
    d = tuple(rng.integers(0, pool, n).tolist())
    return _inst(
        f"exercise-{n}-s{seed}",
        [
            Tensor("A", "source", (1, n), layout=a),
            Tensor("B", "sink", (1, n)),
            Tensor("E", "reshape", (n // m, m), ("B",)),
            Tensor("C", "sink", (n // m, m)),
            Tensor("D", "source", (n // m, m), layout=d),
        ],
        [("A", "B", 5.0), ("C", "D", 2.0), ("C", "E", 7.0), ("D", "E", 11.0)],
    )


def seed_examples() -> list[LayoutInstance]:
    return [
        one_pair(),
        exercise(False),
        exercise(True),
        dim_shuffle_example(),
        matmul_example(),
        unbroadcast_add(),
        broadcast_add(),
        call_copies(),
        chained_matmuls(10.0, 1.0, 1.0, "chained-matmuls-target"),
        chained_matmuls(2.0, 1.0, 1.0, "chained-matmuls-chain"),
    ]


def shipped() -> list[LayoutInstance]:
    return [
        *seed_examples(),
        random_graph(12, 12, seed=1),
        random_graph(30, 24, seed=2),
        random_graph(60, 64, seed=3),
        random_graph(150, 240, seed=4, tiles=16),
        scaled_exercise(100_000, seed=5, labels=16),
    ]


def dumps(data: Mapping[str, Any]) -> str:
    """JSON with one tensor and one pair per line: diffable and still compact."""
    head = {k: v for k, v in data.items() if k not in ("tensors", "pairs")}
    lines = [json.dumps(head)[:-1] + ","]
    for key in ("tensors", "pairs"):
        items = [" " + json.dumps(x) for x in data[key]]
        lines.append(f' "{key}": [')
        lines.append(",\n".join(items))
        lines.append(" ]," if key == "tensors" else " ]")
    return "\n".join(lines) + "\n}\n"


def write_shipped(outdir: Path) -> list[Path]:
    """Write the shipped set to `outdir` (one JSON file per instance); returns the paths."""
    return write_instance_files(outdir, (instance_to_json(i) for i in shipped()), dumps)


if __name__ == "__main__":
    for p in write_shipped(Path(__file__).resolve().parent.parent / "instances" / "layout"):
        print(p)


def sample(size: int, seed: int = 0) -> LayoutInstance:
    """A random unwinding graph of `size` ops over small sinks: the problem's generator for
    tests and widgets."""
    return random_graph(max(2, size), max(4, size), seed)
