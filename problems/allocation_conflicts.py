"""Concurrent lifetimes: allocation instances whose buffers conflict by an explicit graph.

Programs on several streams or cores order their buffers' lifetimes only partially, so "live at
the same step" does not exist; what remains is which pairs *may* be live at once. An instance
states that as `conflicts`, pairs of buffer indices (i < j), and two buffers must not share an
address exactly when they are such a pair. This module works on plain arrays (sizes, pairs) so
that `problems.allocation`, the heuristics and the models can all use it without a circle.

Vector clocks (one counter per stream, as OmniMalloc writes them) are turned into pairs here too:
a buffer allocated at clock `s` and freed at clock `e` (half-open, [s, e)) is done before
another starts when `e <= s'` in every component; two buffers conflict unless one is done
before the other starts.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np


class Pairs(Sequence[tuple[int, int]]):
    """Conflicting pairs (i, j), i < j, sorted and distinct, held as one read-only (m, 2) int32
    array: millions of pairs as Python tuples cost gigabytes and seconds to turn into arrays,
    which every solver, bound and check needs. Indexing and iteration give (i, j) tuples; two
    are equal when they hold the same pairs. Build one with `Pairs.of` or `normalise` (any
    pairs) or `from_clocks`. Pairs made from vector clocks keep them (`clocks`): the heuristics
    order buffers by their start, which the pairs alone do not tell."""

    __slots__ = ("_array", "_graphs", "_hash", "clocks")

    def __init__(self, array: np.ndarray, clocks: Clocks | None = None) -> None:
        """`array` must already be canonical (`normalise` checks; this does not); `clocks`, the
        vector clocks it was made of, if any (`from_clocks` checks they agree)."""
        held = np.ascontiguousarray(array, dtype=np.int32).reshape(-1, 2)
        held.setflags(write=False)
        self._array = held
        self._graphs: dict[int, Graph] = {}
        self._hash: int | None = None
        self.clocks = clocks

    @classmethod
    def of(cls, pairs: Iterable[Sequence[int]]) -> Pairs:
        """`pairs` (any order, repeats allowed) normalised; the instance checks the range."""
        if isinstance(pairs, Pairs):
            return pairs
        items = np.asarray(list(pairs), dtype=np.int64).reshape(-1, 2)
        return normalise(items, int(items.max()) + 1 if len(items) else 1)

    @property
    def array(self) -> np.ndarray:
        """The pairs as a read-only (m, 2) int32 array, rows sorted."""
        return self._array

    def graph(self, n: int) -> Graph:
        """The compressed-row conflict graph over `n` buffers, built once (seconds at 10^7
        pairs; the solver, the bounds and the harness all ask for it)."""
        g = self._graphs.get(n)
        if g is None:
            g = self._graphs[n] = graph(self, n)
        return g

    def __len__(self) -> int:
        return len(self._array)

    def __reduce__(self) -> tuple[type[Pairs], tuple[np.ndarray, Clocks | None]]:
        return Pairs, (self._array, self.clocks)  # not the graph: a worker rebuilds it

    @overload
    def __getitem__(self, k: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, k: slice) -> Pairs: ...
    def __getitem__(self, k: int | slice) -> tuple[int, int] | Pairs:
        if isinstance(k, slice):
            return Pairs(self._array[k])
        i, j = self._array[k].tolist()
        return i, j

    def __iter__(self) -> Iterator[tuple[int, int]]:
        yield from map(tuple, self._array.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pairs):
            return np.array_equal(self._array, other._array)
        if isinstance(other, tuple | list):
            return len(other) == len(self) and all(
                tuple(p) == q for p, q in zip(other, self, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._array.tobytes())
        return self._hash

    def __repr__(self) -> str:
        shown = ", ".join(map(str, self[:4]))
        return f"Pairs([{shown}{', ...' if len(self) > 4 else ''}], {len(self)} pairs)"


@dataclass(frozen=True, eq=False)
class Clocks:
    """Vector-clock lifetimes: buffer k is allocated at clock `starts[k]` and freed at `ends[k]`
    (half-open), both read-only (n, d) int64 arrays, `starts <= ends` in every component."""

    starts: np.ndarray
    ends: np.ndarray

    def __post_init__(self) -> None:
        for name in ("starts", "ends"):
            held = np.array(getattr(self, name), dtype=np.int64, ndmin=2)
            held.setflags(write=False)
            object.__setattr__(self, name, held)
        if self.starts.shape != self.ends.shape:
            raise ValueError(f"clocks: starts {self.starts.shape} and ends {self.ends.shape}")


@dataclass(frozen=True)
class Graph:
    """The conflict graph in compressed rows: the neighbours of `v` are
    `indices[indptr[v]:indptr[v + 1]]`, ascending. Symmetric, no self loops."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n(self) -> int:
        return len(self.indptr) - 1

    def neighbours(self, v: int) -> np.ndarray:
        return self.indices[self.indptr[v] : self.indptr[v + 1]]

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)


