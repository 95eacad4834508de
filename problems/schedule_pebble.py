"""A peak bound from Liu's generalized tree pebbling, solved exactly on a relaxed model.

Liu's model (J. W. H. Liu, 1987; "MinMemory" in Jacquelin, Marchal, Robert and Ucar, 2011) is
an in-forest: node x runs after its children and needs their files, its own file `file[x]` and
a work space `work[x]` at once; its file then stays until its parent runs. Liu's algorithm
finds the traversal of least peak exactly: each subtree's best traversal is cut into
hill-valley segments (hills falling, valleys rising), the children's segments are merged by
falling hill - valley, and the parent's step is appended.

A schedule read backwards is such a traversal of a forest relaxation of the DAG: each op keeps
one predecessor as its parent (dropping the other edges allows more orders), and backwards an
op's forest children run before it. An alloc used by an op p and by some of p's forest
children U is live, backwards, from the first of U to run until p. The model holds a share of
it from each child in U until p instead, the shares summing to its size, so never more than
the alloc. Every other alloc is work space at one of its users. At every step of every order
the model then holds at most what is really live, and its optimum is a lower bound on the
peak. On out-trees whose outputs their children read (the `tree` family) only the shares are
slack; `pebble_bound` takes the better of even shares and shares by subtree size (on random
trees of 1,000 / 5,000 ops: 14.0 / 14.4 and 15.7 / 18.1, where the hulls give 12).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

WORK = 1_000_000
"""Segments merged at branching ops per traversal at most (`pebble_bound`): a few per op on
the generated families (a chain merges none), but a segment can be merged again at every
branching ancestor; past this the rule gives no bound rather than take seconds."""

REL_EPS = 1e-9
"""Relative slack on the model's (fractional, floating-point) peak before it is rounded up to
an integer bound: far above the rounding error of summing a few thousand sizes."""

Segment = tuple[float, float, list[int] | None]
"""(hill, valley after it, the nodes it runs or None when no traversal is asked for)."""


class Graph(Protocol):
    """What the bound reads of `schedule.Graph` (structural: `schedule` imports this module)."""

    @property
    def n(self) -> int: ...
    @property
    def preds(self) -> tuple[tuple[int, ...], ...]: ...
    @property
    def op_allocs(self) -> tuple[tuple[int, ...], ...]: ...
    @property
    def alloc_ops(self) -> tuple[tuple[int, ...], ...]: ...
    @property
    def sizes(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Forest:
    """The relaxation of a schedule graph: forest parents (-1: a root), work spaces, and per
    shared alloc (alloc, the forest children of its producer that use it)."""

    parent: tuple[int, ...]
    work: tuple[float, ...]
    shared: tuple[tuple[int, tuple[int, ...]], ...]


def forest(g: Graph) -> Forest:
    """The relaxation of the module docstring. An op's parent is its predecessor sharing the
    most allocs with it (the first of equals). An alloc spreads over the users that are
    forest children of its user with the most of them; with none, it is work space at its
    first user."""
    parent = [-1] * g.n
    for v in range(g.n):
        if g.preds[v]:
            own = set(g.op_allocs[v])
            parent[v] = max(g.preds[v], key=lambda u: len(own.intersection(g.op_allocs[u])))
    work = [0.0] * g.n
    shared: list[tuple[int, tuple[int, ...]]] = []
    for a, users in enumerate(g.alloc_ops):
        kids: tuple[int, ...] = ()
        for p in users:
            mine = tuple(u for u in users if parent[u] == p)
            if len(mine) > len(kids):
                kids = mine
        if kids:
            shared.append((a, kids))
        elif users:
            work[users[0]] += g.sizes[a]
    return Forest(tuple(parent), tuple(work), tuple(shared))


class OverWork(Exception):
    """`liu_traversal` merged more segments than it was allowed."""


def liu_traversal(
    parent: Sequence[int],
    file: Sequence[float],
    work: Sequence[float],
    *,
    order: bool = False,
    budget: float = math.inf,
) -> tuple[float, list[int]]:
    """(least peak, a traversal reaching it if `order`, else []) of Liu's model on the
    in-forest `parent` (-1: a root): node x runs after its children, needing their files,
    `file[x]` and `work[x]`; its file stays until its parent runs (a root's, to the end).
    Raises `OverWork` past `budget` segments merged at ops of several children."""
    n = len(parent)
    children, up = _children_first(parent)
    segs: list[list[Segment]] = [[] for _ in range(n + 1)]
    for x in up:
        kids = children[x]
        if len(kids) == 1:  # the child's segments as they are (its traversal, then x)
            own = segs[kids[0]]
            cur = own[-1][1] if own else 0.0
        else:
            merged = [
                (v - h, c, i, h, v, nodes) for c in kids for i, (h, v, nodes) in enumerate(segs[c])
            ]
            budget -= len(merged)
            if budget < 0:
                raise OverWork
            merged.sort(key=lambda s: s[:3])  # falling hill - valley; each child's in its order
            residual: dict[int, float] = {}
            cur = 0.0
            own = []
            for _, c, _, h, v, nodes in merged:
                base = cur - residual.get(c, 0.0)
                cur = base + v
                residual[c] = v
                _push(own, (base + h, cur, nodes))
        for c in kids:
            segs[c] = []
        fx, wx = (file[x], work[x]) if x < n else (0.0, 0.0)
        _push(own, (cur + wx + fx, fx, ([x] if x < n else []) if order else None))
        segs[x] = own
    root = segs[n]
    trav = [x for _, _, nodes in root for x in nodes or ()]
    return max((h for h, _, _ in root), default=0.0), trav


def _push(segs: list[Segment], point: Segment) -> None:
    """Append a step (hill, valley after it, nodes) to a traversal's hill-valley segments, in
    place. Liu's segments: from the start, the highest hill, then the last lowest valley at or
    after it, and on from there; so the step absorbs the last segments while their hill is
    lower or their valley not lower than its own (amortised O(1): each absorbed once)."""
    h, v, nodes = point
    while segs and (segs[-1][0] < h or segs[-1][1] >= v):
        th, _, tn = segs.pop()
        h = max(h, th)
        nodes = None if nodes is None else [*(tn or ()), *nodes]
    segs.append((h, v, nodes))


def _children_first(parent: Sequence[int]) -> tuple[list[list[int]], list[int]]:
    """(children of each node, with the roots under a virtual node n = len(parent); every node
    in an order where it follows its children, the virtual one last)."""
    n = len(parent)
    children: list[list[int]] = [[] for _ in range(n + 1)]
    for x, p in enumerate(parent):
        children[n if p < 0 else p].append(x)
    down = [n]  # parents before children, read while it grows
    for x in down:
        down.extend(children[x])
    return children, down[::-1]


def subtree_sizes(parent: Sequence[int]) -> list[int]:
    """Ops in each op's forest subtree (itself included)."""
    size = [1] * len(parent)
    for x in _children_first(parent)[1][:-1]:  # the virtual root comes last
        if parent[x] >= 0:
            size[parent[x]] += size[x]
    return size


def pebble_bound(g: Graph) -> int:
    """A lower bound on the peak of every order of `g`: Liu's optimum on `forest(g)`, the
    shared allocs split evenly or by the subtree sizes of the children (the higher); 0 from a
    rule that would merge more than `WORK` segments."""
    fr = forest(g)
    sub = subtree_sizes(fr.parent)
    rules: list[Callable[[int], float]] = [lambda c: 1.0, lambda c: float(sub[c])]
    best = 0
    for weight in rules:
        file = [0.0] * g.n
        for a, kids in fr.shared:
            total = sum(weight(c) for c in kids)
            for c in kids:
                file[c] += g.sizes[a] * weight(c) / total
        try:
            peak, _ = liu_traversal(fr.parent, file, fr.work, budget=WORK)
        except OverWork:
            continue
        best = max(best, math.ceil(peak * (1 - REL_EPS) - REL_EPS))
    return best
