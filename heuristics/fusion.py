"""Fusion heuristics: the paper's two baselines (`none`, `stream`), typed fusion and weight-greedy.

All of them start from one cluster per binding and only ever merge two clusters when the result
stays legal (no fusion-preventing edge inside, no cycle through a third cluster, rate rule), so
every
intermediate clustering is legal and the final one is ordered topologically.
"""

from __future__ import annotations

import heapq
from functools import partial

from tensorplan.problems.core import Options, Result, Solver, heuristic_result, stopwatch
from tensorplan.problems.fusion import (
    FusionInstance,
    FusionSolution,
    Graph,
    objective,
    solution_from_labels,
)


class Merger:
    """A legal clustering under construction: singletons that can be merged pairwise."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.label = list(range(g.n))
        self.members: dict[int, set[int]] = {i: {i} for i in range(g.n)}
        self.succ: dict[int, set[int]] = {i: set(g.succ[i]) for i in range(g.n)}
        self.pred: dict[int, set[int]] = {i: set(g.pred[i]) for i in range(g.n)}
        self.dead: set[tuple[int, int]] = set()  # pairs that can never merge (fp edge / path)

    def _key(self, a: int, b: int) -> tuple[int, int]:
        return (a, b) if a < b else (b, a)

    def rate_ok(self, nodes: set[int]) -> bool:
        """All rates share a root, and every generated rate strictly below the cluster's common
        rate has its generator inside."""
        g = self.g
        rates = {g.rate[i] for i in nodes}
        if len({g.root[r] for r in rates}) > 1:
            return False
        if len(rates) == 1:
            return True
        chains = []
        for r in rates:
            path = [r]
            while g.parent[path[-1]] is not None:
                path.append(g.parent[path[-1]])  # type: ignore[arg-type]
            chains.append(path)
        common = set(chains[0]).intersection(*map(set, chains[1:]))
        for path in chains:
            for r in path:
                if r in common:
                    break
                if g.generator[r] not in nodes:
                    return False
        return True

    def _path(self, a: int, b: int) -> bool:
        """A path a -> ... -> b in the cluster graph through some third cluster."""
        stack = [c for c in self.succ[a] if c != b]
        seen = set(stack)
        while stack:
            c = stack.pop()
            for d in self.succ[c]:
                if d == b:
                    return True
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return False

    def can_merge(self, a: int, b: int) -> bool:
        if a == b:
            return True
        key = self._key(a, b)
        if key in self.dead:
            return False
        g = self.g
        ma, mb = self.members[a], self.members[b]
        if b in self.succ[a] or a in self.succ[b]:
            for i in ma:
                for j in g.succ[i]:
                    if j in mb and g.edges[(i, j)]:
                        self.dead.add(key)
                        return False
            for i in mb:
                for j in g.succ[i]:
                    if j in ma and g.edges[(i, j)]:
                        self.dead.add(key)
                        return False
        if self._path(a, b) or self._path(b, a):
            self.dead.add(key)
            return False
        return self.rate_ok(ma | mb)

    def merge(self, a: int, b: int) -> int:
        """Merge cluster b into a (caller checked legality); returns the surviving label."""
        for i in self.members[b]:
            self.label[i] = a
        self.members[a] |= self.members.pop(b)
        for c in self.succ.pop(b):
            self.pred[c].discard(b)
            if c != a:
                self.succ[a].add(c)
                self.pred[c].add(a)
        for c in self.pred.pop(b):
            self.succ[c].discard(b)
            if c != a:
                self.pred[a].add(c)
                self.succ[c].add(a)
        self.succ[a].discard(a)
        self.pred[a].discard(a)
        self.succ[a].discard(b)
        self.pred[a].discard(b)
        for x, y in [p for p in self.dead if b in p]:
            self.dead.discard((x, y))
            other = y if x == b else x
            if other != a:
                self.dead.add(self._key(a, other))
        return a

    def try_merge(self, a: int, b: int) -> bool:
        if a != b and self.can_merge(a, b):
            self.merge(a, b)
            return True
        return False


def cluster_none(inst: FusionInstance) -> list[int]:
    """One loop per binding: the unfused program."""
    return list(range(len(inst.bindings)))


def cluster_stream(inst: FusionInstance) -> list[int]:
    """Stream fusion: fuse a producer into its single consumer, over a fusible edge."""
    g = inst.graph
    m = Merger(g)
    for i in range(g.n):
        if len(g.succ[i]) == 1:
            j = g.succ[i][0]
            if not g.edges[(i, j)]:
                m.try_merge(m.label[i], m.label[j])
    return m.label


def cluster_typed(inst: FusionInstance) -> list[int]:
    """Typed fusion (Kennedy-McKinley): per rate, visit its nodes in topological order and put each
    into the first earlier cluster of the same rate it can legally join. Never fuses across
    rates."""
    g = inst.graph
    m = Merger(g)
    rates: list[str] = []
    for r in g.rate:
        if r not in rates:
            rates.append(r)
    for r in rates:
        opened: list[int] = []
        for i in range(g.n):
            if g.rate[i] != r:
                continue
            for c in opened:
                if m.try_merge(c, m.label[i]):
                    break
            else:
                opened.append(m.label[i])
    return m.label


def contraction_gain(g: Graph, m: Merger, a: int, b: int) -> int:
    """How many arrays merging clusters a and b would contract (all consumers then inside)."""
    both = m.members[a] | m.members[b]
    contract = set(g.contractible)
    return sum(
        1
        for i in both
        if i in contract
        and all(j in both for j in g.succ[i])
        and not all(m.label[j] == m.label[i] for j in g.succ[i])
    )


def cluster_greedy(inst: FusionInstance) -> list[int]:
    """Repeatedly merge the pair of clusters with the largest fusion weight between them (the sum
    of W_ij over fusable node pairs across the two) while the merge is legal; among pairs of that
    weight, the merge that contracts most arrays, then the smallest pair.

    Pairs wait in a heap keyed by (-weight, pair) with lazy deletion (an entry is current while
    its weight is), so each step looks only at the heaviest tier instead of sorting every pair."""
    g = inst.graph
    m = Merger(g)
    weight: dict[tuple[int, int], int] = {p: g.weight[p] for p in g.fusable}
    incident: dict[int, set[tuple[int, int]]] = {i: set() for i in range(g.n)}
    for p in weight:
        incident[p[0]].add(p)
        incident[p[1]].add(p)

    def drop(p: tuple[int, int]) -> int:
        incident[p[0]].discard(p)
        incident[p[1]].discard(p)
        return weight.pop(p)

    heap = [(-w, p) for p, w in weight.items()]
    heapq.heapify(heap)
    while heap:
        chosen, top, best_gain = None, 0, -1
        held: list[tuple[int, tuple[int, int]]] = []  # current entries to put back
        while heap:
            neg, p = heap[0]
            if weight.get(p) != -neg:
                heapq.heappop(heap)  # stale
                continue
            if chosen is not None and -neg < top:
                break
            heapq.heappop(heap)
            if m.can_merge(*p):
                gain = contraction_gain(g, m, *p)  # ties: the merge that contracts most arrays
                if gain > best_gain:
                    if chosen is not None:
                        held.append((-top, chosen))
                    chosen, top, best_gain = p, -neg, gain
                else:
                    held.append((neg, p))
            elif p in m.dead:
                drop(p)
            else:
                held.append((neg, p))
        for entry in held:
            heapq.heappush(heap, entry)
        if chosen is None:
            break
        a, b = chosen
        m.merge(a, b)
        drop(chosen)
        changed = set()
        for x in list(incident[b]):
            w = drop(x)
            other = x[0] if x[1] == b else x[1]
            key = (a, other) if a < other else (other, a)
            weight[key] = weight.get(key, 0) + w
            incident[a].add(key)
            incident[other].add(key)
            changed.add(key)
        for x in [x for x in incident[a] if x in m.dead]:
            drop(x)
        for key in changed:
            if key in weight:
                heapq.heappush(heap, (-weight[key], key))
    return m.label


def _run(
    name: str,
    method,
    instance: FusionInstance,
    opts: Options,
) -> Result:
    with stopwatch() as elapsed:
        labels = method(instance)
        sol: FusionSolution = solution_from_labels(instance, labels)
        value = objective(instance, sol)
    return heuristic_result(name, value, sol, elapsed(), clusters=len(sol.clusters))


HEURISTICS = {
    "greedy": (cluster_greedy, "merge the heaviest legal pair of clusters until none is left"),
    "typed": (cluster_typed, "Kennedy-McKinley typed fusion: same-rate loops only"),
    "stream": (cluster_stream, "stream-fusion baseline: producer into its single consumer"),
    "none": (cluster_none, "baseline: one loop per binding"),
}

SOLVERS = [
    Solver(name, "heuristic", partial(_run, name, method), summary)
    for name, (method, summary) in HEURISTICS.items()
]
