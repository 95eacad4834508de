"""Allocation heuristics: greedy placement (first fit / best fit) over a buffer ordering.

`ffd` is the seed's first-fit decreasing by size with offset jumping: the lowest aligned offset
clear of every already-placed buffer whose lifetime overlaps. Every greedy pass runs on the
compiled engine of `heuristics.allocation_kernels` (a time-bucketed index, memory linear in the
number of buffers, no overlap graph), so a pass over 10^6 buffers takes seconds. `multistart` is the
portfolio: every ordering x first/best fit, then seeded perturbations of the best ordering
(early-aborted as soon as they cannot win) until its time limit; it starts with `ffd`, so it is
never worse. Its orderings include the placement rules of OmniMalloc's fast allocators (`omni`'s
seven first-fit orders with ties in input order, `best_fit` in input order: the same packings)
and TelaMalloc's two first-fit incumbents; like TelaMalloc it packs each connected component of
the overlap graph on its own (each keeps its best packing of any pass); a hint is compacted
(first fit in offset order: never worse). `models.allocation_portfolio.fast` adds `bb-lds`.

Concurrent lifetimes (`AllocationInstance.conflicts`, a conflict graph instead of intervals):
`ffd`, `bfd` and `multistart` hand them to `heuristics.allocation_conflicts` (the same greedy
over the graph, and its own portfolio); the orderings by time (ff-lifetime, ff-area, xla,
ff-start) do not take them.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial

import numpy as np

from tensorplan.heuristics.allocation_compose import compose
from tensorplan.problems.allocation import (
    CONCURRENT,
    AllocationInstance,
    AllocationSolution,
    check,
    check_reserve,
    lower_parts,
    packing_result,
    saturating_product,
)
from tensorplan.problems.core import (
    Kept,
    Options,
    Reporter,
    Result,
    Solver,
    stopwatch,
)

Order = Callable[[AllocationInstance], list[int]]


def natural_key(buffer_id: str) -> tuple[int, int | str]:
    """Numeric ids sort as numbers ("2" < "10"), others as text after them."""
    return (0, int(buffer_id)) if re.fullmatch(r"-?\d+", buffer_id) else (1, buffer_id)


def id_rank(ids: Sequence[str]) -> np.ndarray:
    """rank[i] = position of buffer i when sorted stably by `natural_key` of its id: the last
    tie-break of every ordering, computed once without a Python sort of numeric ids."""
    n = len(ids)
    numeric: list[int] = []  # positions of numeric ids
    text: list[int] = []  # positions of the others
    for i, x in enumerate(ids):  # `-?\d+` in full: \d is exactly what isdecimal accepts
        (numeric if x.isdecimal() or (x[:1] == "-" and x[1:].isdecimal()) else text).append(i)
    values = [int(ids[i]) for i in numeric]
    if values and not -(2**62) < min(values) <= max(values) < 2**62:
        perm: Sequence[int] | np.ndarray = sorted(range(n), key=lambda i: natural_key(ids[i]))
    else:
        num = np.asarray(numeric, dtype=np.int64)
        num = num[np.argsort(np.asarray(values, dtype=np.int64), kind="stable")]
        perm = np.concatenate([num, np.asarray(sorted(text, key=ids.__getitem__), np.int64)])
    rank = np.empty(n, dtype=np.int64)
    rank[np.asarray(perm, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    return rank


@dataclass(frozen=True, eq=False)
class BufferArrays:
    """An instance as int64 arrays for the compiled engine, with the features orders sort by."""

    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    rank: np.ndarray
    alignment: int

    @classmethod
    def of(cls, inst: AllocationInstance) -> BufferArrays:
        bs, n = inst.buffers, len(inst.buffers)
        return cls(
            np.fromiter((b.size for b in bs), dtype=np.int64, count=n),
            np.fromiter((b.start for b in bs), dtype=np.int64, count=n),
            np.fromiter((b.end for b in bs), dtype=np.int64, count=n),
            id_rank([b.id for b in bs]),
            inst.alignment,
        )

    def __len__(self) -> int:
        return len(self.size)

    @cached_property
    def duration(self) -> np.ndarray:
        return self.end - self.start + 1

    @cached_property
    def layout(self):  # -> allocation_kernels.Layout
        from tensorplan.heuristics import allocation_kernels

        return allocation_kernels.layout(self.start, self.end)

    @cached_property
    def degree(self) -> np.ndarray:
        from tensorplan.heuristics import allocation_kernels

        return allocation_kernels.conflict_degree(self.start, self.end)

    @cached_property
    def section(self) -> np.ndarray:
        from tensorplan.heuristics import allocation_kernels

        return allocation_kernels.section_load(self.start, self.end, self.size)

    @cached_property
    def components(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The connected components of the lifetime-overlap graph (TelaMalloc's "phases": no
        two buffers of different components ever meet, so each packs on its own), as (label
        per buffer, buffers by start, where each component begins in that order)."""
        by_start = np.argsort(self.start, kind="stable")
        reach = np.maximum.accumulate(self.end[by_start])
        new = np.ones(len(self), dtype=bool)
        new[1:] = self.start[by_start][1:] > reach[:-1]
        label = np.empty(len(self), dtype=np.int64)
        label[by_start] = np.cumsum(new) - 1
        return label, by_start, np.flatnonzero(new)

    def component_peaks(self, offsets: np.ndarray) -> np.ndarray:
        """The peak of each component in the packing `offsets`."""
        _, by_start, begins = self.components
        return np.maximum.reduceat((offsets + self.size)[by_start], begins)

    @cached_property
    def lower_bound(self) -> int:
        """The max-load bound (max over time of the live sizes), from the section loads."""
        return int(self.section.max()) if len(self) else 0

    def place(
        self, order: np.ndarray, best_fit: bool = False, cutoff: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(offsets, peak) of one greedy pass over `order` (see `allocation_kernels.place`)."""
        from tensorplan.heuristics import allocation_kernels

        return allocation_kernels.place(
            self.size,
            self.start,
            self.end,
            order,
            self.alignment,
            best_fit=best_fit,
            lay=self.layout,
            cutoff=cutoff,
        )


_ARRAYS: Kept[BufferArrays] = Kept()


def buffer_arrays(inst: AllocationInstance) -> BufferArrays:
    """`BufferArrays.of(inst)`, kept while `inst` lives: solvers run one after another on the
    same instance (the portfolio, then an exact model's warm start) convert it once."""
    return _ARRAYS.get(inst, BufferArrays.of)


# sort keys per ordering, primary first; every ordering ends with the id (natural order)
KEYS: dict[str, Callable[[BufferArrays], tuple[np.ndarray, ...]]] = {
    # the seed's order: decreasing size, ties by id
    "size": lambda a: (-a.size,),
    # longest-lived first (XLA's temporal ordering)
    "lifetime": lambda a: (-a.duration, -a.size),
    # largest time x address area first
    "area": lambda a: (-a.size * a.duration, -a.size),
    # XLA's spatial ordering: size, then lifetime
    "xla": lambda a: (-a.size, -a.duration, a.start),
    # allocation order of a running program: earliest start first
    "start": lambda a: (a.start, -a.size),
    # most lifetime overlaps first
    "conflicts": lambda a: (-a.degree, -a.size),
    # buffers of the most loaded time section first (where the peak is decided)
    "section": lambda a: (-a.section, -a.size),
    "section-area": lambda a: (-a.section, -a.size * a.duration),
    "section-lifetime": lambda a: (-a.section, -a.duration, -a.size),
    # TelaMalloc's size-major tier: size, then lifetime
    "size-lifetime": lambda a: (-a.size, -a.duration),
    # OmniMalloc's greedy_by_conflict_size: conflicts x size, then size
    "conflict-size": lambda a: (-saturating_product(a.degree, a.size), -a.size),
    # the order the buffers are given in (generators and compilers often emit a good one)
    "input": lambda a: (),
    # OmniMalloc's greedy orders (its `omni` portfolio), ties in input order as its stable sorts
    "omni-size": lambda a: (-a.size,),
    "omni-lifetime": lambda a: (-a.duration,),
    "omni-area": lambda a: (-saturating_product(a.size, a.duration),),
    "omni-conflicts": lambda a: (-a.degree, -a.size),
    "omni-conflict-size": lambda a: (-saturating_product(a.degree, a.size), -a.size),
    "omni-start": lambda a: (a.start, -a.size),
}

INPUT_TIES = frozenset(
    {
        "input",
        "omni-size",
        "omni-lifetime",
        "omni-area",
        "omni-conflicts",
        "omni-conflict-size",
        "omni-start",
    }
)
"""Orderings whose ties keep the input order (the position of the buffer), not the id order."""


def sort_order(arrays: BufferArrays, name: str) -> np.ndarray:
    """Buffer indices in ordering `name` (ties by id, as `natural_key` sorts them, or by
    position for the orderings of `INPUT_TIES`)."""
    last = np.arange(len(arrays)) if name in INPUT_TIES else arrays.rank
    return np.lexsort((last, *reversed(KEYS[name](arrays))))


def _order_list(name: str, inst: AllocationInstance) -> list[int]:
    return sort_order(buffer_arrays(inst), name).tolist()


ORDERS: dict[str, Order] = {name: partial(_order_list, name) for name in KEYS}


def place(
    inst: AllocationInstance,
    order: Sequence[int],
    *,
    best_fit: bool = False,
    index: object = None,
) -> list[int]:
    """Place buffers in `order` (others get -1); first fit takes the lowest free aligned offset,
    best fit the tightest gap that fits (ties: lowest), falling back to the top when no gap
    fits. `index` is accepted for compatibility and unused: the engine keeps its own index."""
    del index
    offsets, _ = buffer_arrays(inst).place(np.asarray(order, dtype=np.int64), best_fit)
    return offsets.tolist()


# --- the lifetime-overlap graph (for the exact models' pairwise constraints) --------------------

MAX_EDGES = 20_000_000  # beyond this the overlap graph is not stored (about 320 MB)


class OverlapIndex:
    """Which buffers' lifetimes overlap buffer i: `of(i)` returns their indices.

    Small enough graphs are stored in CSR form (built with numpy in one pass); denser ones
    are answered by a scan of the start-sorted buffers, trading time for bounded memory.
    The heuristics do not use it (their engine never builds the graph); exact models do.
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


# --- solvers --------------------------------------------------------------------------------------


def _run(
    inst: AllocationInstance, opts: Options, *, name: str, order: str, best_fit: bool
) -> Result:
    if inst.conflicts is not None:  # concurrent lifetimes: the conflict-graph greedy
        from tensorplan.heuristics import allocation_conflicts

        return allocation_conflicts.run_greedy(inst, name, order, best_fit)
    with stopwatch() as elapsed:
        arrays = buffer_arrays(inst)
        offsets, top = arrays.place(sort_order(arrays, order), best_fit)
    return _result(inst, name, offsets, top, elapsed())


_result = packing_result  # under its historical name (the peers use it)


PORTFOLIO = (
    ("size", False),  # ffd first: the portfolio is never worse than ffd
    # OmniMalloc's `omni`: its seven first-fit orders, ties in input order (the same packings)
    ("input", False),
    ("input", True),  # OmniMalloc's `best_fit`: best fit in input order
    ("omni-conflicts", False),
    ("omni-lifetime", False),
    ("omni-area", False),
    ("omni-conflict-size", False),
    ("omni-start", False),
    ("omni-size", False),  # greedy_by_size: ffd unless equal sizes' ids are out of order
    # TelaMalloc's two incumbents: first fit by lifetime then size, and size then lifetime
    ("lifetime", False),
    ("size-lifetime", False),
    ("section-area", True),
    ("section", True),
    ("section-lifetime", False),
    ("section-lifetime", True),
    ("section", False),
    ("section-area", False),
    ("conflicts", False),
    ("size", True),
    ("conflicts", True),
    ("conflict-size", True),
    ("xla", True),
    ("xla", False),
    ("area", False),
    ("lifetime", True),
    ("area", True),
    ("start", False),
    ("start", True),
)
"""The portfolio's deterministic part, in the order it is tried: ffd, the placement rules of
OmniMalloc's fast allocators (`omni`, `best_fit`, `greedy_by_size` is ffd up to ties) and
TelaMalloc's incumbents, then the orderings that did best on issue 20's random family at
10^4-10^6 buffers and on the mixed and pow2 families (the section-load ones) first. An ordering
equal to one tried already (same fit) is skipped."""
PEER_RULES = 9
"""The first orderings of `PORTFOLIO`: ffd and OmniMalloc's `omni` and `best_fit` rules. They
run first (`models.allocation_portfolio` runs them within the whole time limit); the packing of
composed blocks (`PortfolioSearch.compose`) comes right after them."""


def _perturb(order: np.ndarray, offsets: np.ndarray, size: np.ndarray, rng) -> np.ndarray:
    """A random neighbour of `order`: a buffer reaching the peak moved earlier, or the order
    shuffled locally (each position jittered by a random scale)."""
    n = len(order)
    if rng.random() < 0.5:
        ends = offsets + size
        top = np.flatnonzero(ends == ends.max())
        j = int(top[rng.integers(len(top))])
        pos = int(np.flatnonzero(order == j)[0])
        if pos > 0:
            rest = np.delete(order, pos)
            return np.insert(rest, int(rng.integers(pos)), j)
    scale = float(rng.choice([0.5, 2.0, 8.0, 32.0]))
    return order[np.argsort(np.arange(n) + rng.normal(0.0, scale, n), kind="stable")]


def compaction_order(arrays: BufferArrays, offsets: np.ndarray) -> np.ndarray:
    """The buffers by increasing offset (ties by id). First fit in this order never places a
    buffer above its offset in `offsets` (a packing): every buffer placed before it and alive
    with it lay wholly below it and only moved down. So it keeps or lowers the peak."""
    return np.lexsort((arrays.rank, offsets))


@dataclass
class _Best:
    """The portfolio's state: the best packing so far, merged component by component (each
    component of the overlap graph keeps the lowest packing any pass gave it), and the
    ordering the perturbations start from."""

    arrays: BufferArrays
    offsets: np.ndarray
    peaks: np.ndarray  # per component
    top: int = -1
    order: np.ndarray | None = None  # None: the compaction order of `offsets`
    fit: bool = False
    label: str = "empty"
    tries: int = 0
    slowest: float = 0.0
    tried: set[tuple[bytes, bool]] = field(default_factory=set)
    report: Reporter | None = None  # told every best peak (and ticked after every pass)

    def attempt(self, order: np.ndarray, fit: bool, what: str, cutoff: bool = True) -> None:
        """One greedy pass; `cutoff` stops it as soon as its peak reaches the best."""
        began = time.perf_counter()
        cut = self.top if cutoff and self.top >= 0 else None
        offsets, top = self.arrays.place(order, fit, cut)
        self.tries += 1
        self.slowest = max(self.slowest, time.perf_counter() - began)
        if cut is None or top < cut:  # else stopped early: a partial packing
            self.absorb(offsets, top, order, fit, what)
        if self.report is not None and self.top >= 0:
            self.report(self.top)

    def absorb(
        self, offsets: np.ndarray, top: int, order: np.ndarray | None, fit: bool, what: str
    ) -> None:
        """Keep each component's packing in `offsets` (a packing of peak `top`, placed by
        `order` and `fit`, or None: found otherwise) where it is lower than the best's."""
        peaks = self.arrays.component_peaks(offsets) if len(offsets) else self.peaks
        best = self.offsets if self.top >= 0 else None
        kept = lower_parts(best, self.peaks, offsets, peaks, self.arrays.components[0])
        if kept is None:
            return
        self.offsets, self.peaks, mask = kept
        new_top = int(self.peaks.max()) if len(self.peaks) else 0
        if self.top < 0 or new_top < self.top:
            self.top, self.label = new_top, what
            whole = order is not None and top == new_top and bool(mask.all())
            self.order, self.fit = (order, fit) if whole else (None, False)
            if not whole and order is not None:
                self.label = f"{what} (merged by component)"

    def start(self) -> tuple[np.ndarray, bool]:
        """The ordering (and fit) the perturbations start from."""
        if self.order is None:
            self.order, self.fit = compaction_order(self.arrays, self.offsets), False
        return self.order, self.fit

    def seen(self, order: np.ndarray, fit: bool) -> bool:
        """Whether this ordering was tried with this fit already (else remember it)."""
        key = (hashlib.blake2b(np.ascontiguousarray(order).data, digest_size=16).digest(), fit)
        if key in self.tried:
            return True
        self.tried.add(key)
        return False