def normalise(
    pairs: Sequence[Sequence[int]] | np.ndarray, n: int, where: str = "conflicts"
) -> Pairs:
    """`pairs` as sorted, distinct (i, j) with i < j; a ValueError naming the first bad pair
    (`where[k]`) when an index is out of range or a buffer is paired with itself. Vectorised:
    10^7 pairs in about a second; a `Pairs` is only checked against `n`."""
    if isinstance(pairs, Pairs):
        if len(pairs) and int(pairs.array[:, 1].max()) >= n:
            k = int(np.argmax(pairs.array[:, 1] >= n))
            i, j = pairs[k]
            raise ValueError(f"{where}[{k}]: buffer index out of range 0..{n - 1}: {i}, {j}")
        return pairs
    if len(pairs) == 0:
        return Pairs(np.zeros((0, 2), dtype=np.int32))
    try:
        p = np.asarray(pairs, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        p = None
    if p is None or p.ndim != 2 or p.shape[1] != 2:
        for k, pair in enumerate(pairs):  # the first entry that is not a pair of integers
            if not (
                isinstance(pair, Sequence | np.ndarray)
                and len(pair) == 2
                and all(isinstance(x, int | np.integer) for x in pair)
            ):
                raise ValueError(f"{where}[{k}]: must be a pair of buffer indices, got {pair!r}")
        raise ValueError(f"{where}: must be pairs of buffer indices")
    bad = ((p < 0) | (p >= n)).any(axis=1)
    if bad.any():
        k = int(np.argmax(bad))
        i, j = p[k].tolist()
        raise ValueError(f"{where}[{k}]: buffer index out of range 0..{n - 1}: {i}, {j}")
    same = p[:, 0] == p[:, 1]
    if same.any():
        k = int(np.argmax(same))
        raise ValueError(f"{where}[{k}]: a buffer cannot conflict with itself ({int(p[k, 0])})")
    lo, hi = np.minimum(p[:, 0], p[:, 1]), np.maximum(p[:, 0], p[:, 1])
    key = lo * n + hi
    if not (key[1:] > key[:-1]).all():
        key = np.unique(key)
        lo, hi = key // n, key % n
    return Pairs(np.stack([lo, hi], axis=1))


COMPILED_ROWS, COMPILE_PAYS = 100_000, 5_000_000
"""From `COMPILED_ROWS` pairs on, `graph` builds the rows in a compiled pass (`allocation_
kernels.pair_rows`: 0.17 s at 10 million pairs against 1.8 s for the sort below, which takes
some 10 ms at 100,000) when that kernel is compiled or in numba's cache (`tensorplan warm`);
not yet, only from `COMPILE_PAYS` on, where the sort (0.16 us a pair) costs what a first
compile does (0.9 s)."""


def graph(pairs: Pairs, n: int) -> Graph:
    """The compressed-row graph of `pairs` over `n` buffers (`Pairs.graph` keeps it)."""
    if not len(pairs):
        return Graph(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    p = pairs.array
    if len(p) >= COMPILED_ROWS:
        from tensorplan.problems import allocation_kernels  # numba: loaded only when needed
        from tensorplan.problems.core import loadable

        rows = allocation_kernels.pair_rows
        if loadable(rows) or len(p) >= COMPILE_PAYS:
            return Graph(*rows(p[:, 0], p[:, 1], n))
    # v's neighbours below it (v as j: i ascending), then above it (v as i: j ascending); a
    # stable sort by v keeps that order, so each row comes out ascending without a second key
    src = np.concatenate([p[:, 1], p[:, 0]])
    dst = np.concatenate([p[:, 0], p[:, 1]]).astype(np.int64)
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, src.astype(np.int64) + 1, 1)
    return Graph(np.cumsum(indptr), dst[order])


def screen_compiled() -> bool:
    """Whether `overlapping`'s compiled screen is compiled or in numba's cache (`tensorplan
    warm`): from `COMPILED_ROWS` pairs on, the check then runs it."""
    from tensorplan.problems import allocation_kernels  # numba: loaded only when needed
    from tensorplan.problems.core import loadable

    return loadable(allocation_kernels.overlap_mask)


def overlapping(size: np.ndarray, offsets: np.ndarray, pairs: Pairs) -> np.ndarray:
    """The conflicting pairs whose address ranges [offset, offset + size) intersect, as an
    (m, 2) array (int64 sizes and offsets)."""
    p = pairs.array
    i, j = p[:, 0], p[:, 1]
    if len(p) >= COMPILED_ROWS and screen_compiled():  # as `graph`: no compile in a check
        from tensorplan.problems import allocation_kernels

        return p[allocation_kernels.overlap_mask(i, j, size, offsets)]
    hit = (offsets[i] < offsets[j] + size[j]) & (offsets[j] < offsets[i] + size[i])
    return p[hit]


def from_clocks(starts: np.ndarray, ends: np.ndarray) -> Pairs:
    """Conflict pairs of buffers with half-open vector-clock lifetimes [starts[k], ends[k]):
    k and l conflict unless ends[k] <= starts[l] or ends[l] <= starts[k] componentwise.
    `starts` and `ends` are (n, d) integer arrays; compared in blocks of rows (n^2 d / 2 work).
    The pairs keep the clocks (`Pairs.clocks`)."""
    clocks = Clocks(starts, ends)
    return Pairs(clock_pairs(clocks.starts, clocks.ends), clocks)


def clock_pairs(starts: np.ndarray, ends: np.ndarray, block: int = 256) -> np.ndarray:
    """`from_clocks` as an (m, 2) int32 array, i < j, sorted."""
    n = len(starts)
    found = []
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        # before[a, b]: row lo + a is done before b starts; after: b is done before it starts
        before = (ends[lo:hi, None, :] <= starts[None, :, :]).all(axis=2)
        after = (ends[None, :, :] <= starts[lo:hi, None, :]).all(axis=2)
        a, b = np.nonzero(~(before | after))
        a = a + lo
        keep = a < b
        found.append(np.stack([a[keep], b[keep]], axis=1).astype(np.int32))
    if not found:
        return np.zeros((0, 2), dtype=np.int32)
    return np.concatenate(found)


def clique_weight(weights: np.ndarray, members: Sequence[int]) -> int:
    return int(sum(int(weights[v]) for v in members))


COMPILED_CLIQUE_MIN = 400
"""From this many buffers on, `greedy_clique` grows a clique from every vertex, compiled."""


def greedy_clique(
    g: Graph, weights: np.ndarray, tries: int = 64, work: int | None = None
) -> list[int]:
    """A heavy clique found greedily: from each of the `tries` heaviest vertices (by weight
    plus neighbourhood weight; from every vertex, compiled, at `COMPILED_CLIQUE_MIN` buffers
    and more, heaviest first, within `work`: default `allocation_kernels.CLIQUE_WORK`), keep
    adding the heaviest vertex adjacent to all chosen. Any clique's weight is a sound lower
    bound on the peak: its buffers are pairwise live together, so they stack."""
    n = g.n
    if n == 0:
        return []
    w = weights.astype(np.int64)  # sizes add up to at most 2**53 (the instance checks it)
    if n >= COMPILED_CLIQUE_MIN:
        return compiled_clique(g, w, work).tolist()
    reach = neighbourhood_weight(g, w)
    best: list[int] = []
    best_w = -1
    for v in np.argsort(-reach, kind="stable")[:tries].tolist():
        members = [v]
        cand = g.neighbours(v)
        while len(cand):
            u = int(cand[np.argmax(w[cand])])
            members.append(u)
            cand = np.intersect1d(cand, g.neighbours(u), assume_unique=True)
        total = clique_weight(w, members)
        if total > best_w:
            best, best_w = members, total
    return best


def neighbourhood_weight(g: Graph, w: np.ndarray) -> np.ndarray:
    """Each vertex's weight plus its neighbours' (int64 `w`): what must stack around it."""
    total = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(w[g.indices])))
    return w + total[g.indptr[1:]] - total[g.indptr[:-1]]


