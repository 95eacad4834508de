"""Allocation heuristics: greedy placement (first-fit / best-fit) over a buffer ordering.

`ffd` is the seed's first-fit decreasing by size with offset jumping: the lowest offset clear of
every already-placed buffer whose lifetime overlaps. Jumping past the end of each conflicting
buffer reaches exactly that offset, so the pass sorts the conflicting buffers once by offset and
walks their gaps, instead of rescanning every placed buffer per candidate offset. Conflicts are
found through the static lifetime-overlap graph (built once with numpy), so a pass over n buffers
costs O(sum of lifetime-overlap degrees), not O(n^2).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    lower_bound,
)
from tensorplan.problems.core import Options, Result, Solver, Status, heuristic_result, stopwatch

Order = Callable[[AllocationInstance], list[int]]


def natural_key(buffer_id: str) -> tuple[int, int | str]:
    """Numeric ids sort as numbers ("2" < "10"), others as text after them."""
    return (0, int(buffer_id)) if re.fullmatch(r"-?\d+", buffer_id) else (1, buffer_id)


def _sorted(inst: AllocationInstance, key: Callable[[Buffer], tuple]) -> list[int]:
    bs = inst.buffers
    return sorted(range(len(bs)), key=lambda i: (*key(bs[i]), natural_key(bs[i].id)))


ORDERS: dict[str, Order] = {
    # the seed's order: decreasing size, ties by id
    "size": lambda inst: _sorted(inst, lambda b: (-b.size,)),
    # longest-lived first (XLA's temporal ordering)
    "lifetime": lambda inst: _sorted(inst, lambda b: (-b.duration, -b.size)),
    # largest time x address area first
    "area": lambda inst: _sorted(inst, lambda b: (-b.size * b.duration, -b.size)),
    # XLA's spatial ordering: size, then lifetime
    "xla": lambda inst: _sorted(inst, lambda b: (-b.size, -b.duration, b.start)),
    # allocation order of a running program: earliest start first
    "start": lambda inst: _sorted(inst, lambda b: (b.start, -b.size)),
}


MAX_EDGES = 20_000_000  # beyond this the overlap graph is not stored (about 320 MB)


class OverlapIndex:
    """Which buffers' lifetimes overlap buffer i: `of(i)` returns their indices.

    Small enough graphs are stored in CSR form (built with numpy in one pass); denser ones
    are answered by a scan of the start-sorted buffers, trading time for bounded memory.
    """

    def __init__(self, inst: AllocationInstance, max_edges: int = MAX_EDGES) -> None:
        n = len(inst.buffers)
        self.start = np.fromiter((b.start for b in inst.buffers), dtype=np.int64, count=n)
        self.end = np.fromiter((b.end for b in inst.buffers), dtype=np.int64, count=n)
        self.order = np.argsort(self.start, kind="stable")
        self.s_sorted = self.start[self.order]
        self.e_sorted = self.end[self.order]
        # buffer order[k] overlaps every later-starting order[k+1 : hi[k]] (start <= its end)
        self.hi = np.searchsorted(self.s_sorted, self.e_sorted, side="right")
        self.edges = 2 * int((self.hi - np.arange(1, n + 1)).sum())
        self.csr = overlap_graph(self) if self.edges <= max_edges else None

    def of(self, i: int) -> np.ndarray:
        if self.csr is not None:
            ptr, nbr = self.csr
            return nbr[ptr[i] : ptr[i + 1]]
        k = int(np.searchsorted(self.s_sorted, self.end[i], side="right"))
        cand = self.order[:k]
        hit = cand[self.e_sorted[:k] >= self.start[i]]
        return hit[hit != i]


def overlap_graph(index: OverlapIndex) -> tuple[np.ndarray, np.ndarray]:
    """CSR adjacency (ptr, nbr) of the lifetime-overlap graph: i and j overlap in time."""
    n = len(index.order)
    counts = index.hi - np.arange(1, n + 1)
    total = int(counts.sum())
    src_pos = np.repeat(np.arange(n), counts)
    first = np.repeat(np.arange(1, n + 1) - np.cumsum(counts) + counts, counts)
    dst_pos = np.arange(total) + first if total else np.zeros(0, dtype=np.int64)
    a, b = index.order[src_pos], index.order[dst_pos]
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    perm = np.argsort(src, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, dst[perm].astype(np.int32 if n < 2**31 else np.int64)


def place(
    inst: AllocationInstance,
    order: Sequence[int],
    *,
    best_fit: bool = False,
    index: OverlapIndex | None = None,
) -> list[int]:
    """Place buffers in `order`; first fit takes the lowest free aligned offset, best fit the
    tightest gap that fits (ties: lowest), falling back to the top when no gap fits."""
    n, a = len(inst.buffers), inst.alignment
    index = index if index is not None else OverlapIndex(inst)
    sizes = [b.size for b in inst.buffers]
    offsets = [-1] * n
    for i in order:
        size = sizes[i]
        placed = [
            (offsets[j], offsets[j] + sizes[j]) for j in index.of(i).tolist() if offsets[j] >= 0
        ]
        placed.sort()
        cur, best, best_slack = 0, -1, -1
        for lo, hi in placed:
            if lo >= cur + size:  # a gap [cur, lo) that fits
                if not best_fit:
                    break
                slack = lo - cur - size
                if best < 0 or slack < best_slack:
                    best, best_slack = cur, slack
            if hi > cur:
                cur = -(-hi // a) * a
        else:
            cur = cur if best < 0 else best
        offsets[i] = cur
    return offsets


def _run(
    inst: AllocationInstance, opts: Options, *, name: str, order: str, best_fit: bool
) -> Result:
    with stopwatch() as elapsed:
        offsets = place(inst, ORDERS[order](inst), best_fit=best_fit)
    return _result(inst, name, offsets, elapsed())


def _result(
    inst: AllocationInstance, name: str, offsets: list[int], runtime: float, **stats: object
) -> Result:
    sol = AllocationSolution(tuple(offsets))
    top = max((o + b.size for o, b in zip(offsets, inst.buffers, strict=True)), default=0)
    if inst.capacity is not None and top > inst.capacity:
        return Result(
            name,
            Status.UNKNOWN,
            None,
            None,
            runtime,
            message=f"heuristic peak {top} exceeds capacity {inst.capacity}",
        )
    return heuristic_result(name, top, sol, runtime, **stats)


def multistart(inst: AllocationInstance, opts: Options, restarts: int = 16) -> Result:
    """Every ordering with first- and best-fit, then seeded random perturbations of the best
    ordering until `restarts` more tries or the time limit; keeps the lowest peak."""
    time_limit = opts.time_limit
    rng = random.Random(opts.seed)
    lb = lower_bound(inst)
    with stopwatch() as elapsed:
        index = OverlapIndex(inst)
        best: tuple[int, list[int], str] | None = None
        best_order: list[int] = []
        tries = 0

        def consider(order: list[int], fit: bool, label: str) -> None:
            nonlocal best, best_order, tries
            tries += 1
            offs = place(inst, order, best_fit=fit, index=index)
            top = max((o + b.size for o, b in zip(offs, inst.buffers, strict=True)), default=0)
            if best is None or top < best[0]:
                best, best_order = (top, offs, label), order

        for label, make in ORDERS.items():
            order = make(inst)
            for fit in (False, True):
                consider(order, fit, f"{label}/{'best' if fit else 'first'}")
                if best[0] <= lb or elapsed() > time_limit:
                    break
            if best[0] <= lb or elapsed() > time_limit:
                break
        for _ in range(restarts):
            if best[0] <= lb or elapsed() > time_limit or len(best_order) < 2:
                break
            order = list(best_order)
            for _ in range(max(1, len(order) // 20)):  # swap a few neighbours
                k = rng.randrange(len(order) - 1)
                order[k], order[k + 1] = order[k + 1], order[k]
            consider(order, rng.random() < 0.5, "perturbed")
    _, offsets, label = best if best is not None else (0, [], "empty")
    return _result(inst, "multistart", offsets, elapsed(), tries=tries, best_of=label)


def _solver(name: str, order: str, best_fit: bool, summary: str) -> Solver:
    """A single greedy pass: deterministic, instant, so it honours no option."""
    return Solver(
        name, "heuristic", partial(_run, name=name, order=order, best_fit=best_fit), summary
    )


SOLVERS = [
    _solver("ffd", "size", False, "first-fit decreasing by size (the seed's heuristic)"),
    _solver("bfd", "size", True, "best-fit decreasing by size"),
    _solver("ff-lifetime", "lifetime", False, "first-fit, longest lifetime first"),
    _solver("ff-area", "area", False, "first-fit, largest size x duration first"),
    _solver("xla", "xla", True, "best-fit, size then lifetime (XLA heap simulator style)"),
    _solver("ff-start", "start", False, "first-fit in allocation (start time) order"),
    Solver(
        "multistart",
        "heuristic",
        multistart,
        "all orderings x first/best fit, then seeded perturbations; keeps the best",
        frozenset({"time_limit", "seed"}),
    ),
]
