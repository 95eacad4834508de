"""Legal clusterings near a model's answer, and their local improvement (used by `strong`).

A MIP solution of the multicut model may be intransitive (a fused pair's partner is split) or,
without pi rows, cyclic. Merging its fused pairs one at a time is fragile: fusing a and b before
the node k between them is in the cluster closes a cycle through k, so the pair is refused for
good and the result can be far worse than the MIP value. Here merges are of whole sets of
clusters: a component of fused pairs at once, or two clusters together with every cluster on a
path between them (their convex closure), so a legal clustering of the MIP's value is found when
one exists nearby. The objective only pays for splits (all weights are positive), so any legal
merge improves it; `fill` merges to a maximal clustering, and `improve` moves single nodes between
clusters while that lowers the objective.

Legality (the checker's rules restated on the graph): every pair inside a cluster is a fusable
pair, the rate-chain pairs of each such pair are inside too, and the quotient graph is acyclic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping

from tensorplan.problems.fusion import Graph


def _key(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


class Clustering:
    """A legal clustering of one part's nodes (nodes outside it never share an edge with it)."""

    def __init__(
        self,
        g: Graph,
        nodes: Iterable[int],
        pairs: frozenset[tuple[int, int]] | set[tuple[int, int]],
        labels: Mapping[int, int] | None = None,
    ) -> None:
        """`pairs`: the pairs allowed to share a cluster. `labels` (legal) to start from, else
        singletons."""
        self.g, self.pairs = g, pairs
        self.nodes = list(nodes)
        self.label: dict[int, int] = {i: (labels[i] if labels else i) for i in self.nodes}
        self.members: dict[int, set[int]] = {}
        for i, c in self.label.items():
            self.members.setdefault(c, set()).add(i)
        self.version: dict[int, int] = dict.fromkeys(self.members, 0)
        self.refused: set[tuple[int, int, int, int]] = set()  # by `try_pair`, with versions

    # --- queries ---------------------------------------------------------------------------------

    def _succ(self, c: int) -> set[int]:
        g, lab = self.g, self.label
        return {lab[j] for i in self.members[c] for j in g.succ[i]} - {c}

    def _pred(self, c: int) -> set[int]:
        g, lab = self.g, self.label
        return {lab[j] for i in self.members[c] for j in g.pred[i]} - {c}

    def _reach(self, start: set[int], forward: bool) -> set[int]:
        step = self._succ if forward else self._pred
        seen: set[int] = set()
        todo = list(start)
        while todo:
            c = todo.pop()
            for d in step(c):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    def closure(self, a: int, b: int) -> set[int]:
        """Clusters a and b with every cluster on a path between them (a convex set)."""
        down_a = self._reach({a}, True)
        if b in down_a:
            return {a, b} | (down_a & self._reach({b}, False))
        down_b = self._reach({b}, True)
        if a in down_b:
            return {a, b} | (down_b & self._reach({a}, False))
        return {a, b}

    def can_join(self, ids: set[int]) -> bool:
        """Whether merging the clusters `ids` into one keeps the clustering legal."""
        if len(ids) < 2:
            return True
        groups = [self.members[c] for c in ids]
        inside = set().union(*groups)
        pairs, req = self.pairs, self.g.requires
        for k, ga in enumerate(groups):
            for gb in groups[k + 1 :]:
                for i in ga:
                    for j in gb:
                        p = _key(i, j)
                        if p not in pairs:
                            return False
                        for q in req.get(p, ()):
                            if q[0] not in inside or q[1] not in inside:
                                return False
        # acyclic: no path leaves the merged set and comes back
        g, lab = self.g, self.label
        todo = [lab[j] for i in inside for j in g.succ[i] if lab[j] not in ids]
        seen = set(todo)
        while todo:
            c = todo.pop()
            for i in self.members[c]:
                for j in g.succ[i]:
                    d = lab[j]
                    if d in ids:
                        return False
                    if d not in seen and d != c:
                        seen.add(d)
                        todo.append(d)
        return True

    # --- changes ---------------------------------------------------------------------------------

    def join(self, ids: set[int]) -> int:
        """Merge the clusters `ids` (the caller checked legality); returns the surviving label."""
        keep = min(ids)
        for c in ids - {keep}:
            for i in self.members.pop(c):
                self.label[i] = keep
                self.members[keep].add(i)
            self.version.pop(c, None)
        self.version[keep] = self.version.get(keep, 0) + 1
        return keep

    def try_join(self, ids: set[int]) -> bool:
        if len(ids) > 1 and self.can_join(ids):
            self.join(ids)
            return True
        return False

    def try_pair(self, i: int, j: int) -> bool:
        """Fuse nodes i and j, with the clusters between theirs; whether it was legal."""
        a, b = self.label[i], self.label[j]
        if a == b:
            return True
        # a refusal is remembered until a or b changes (as `fill` does); the closure holds a and
        # b, so a pair of their members that may not share a cluster refuses it uncomputed
        key = (min(a, b), max(a, b), self.version[a], self.version[b])
        if key in self.refused:
            return False
        pairs = self.pairs
        if any(_key(u, v) not in pairs for u in self.members[a] for v in self.members[b]) or (
            not self.try_join(self.closure(a, b))
        ):
            self.refused.add(key)
            return False
        return True

    def labels(self) -> dict[int, int]:
        return dict(self.label)


