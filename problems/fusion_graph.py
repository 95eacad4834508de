"""Fusion clustering's data model: bindings, programs, and the dependency graph with its rates.

A program is a list of bindings in combinator normal form over input arrays; `build_graph` derives
the dependency graph, fusion-preventing edges, iteration rates and the constant pairs the seed's
optimised form drops (see `problems.fusion` for the problem, its checker and objective).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tensorplan.problems.core import (
    InstanceError,
)

OPS = ("map", "fold", "filter", "gather", "cross", "generate", "external")
DEFAULT_RATE = "n"


@dataclass(frozen=True)
class Binding:
    """One combinator. `name` is its node name; `outputs` are the names it binds (externals bind
    several, every other op binds exactly its own name)."""

    name: str
    op: str
    inputs: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    rate: str | None = None  # generate only: the rate label of the array it produces

    @property
    def results(self) -> tuple[str, ...]:
        return self.outputs if self.op == "external" else (self.name,)


@dataclass(frozen=True)
class Graph:
    """The dependency graph and everything derived from it that solvers and the objective share."""

    n: int
    names: tuple[str, ...]
    edges: Mapping[tuple[int, int], bool]  # (producer, consumer) -> fusion-preventing
    rate: tuple[str, ...]  # iteration rate of each node
    parent: Mapping[str, str | None]  # rate -> parent rate (None for a root)
    generator: Mapping[str, int]  # generated rate -> generating node
    root: Mapping[str, str]
    depth: Mapping[str, int]
    reads: tuple[frozenset[str], ...]  # arrays each node reads element-wise
    weight: Mapping[tuple[int, int], int]  # W_ij for i < j
    fusable: frozenset[tuple[int, int]]  # pairs i < j kept by the optimised form
    requires: Mapping[tuple[int, int], tuple[tuple[int, int], ...]]  # rate-rule chain pairs
    contractible: tuple[int, ...]  # nodes with a contraction variable c_i
    succ: tuple[tuple[int, ...], ...] = field(default=())
    pred: tuple[tuple[int, ...], ...] = field(default=())

    def w(self, i: int, j: int) -> int:
        return self.weight[(i, j) if i < j else (j, i)]

    def pair_fusable(self, i: int, j: int) -> bool:
        return (i, j) in self.fusable if i < j else (j, i) in self.fusable


@dataclass(frozen=True)
class FusionInstance:
    inputs: tuple[str, ...]
    bindings: tuple[Binding, ...]
    outputs: tuple[str, ...]
    input_rates: tuple[tuple[str, str], ...] = ()  # (input, rate label); default rate "n"
    name: str | None = None

    def __post_init__(self) -> None:
        validate(self)

    @cached_property
    def graph(self) -> Graph:
        return build_graph(self)

    @cached_property
    def node_of(self) -> dict[str, int]:
        """Node index by node name and by every result name (external outputs alias their node)."""
        out: dict[str, int] = {}
        for k, b in enumerate(self.bindings):
            for r in b.results:
                out[r] = k
            out[b.name] = k
        return out


@dataclass(frozen=True)
class FusionSolution:
    """Clusters of node names, in execution order."""

    clusters: tuple[tuple[str, ...], ...]


# --- validation -----------------------------------------------------------------------------------

ARITY = {"fold": 1, "filter": 1, "gather": 2, "cross": 2, "generate": 0}
ARGS = {"gather": "[data, indices]", "cross": "[a, b]"}


def validate(inst: FusionInstance) -> None:
    """Names bound once, defined before use, ops known, arities right, arrays and scalars apart,
    element-wise inputs of one binding at one rate. Raises InstanceError naming the field."""
    kinds: dict[str, tuple[str, str]] = {}  # name -> (kind "array"|"scalar"|"opaque", where bound)
    rates: dict[str, str] = {}
    later: dict[str, int] = {}  # name -> first binding producing it
    for k, b in enumerate(inst.bindings):
        for r in b.results:
            later.setdefault(r, k)
    label = dict(inst.input_rates)
    for i, x in enumerate(inst.inputs):
        if x in kinds:
            raise InstanceError(
                f"inputs[{i}]", f"name {x!r} is bound twice (first at {kinds[x][1]})"
            )
        kinds[x] = ("array", f"inputs[{i}]")
        rates[x] = label.get(x, DEFAULT_RATE)
    for x in label:
        if x not in kinds:
            raise InstanceError(f"input_rates.{x}", f"{x!r} is not one of the inputs")
    if not inst.bindings:
        raise InstanceError("bindings", "must list at least one binding")

    def use(name: str, where: str, k: int, want: str) -> str:
        if name not in kinds:
            if name in later and later[name] >= k:
                raise InstanceError(
                    where,
                    f"{name!r} is used before it is defined (bound at bindings[{later[name]}])",
                )
            raise InstanceError(where, f"unknown name {name!r}")
        kind = kinds[name][0]
        if want == "array" and kind == "scalar":
            raise InstanceError(where, f"{name!r} is a scalar (a fold result), not an array")
        if want == "scalar" and kind == "array":
            raise InstanceError(where, f"{name!r} is an array, not a scalar")
        return rates.get(name, "")

    node_names: dict[str, int] = {}
    for k, b in enumerate(inst.bindings):
        w = f"bindings[{k}]"
        if b.op not in OPS:
            raise InstanceError(f"{w}.op", f"unknown op {b.op!r}; known: {', '.join(OPS)}")
        if b.name in node_names:
            raise InstanceError(
                f"{w}.name",
                f"name {b.name!r} is bound twice (first at bindings[{node_names[b.name]}])",
            )
        node_names[b.name] = k
        want = ARITY.get(b.op)
        if want is not None and len(b.inputs) != want:
            shape = f" {ARGS[b.op]}" if b.op in ARGS else ""
            raise InstanceError(
                f"{w}.inputs",
                f"{b.op} takes exactly {want} input"
                f"{'s' if want != 1 else ''}{shape}, "
                f"got {len(b.inputs)}",
            )
        if b.op == "map" and not b.inputs:
            raise InstanceError(f"{w}.inputs", "map takes at least 1 input, got 0")
        if b.op != "external" and b.outputs:
            raise InstanceError(
                f"{w}.outputs", f"only an external binds several outputs, not {b.op}"
            )
        if b.op == "external" and not b.outputs:
            raise InstanceError(f"{w}.outputs", "an external must name at least one output")
        if b.op != "generate" and b.rate is not None:
            raise InstanceError(f"{w}.rate", f"only generate takes a rate, not {b.op}")
        # an external takes any values (the seed's `external ins`): arrays, scalars, or none
        want_in = "any" if b.op == "external" else "array"
        in_rates = [use(x, f"{w}.inputs[{m}]", k, want_in) for m, x in enumerate(b.inputs)]
        for m, s in enumerate(b.scalars):
            use(s, f"{w}.scalars[{m}]", k, "scalar")
        if b.op == "map":
            for m, r in enumerate(in_rates):
                if r != in_rates[0]:
                    raise InstanceError(
                        f"{w}.inputs[{m}]",
                        f"rate {r!r} differs from "
                        f"{b.inputs[0]!r}'s rate {in_rates[0]!r}: map reads "
                        "its inputs element-wise together",
                    )
        for r_i, r in enumerate(b.results):
            where = f"{w}.outputs[{r_i}]" if b.op == "external" else f"{w}.name"
            if r in kinds or (r in node_names and node_names[r] != k):
                first = kinds[r][1] if r in kinds else f"bindings[{node_names[r]}]"
                raise InstanceError(where, f"name {r!r} is bound twice (first at {first})")
            kinds[r] = (
                "scalar" if b.op == "fold" else "opaque" if b.op == "external" else "array",
                w,
            )
            rates[r] = result_rate(b, in_rates)
        if b.op == "external" and b.name not in b.outputs and b.name in kinds:
            raise InstanceError(
                f"{w}.name", f"name {b.name!r} is bound twice (first at {kinds[b.name][1]})"
            )
    for m, x in enumerate(inst.outputs):
        if x not in kinds:
            raise InstanceError(f"outputs[{m}]", f"unknown name {x!r}")
    if not inst.outputs:
        raise InstanceError("outputs", "must name at least one result")


def result_rate(b: Binding, in_rates: Sequence[str]) -> str:
    """The rate of the array a binding produces (folds: their loop's rate)."""
    if b.op == "filter":
        return f"filter:{b.name}"
    if b.op == "cross":
        return f"cross:{b.name}"
    if b.op == "external":
        return f"ext:{b.name}"
    if b.op == "generate":
        return b.rate or DEFAULT_RATE
    if b.op == "gather":
        return in_rates[1]
    return in_rates[0]


def iteration_rate(b: Binding, rate_of: Mapping[str, str]) -> str:
    """The rate of the loop that runs a binding."""
    if b.op == "external":
        return f"opaque:{b.name}"
    if b.op == "generate":
        return b.rate or DEFAULT_RATE
    if b.op == "gather":
        return rate_of[b.inputs[1]]
    return rate_of[b.inputs[0]]


# --- graph ----------------------------------------------------------------------------------------


def build_graph(inst: FusionInstance) -> Graph:
    bs = inst.bindings
    n = len(bs)
    node_of = inst.node_of
    label = dict(inst.input_rates)
    rate_of: dict[str, str] = {x: label.get(x, DEFAULT_RATE) for x in inst.inputs}
    parent: dict[str, str | None] = {r: None for r in rate_of.values()}
    generator: dict[str, int] = {}
    edges: dict[tuple[int, int], bool] = {}
    rate: list[str] = []
    reads: list[frozenset[str]] = []

    def edge(src: str, k: int, preventing: bool) -> None:
        if src not in node_of:  # a program input
            return
        p = node_of[src]
        producer = bs[p]
        prevent = preventing or producer.op in ("fold", "external")
        edges[(p, k)] = edges.get((p, k), False) or prevent

    for k, b in enumerate(bs):
        it = iteration_rate(b, rate_of)
        rate.append(it)
        parent.setdefault(it, None)
        for r in b.results:
            rate_of[r] = result_rate(b, [rate_of[x] for x in b.inputs])
        if b.op in ("filter", "cross"):
            parent[rate_of[b.name]] = it
            generator[rate_of[b.name]] = k
        elif b.op == "external":
            parent.setdefault(f"ext:{b.name}", None)
        elif b.op == "generate":
            parent.setdefault(it, None)
        for m, x in enumerate(b.inputs):
            prevent = (
                (b.op == "gather" and m == 0) or (b.op == "cross" and m == 1) or b.op == "external"
            )
            edge(x, k, prevent)
        for s in b.scalars:
            edge(s, k, True)
        reads.append(frozenset(b.inputs))

    depth: dict[str, int] = {}
    root: dict[str, str] = {}
    for r in parent:
        d, top = 0, r
        while parent[top] is not None:
            top = parent[top]  # type: ignore[assignment]
            d += 1
        depth[r], root[r] = d, top

    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for i, j in edges:
        succ[i].append(j)
        pred[j].append(i)

    # reach[i]: nodes reachable from i; reach_fp[i]: reachable along a path with a preventing edge
    reach = [0] * n
    reach_fp = [0] * n
    for i in range(n - 1, -1, -1):
        for j in succ[i]:
            reach[i] |= (1 << j) | reach[j]
            reach_fp[i] |= ((1 << j) | reach[j]) if edges[(i, j)] else reach_fp[j]

    nn = n * n
    weight: dict[tuple[int, int], int] = {}
    candidates: set[tuple[int, int]] = set()
    for i in range(n):
        for j in range(i + 1, n):
            shared = (i, j) in edges or bool(reads[i] & reads[j])
            weight[(i, j)] = nn if shared else 1
            if (
                root[rate[i]] == root[rate[j]]
                and not (reach_fp[i] >> j) & 1
                and not (reach_fp[j] >> i) & 1
            ):
                candidates.add((i, j))

    requires = {p: rate_chain(rate, depth, generator, *p) for p in candidates}
    fusable = set(candidates)
    changed = True
    while changed:
        changed = False
        for p in list(fusable):
            if any(q not in fusable for q in requires.get(p, ())):
                fusable.discard(p)
                changed = True
    requires = {p: r for p, r in requires.items() if p in fusable}

    contractible = tuple(
        i
        for i in range(n)
        if succ[i] and all(not edges[(i, j)] and (i, j) in fusable for j in succ[i])
    )
    return Graph(
        n,
        tuple(b.name for b in bs),
        edges,
        tuple(rate),
        parent,
        generator,
        root,
        depth,
        tuple(reads),
        weight,
        frozenset(fusable),
        requires,
        contractible,
        tuple(tuple(s) for s in succ),
        tuple(tuple(p) for p in pred),
    )


def rate_chain(
    rate: Sequence[str], depth: Mapping[str, int], generator: Mapping[str, int], i: int, j: int
) -> tuple[tuple[int, int], ...]:
    """Pairs that must also be fused when i and j (same root rate) share a cluster: going up from
    the deeper rate, the node and its rate's generator, and the generator with the other node."""
    ri, rj = rate[i], rate[j]
    if ri == rj:
        return ()
    if depth[ri] >= depth[rj]:
        gen = generator[ri]
        chain = [(i, gen), (gen, j)]
    else:
        gen = generator[rj]
        chain = [(j, gen), (i, gen)]
    keys = [(a, b) if a < b else (b, a) for a, b in chain]
    return tuple(p for p in keys if p[0] != p[1] and p != (min(i, j), max(i, j)))