def hint_offsets(inst: AllocationInstance, opts: Options) -> np.ndarray | None:
    """The hint's offsets when it is a packing of `inst` (capacity aside), else None."""
    hint = opts.hint
    if not isinstance(hint, AllocationSolution) or len(hint.offsets) != len(inst.buffers):
        return None
    if check(inst.uncapped(), hint):
        return None
    return np.asarray(hint.offsets, dtype=np.int64)


class PortfolioSearch:
    """The portfolio as a search that can be resumed: each `run` carries on with the orderings
    of `PORTFOLIO` not run yet, then perturbs the best ordering, until its deadline; `offer`
    takes in a packing found otherwise (`models.allocation_portfolio` runs `bb-lds` between
    two runs). The best packing only ever gets lower."""

    def __init__(
        self,
        inst: AllocationInstance,
        seed: int,
        hint: np.ndarray | None = None,
        report: Reporter | None = None,
    ):
        self.arrays = arrays = buffer_arrays(inst)
        self.rng = np.random.default_rng(seed)
        self.ncomp = len(arrays.components[2])
        self.best = _Best(arrays, np.zeros(len(arrays), np.int64), np.zeros(self.ncomp, np.int64))
        self.best.report = report
        self.done = 0  # how many orderings of `PORTFOLIO` were run
        self.hint = hint
        self.inst = inst
        self.composed = False  # whether the packing of composed blocks was tried

    def out_of_time(self, deadline: float) -> bool:
        best = self.best
        return best.top <= self.arrays.lower_bound or (
            time.perf_counter() + best.slowest > deadline
        )

    def run(self, deadline: float, upto: int = len(PORTFOLIO), restarts: int = 0) -> None:
        """The orderings up to `PORTFOLIO[upto]` not run yet (a hint is compacted after the
        first), then up to `restarts` perturbations, while `deadline` (a perf_counter time)
        allows. Whole passes merge by component; a perturbed pass stops at the best peak."""
        best, arrays, whole = self.best, self.arrays, self.ncomp == 1
        while self.done < upto and not (best.tries and self.out_of_time(deadline)):
            key, fit = PORTFOLIO[self.done]
            order = sort_order(arrays, key)
            if not best.seen(order, fit):
                best.attempt(order, fit, f"{key}/{'best' if fit else 'first'}", whole)
            self.done += 1
            if self.done >= PEER_RULES and not self.composed and not self.out_of_time(deadline):
                self.compose(deadline)
            if self.hint is not None and not self.out_of_time(deadline):  # right after ffd
                best.attempt(compaction_order(arrays, self.hint), False, "hint", whole)
                self.hint = None
        if self.hint is not None and (not best.tries or not self.out_of_time(deadline)):
            best.attempt(compaction_order(arrays, self.hint), False, "hint", whole)
            self.hint = None
        for _ in range(restarts):
            if self.out_of_time(deadline) or len(arrays) < 2:
                break
            start, start_fit = best.start()
            order = _perturb(start, best.offsets, arrays.size, self.rng)
            fit = start_fit if self.rng.random() < 0.8 else not start_fit
            best.attempt(order, fit, f"perturbed/{'best' if fit else 'first'}")

    def compose(self, deadline: float) -> None:
        """Offer, once, the packing of the blocks `allocation_compose.compose` rebuilds (the
        better of ffd and first fit in input order over the blocks), composed within
        `COMPOSE_SHARE` of the time left: on a tiling cut by guillotine and pinwheel cuts it is
        the perfect packing."""
        self.composed = True
        if len(self.arrays) > COMPOSE_MAX_BUFFERS:
            return
        now = time.perf_counter()
        left = max(deadline - now, 0.0)
        comp = compose(self.inst, now + min(left, max(COMPOSE_SHARE * left, COMPOSE_MIN_S)))
        if comp is None:
            return
        inner = PortfolioSearch(comp.blocks, 0)
        inner.run(deadline, upto=2)
        offsets = comp.expand(inner.best.offsets, len(self.arrays))
        self.offer(AllocationSolution(tuple(offsets.tolist())), "composed")

    def offer(self, sol: AllocationSolution, what: str) -> None:
        """Take in a packing found otherwise (each component where it is lower)."""
        offsets = np.asarray(sol.offsets, dtype=np.int64)
        top = int((offsets + self.arrays.size).max()) if len(offsets) else 0
        self.best.absorb(offsets, top, None, False, what)
        if self.best.report is not None and self.best.top >= 0:
            self.best.report(self.best.top)

    def result(self, inst: AllocationInstance, name: str, runtime: float) -> Result:
        best = self.best
        return _result(
            inst,
            name,
            best.offsets,
            max(best.top, 0),
            runtime,
            tries=best.tries,
            best_of=best.label,
        )