def repair(
    g: Graph,
    nodes: list[int],
    pairs: frozenset[tuple[int, int]] | set[tuple[int, int]],
    fused: list[tuple[int, int]],
    deadline: float = math.inf,
) -> dict[int, int]:
    """A legal clustering near a (possibly intransitive or cyclic) solution whose fused pairs are
    `fused`, most wanted first: each component of fused pairs is merged whole when legal, then the
    pairs one by one with their convex closure; `fill` makes the clustering maximal and `improve`
    moves single nodes where that pays. Every step keeps the clustering legal, so at `deadline`
    (a `time.perf_counter()` value) the steps stop and the clustering so far is returned."""
    cl = Clustering(g, nodes, pairs)
    parent = {i: i for i in nodes}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in fused:
        parent[find(i)] = find(j)
    comps: dict[int, list[int]] = {}
    for i in nodes:
        comps.setdefault(find(i), []).append(i)
    for k, comp in enumerate(sorted(comps.values(), key=lambda c: (-len(c), c[0]))):
        if len(comp) > 1:
            if not k & 63 and time.perf_counter() > deadline:
                return cl.labels()
            cl.try_join({cl.label[i] for i in comp})
    for k, (i, j) in enumerate(fused):
        if not k & 63 and time.perf_counter() > deadline:
            return cl.labels()
        cl.try_pair(i, j)
    fill(cl, deadline)
    if improve(cl, g.contractible, deadline=deadline):
        fill(cl, deadline)
    return cl.labels()


def fill(cl: Clustering, deadline: float = math.inf) -> None:
    """Merge clusters (with their closure) while some merge is legal, heaviest pairs first; every
    legal merge lowers the objective. Refusals are remembered until either cluster changes.
    Stops at `deadline` (a `time.perf_counter()` value)."""
    g = cl.g
    order = sorted(cl.pairs, key=lambda p: (-g.weight[p], p))
    refused: set[tuple[int, int, int, int]] = set()
    changed = True
    while changed:
        changed = False
        for k, (i, j) in enumerate(order):
            if not k & 255 and time.perf_counter() > deadline:
                return
            if i not in cl.label or j not in cl.label:
                continue
            a, b = cl.label[i], cl.label[j]
            if a == b:
                continue
            a, b = min(a, b), max(a, b)
            key = (a, b, cl.version[a], cl.version[b])
            if key in refused:
                continue
            if cl.try_join(cl.closure(a, b)):
                changed = True
            else:
                refused.add(key)


def _acyclic(g: Graph, nodes: list[int], lab: Mapping[int, int]) -> bool:
    """Whether the quotient of the part's nodes under `lab` is acyclic (Kahn's algorithm)."""
    succ: dict[int, set[int]] = {}
    indeg: dict[int, int] = {}
    for i in nodes:
        a = lab[i]
        succ.setdefault(a, set())
        indeg.setdefault(a, 0)
        for j in g.succ[i]:
            b = lab[j]
            if b != a and b not in succ[a]:
                succ[a].add(b)
                indeg[b] = indeg.get(b, 0) + 1
    todo = [c for c, d in indeg.items() if d == 0]
    seen = 0
    while todo:
        c = todo.pop()
        seen += 1
        for d in succ.get(c, ()):
            indeg[d] -= 1
            if indeg[d] == 0:
                todo.append(d)
    return seen == len(indeg)


def improve(
    cl: Clustering, contract: Iterable[int], max_passes: int = 20, deadline: float = math.inf
) -> int:
    """Move single nodes to the cluster where they lower the objective most, while legal, until
    no move helps (or `max_passes`, or `deadline`: a `time.perf_counter()` value); returns the
    total decrease."""
    g, lab, members, pairs = cl.g, cl.label, cl.members, cl.pairs
    contract_set = set(contract)
    partners: dict[int, list[int]] = {i: [] for i in cl.nodes}
    for i, j in pairs:
        if i in partners and j in partners:
            partners[i].append(j)
            partners[j].append(i)
    generators = set(g.generator.values())

    def w(i: int, j: int) -> int:
        return g.weight[_key(i, j)]

    def contracted_cost(nodes: Iterable[int]) -> int:
        return g.n * sum(
            1 for i in nodes if i in contract_set and any(lab[j] != lab[i] for j in g.succ[i])
        )

    def legal_after(v: int, a: int, b: int) -> bool:
        req = g.requires
        rest = members[a]
        for u in members[b]:
            p = _key(u, v)
            if p not in pairs:
                return False
            for q in req.get(p, ()):
                if (lab[q[0]] != b and q[0] != v) or (lab[q[1]] != b and q[1] != v):
                    return False
        if v in generators:
            others = [u for u in rest if u != v]
            for k, u in enumerate(others):
                for u2 in others[k + 1 :]:
                    if any(v in q for q in req.get(_key(u, u2), ())):
                        return False
        return True

    total = 0
    for _ in range(max_passes):
        moved = 0
        for k, v in enumerate(cl.nodes):
            if not k & 63 and time.perf_counter() > deadline:
                return total
            a = lab[v]
            near = {lab[u] for u in partners[v]} - {a}
            if not near:
                continue
            around = [v, *g.pred[v]]
            base_c = contracted_cost(around)
            stay = sum(w(u, v) for u in members[a] if u != v)
            best, best_b = 0, None
            for b in sorted(near):
                gain = sum(w(u, v) for u in members[b] if _key(u, v) in pairs) - stay
                if gain + g.n * len(around) <= best:
                    continue  # cannot win even if every contraction around v improved
                lab[v] = b
                gain += base_c - contracted_cost(around)
                lab[v] = a
                if gain > best and legal_after(v, a, b):
                    lab[v] = b
                    ok = _acyclic(g, cl.nodes, lab)
                    lab[v] = a
                    if ok:
                        best, best_b = gain, b
            if best_b is not None:
                members[a].discard(v)
                if not members[a]:
                    members.pop(a)
                    cl.version.pop(a, None)
                else:
                    cl.version[a] += 1
                members[best_b].add(v)
                cl.version[best_b] += 1
                lab[v] = best_b
                total += best
                moved += 1
        if not moved:
            break
    return total