def compiled_clique(g: Graph, w: np.ndarray, work: int | None = None) -> np.ndarray:
    """`greedy_clique` compiled: a clique grown from every vertex, heaviest neighbourhood
    first, within `work` (default `allocation_kernels.CLIQUE_WORK`); int64 `w`."""
    from tensorplan.problems import allocation_kernels  # numba: loaded only when needed

    reach = allocation_kernels.neighbourhood(g.indptr, g.indices, w)
    starts = np.lexsort((np.arange(g.n), -reach))
    budget = allocation_kernels.CLIQUE_WORK if work is None else work
    return allocation_kernels.heavy_clique(g.indptr, g.indices, w, starts, budget)


CLIQUE_UNITS_PER_S = 1_000_000_000
"""`max_clique`'s greedy start gets this much work per second of its `time_limit` (a unit is
about 0.7 ns here): the heavier clique a longer limit finds on large dense graphs."""

EXACT_CLIQUE_MAX = 400
"""Up to this many buffers in a component, `max_clique` runs an exact branch and bound."""


def max_clique(g: Graph, weights: np.ndarray, time_limit: float = 1.0) -> tuple[list[int], bool]:
    """A maximum-weight clique (and True) when the exact search ends within `time_limit`
    seconds, else the heaviest clique found (and False). Branch and bound with the greedy
    colouring bound (Tomita-style, weighted): a colour class is an independent set, so a clique
    takes at most one vertex of each, and at most the class's heaviest weight."""
    w = weights.astype(np.int64)
    best = greedy_clique(g, w, work=max(1, int(time_limit * CLIQUE_UNITS_PER_S)))
    if g.n == 0:
        return best, True
    if g.n > EXACT_CLIQUE_MAX:
        return best, False
    adj = [set(g.neighbours(v).tolist()) for v in range(g.n)]
    best_w = clique_weight(w, best)
    nodes = 0
    deadline = time.perf_counter() + time_limit

    def colour_bound(cand: list[int]) -> list[tuple[int, int]]:
        """(vertex, bound on the weight any clique within the candidates up to it can add)."""
        classes: list[list[int]] = []
        for v in sorted(cand, key=lambda v: -w[v]):
            for c in classes:
                if not any(u in adj[v] for u in c):
                    c.append(v)
                    break
            else:
                classes.append([v])
        out: list[tuple[int, int]] = []
        total = 0
        for c in classes:
            total += int(w[c[0]])  # heaviest first: c[0] is the class's heaviest
            out.extend((v, total) for v in c)
        return out

    def expand(chosen: list[int], chosen_w: int, cand: list[int]) -> bool:
        nonlocal best, best_w, nodes
        nodes += 1
        if nodes % 8 == 0 and time.perf_counter() > deadline:  # a node colours its candidates
            return False
        if chosen_w > best_w:
            best, best_w = list(chosen), chosen_w
        ordered = colour_bound(cand)
        for k in range(len(ordered) - 1, -1, -1):
            v, bound = ordered[k]
            if chosen_w + bound <= best_w:
                return True
            rest = [u for u, _ in ordered[:k] if u in adj[v]]
            chosen.append(v)
            if not expand(chosen, chosen_w + int(w[v]), rest):
                return False
            chosen.pop()
        return True

    done = expand([], 0, list(range(g.n)))
    return best, done