COMPOSE_MAX_BUFFERS = 50_000
"""Beyond this many buffers no blocks are composed: the rules run in Python, about 10 us per
item and round (5-10 s at 10^5 buffers of the random families, where they build few blocks)."""
COMPOSE_SHARE, COMPOSE_MIN_S = 0.25, 0.25
"""Of the time left, what rebuilding blocks (`PortfolioSearch.compose`) may take (at least
`COMPOSE_MIN_S` when there is that much): 10-50 ms at 1,000 buffers, 50-100 ms at 5,000; given up,
with nothing lost but that time, when it does not fit."""


def portfolio(
    inst: AllocationInstance, opts: Options, *, restarts: int = 200, name: str = "multistart"
) -> Result:
    """Every ordering of `PORTFOLIO` x its fit, then up to `restarts` seeded perturbations of the
    best ordering, within the time limit (less the time the harness needs to check the answer).
    A hint (a packing) is compacted first: first fit in its offset order, never worse than it.
    Each component of the overlap graph keeps its best packing of any pass; a perturbed pass
    stops as soon as its peak reaches the best so far. Keeps the lowest peak, and reports each
    new one (`Options.progress`). Concurrent lifetimes: `allocation_conflicts.portfolio`, its
    improvement passes stopped after `PASSES_PER_RESTART` x `restarts` passes without a new best
    (or at the time limit, or at the clique bound)."""
    if inst.conflicts is not None:
        from tensorplan.heuristics import allocation_conflicts

        stall = PASSES_PER_RESTART * restarts
        return allocation_conflicts.portfolio(inst, opts, name=name, stall=stall)
    with stopwatch() as elapsed:
        deadline = time.perf_counter() + opts.time_limit - check_reserve(inst)
        report = Reporter(opts, name)
        search = PortfolioSearch(inst, opts.seed, hint_offsets(inst, opts), report)
        search.run(deadline, restarts=restarts)
    return report.result(search.result(inst, name, elapsed()))