def rounded_clique_bound(size: np.ndarray, members: Sequence[int], alignment: int) -> int:
    """A clique's bound on the peak with an alignment: each member below the top starts at an
    aligned offset, so it takes its size rounded up; the top one at least its own size."""
    if not members:
        return 0
    plain = clique_weight(size, members)
    if alignment == 1:
        return plain
    up = [-(-int(size[v]) // alignment) * alignment for v in members]
    return max(plain, sum(up) - max(u - int(size[v]) for u, v in zip(up, members, strict=True)))


def brute_peak(size: Sequence[int], pairs: Iterable[tuple[int, int]], alignment: int = 1) -> int:
    """The optimum peak by brute force (tests, up to about 8 buffers): over every order, each
    buffer on top of its placed conflicting ones, aligned. Listing an optimal packing's buffers
    by offset gives an order whose placement is no higher, so the least of these is optimal."""
    n, a = len(size), alignment
    adj: list[set[int]] = [set() for _ in range(n)]
    for i, j in pairs:
        adj[i].add(j)
        adj[j].add(i)
    best = sum(-(-s // a) * a for s in size)
    for perm in itertools.permutations(range(n)):
        pos: dict[int, int] = {}
        for v in perm:
            top = max((pos[u] + size[u] for u in adj[v] if u in pos), default=0)
            pos[v] = -(-top // a) * a
        best = min(best, max((pos[v] + size[v] for v in range(n)), default=0))
    return best