PASSES_PER_RESTART = 50
"""On a concurrent instance, `portfolio` stops improving after this many passes per restart
without a new best (its passes are single greedy passes, cheaper than an interval restart)."""


def multistart(inst: AllocationInstance, opts: Options, restarts: int = 200) -> Result:
    """The portfolio (see `portfolio`), under its historical name."""
    return portfolio(inst, opts, restarts=restarts)


def warm_conflicts() -> None:
    """Compile (or load) the kernels of the concurrent-lifetime heuristics, which a solve of the
    tiny (interval) warm-up instance does not reach."""
    from tensorplan.heuristics import allocation_conflicts

    allocation_conflicts.warm()


def _solver(
    name: str, order: str, best_fit: bool, summary: str, concurrent: bool = False
) -> Solver:
    """A single greedy pass: deterministic, instant, so it honours no option. `concurrent`: it
    takes conflict graphs too (the same ordering, over the graph)."""
    return Solver(
        name,
        "heuristic",
        partial(_run, name=name, order=order, best_fit=best_fit),
        summary,
        supports=CONCURRENT if concurrent else frozenset(),
        warm=warm_conflicts if concurrent else None,
    )


SOLVERS = [
    _solver("ffd", "size", False, "first-fit decreasing by size (the seed's heuristic)", True),
    _solver("bfd", "size", True, "best-fit decreasing by size", True),
    _solver("ff-lifetime", "lifetime", False, "first-fit, longest lifetime first"),
    _solver("ff-area", "area", False, "first-fit, largest size x duration first"),
    _solver("xla", "xla", True, "best-fit, size then lifetime (XLA heap simulator style)"),
    _solver("ff-start", "start", False, "first-fit in allocation (start time) order"),
    Solver(
        "multistart",
        "heuristic",
        multistart,
        "portfolio: ffd, OmniMalloc's and TelaMalloc's rules, 18 orderings x first/best fit, "
        "then seeded perturbations; keeps the best (per overlap component); on conflict "
        "graphs, its orderings over the graph then iterated greedy",
        frozenset({"time_limit", "seed", "hint"}),
        supports=CONCURRENT,
        warm=warm_conflicts,
    ),
]
