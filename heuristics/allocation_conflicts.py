"""Allocation heuristics for concurrent lifetimes: greedy placement over the conflict graph.

A concurrent instance (`AllocationInstance.conflicts`) says which buffers may be live at once as
an explicit graph, so the time-bucketed engine of `heuristics.allocation_kernels` does not apply;
here a buffer's conflicts are its row of the graph in compressed form (`problems.allocation_
conflicts.Graph`). `pack` places buffers in a given order, each at the lowest aligned offset clear
of its already-placed neighbours (first fit) or in the tightest such gap (best fit, ties: the
lowest; the top when no gap fits): it gathers the placed neighbours' address ranges, sorts them
and walks the gaps, one compiled pass in O(edges log degree); on dense graphs it walks one list
of the placed buffers by offset instead, skipping non-neighbours by a bit matrix (`_pack_dense`).

`portfolio` is the anytime search (`ConcurrentSearch`): every ordering of `PORTFOLIO` (size,
degree, size x degree, the neighbourhood's weight, the members of a heavy clique first, ...) x
first/best fit, each connected component of the graph keeping its best packing of any pass;
then iterated greedy from the best packing (first fit in random orders that cannot raise its
peak, `extension_order`, often perturbed, `kick`), until the time limit or until the peak meets
the clique bound. `ffd` and `bfd` of `heuristics.allocation` call `greedy`, `multistart` and
`fast` call `portfolio`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numba import njit

from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems import allocation_kernels
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    clique_bound,
    conflict_graph,
    heavy_clique,
    lower_parts,
    packing_result,
    saturating_product,
    sizes,
    solve_reserve,
)
from tensorplan.problems.core import Kept, Options, Reporter, Result

NO_CUTOFF = np.iinfo(np.int64).max


# --- the compiled greedy --------------------------------------------------------------------------


@njit(cache=True)
def _sort(keys, vals, n, carry):  # pragma: no cover - compiled
    """Sort keys[:n] ascending, moving vals[:n] along when `carry`: quicksort (median of three,
    smaller side first, so the stack stays logarithmic), insertion sort below 16 entries. Ours
    rather than numpy's: numba builds it in a fraction of the time it takes for np.sort."""
    stack = np.empty(128, dtype=np.int64)
    top = 0
    lo, hi = 0, n
    while True:
        while hi - lo > 16:
            mid = (lo + hi) >> 1
            a, b, c = keys[lo], keys[mid], keys[hi - 1]
            pivot = max(min(a, b), min(max(a, b), c))
            i, j = lo, hi - 1
            while i <= j:
                while keys[i] < pivot:
                    i += 1
                while keys[j] > pivot:
                    j -= 1
                if i <= j:
                    keys[i], keys[j] = keys[j], keys[i]
                    if carry:
                        vals[i], vals[j] = vals[j], vals[i]
                    i += 1
                    j -= 1
            if j + 1 - lo < hi - i:
                stack[top], stack[top + 1] = i, hi
                hi = j + 1
            else:
                stack[top], stack[top + 1] = lo, j + 1
                lo = i
            top += 2
        for t in range(lo + 1, hi):
            x = keys[t]
            v = vals[t] if carry else 0
            q = t - 1
            while q >= lo and keys[q] > x:
                keys[q + 1] = keys[q]
                if carry:
                    vals[q + 1] = vals[q]
                q -= 1
            keys[q + 1] = x
            if carry:
                vals[q + 1] = v
        if top == 0:
            return
        top -= 2
        lo, hi = stack[top], stack[top + 1]


SORT_BUDGET = 8
"""Insertion sort moves allowed per neighbour before a buffer's ranges are sorted outright."""


@njit(cache=True)
def _pack(
    size, indptr, indices, order, alignment, best_fit, shift, cutoff, offsets
):  # pragma: no cover - compiled
    """Place `order` into `offsets` (-1 on entry: unplaced); returns the peak, or stops and
    returns a value >= `cutoff` as soon as the peak reaches it.

    Every placed buffer is appended to the row (`seg`, laid out as `indices`) of each unplaced
    neighbour, as a packed key (offset << shift | buffer) when `shift` > 0, else as the buffer.
    Placing a buffer sorts its row by offset (insertion sort: rows arrive nearly sorted when the
    order follows addresses, as the compaction orders do; a row needing more moves than
    `SORT_BUDGET` per entry is sorted outright; unpacked rows are sorted with their offsets
    alongside), then walks it in address order keeping `cur`,
    the aligned end of everything below: a range starting at or beyond cur + size closes a gap
    that fits. First fit takes the first such gap, best fit the one of least slack (ties: the
    lowest), both the aligned top when none fits."""
    n = len(size)
    seg = np.empty(len(indices), dtype=np.int64)
    fill = np.zeros(n, dtype=np.int64)
    los = np.empty(0 if shift > 0 else len(indices), dtype=np.int64)
    mask = (np.int64(1) << shift) - 1
    top = 0
    for k in range(len(order)):
        i = order[k]
        sz = size[i]
        base = indptr[i]
        d = fill[i]
        row = seg[base : base + d]
        if shift > 0:
            budget = SORT_BUDGET * d + 16
            for t in range(1, d):
                x = row[t]
                j = t - 1
                while j >= 0 and row[j] > x and budget > 0:
                    row[j + 1] = row[j]
                    j -= 1
                    budget -= 1
                row[j + 1] = x
                if budget == 0:
                    _sort(row, row, d, False)
                    break
        elif d > 0:
            for t in range(d):
                los[t] = offsets[row[t]]
            _sort(los, row, d, True)
        cur = 0
        best = -1
        best_slack = 0
        for t in range(d):
            if shift > 0:
                j = row[t] & mask
                lo = row[t] >> shift
            else:
                j = row[t]
                lo = los[t]
            slack = lo - cur - sz
            if slack >= 0:
                if not best_fit or slack == 0:
                    best = cur
                    break
                if best < 0 or slack < best_slack:
                    best = cur
                    best_slack = slack
            hi = lo + size[j]
            if alignment != 1:
                hi = -(-hi // alignment) * alignment
            cur = max(cur, hi)
        at = cur if best < 0 else best
        offsets[i] = at
        if at + sz > top:
            top = at + sz
            if top >= cutoff:
                return top
        key = (at << shift) | i if shift > 0 else i
        for p in range(base, indptr[i + 1]):
            u = indices[p]
            if offsets[u] < 0:
                seg[indptr[u] + fill[u]] = key
                fill[u] += 1
    return top


DENSE_SHARE, DENSE_MAX = 0.1, 16_384
"""`ConflictArrays` packs through the conflict matrix (`_pack_dense`) when the mean degree is at
least this share of the buffers, up to this many buffers (its bits: n^2 / 8 bytes, 32 MiB at
most). Measured per pass at 500 buffers: sync-subset (72 % dense) 4.6 -> 0.28 ms, concurrent
tiling (20 %) 1.2 -> 0.38 ms; at 2,000 buffers and 6 % the rows stay faster on the nearly sorted
orders of the improvement passes (2.6 against 3.5 ms)."""


@njit(cache=True)
def _bit_rows(n, indptr, indices):  # pragma: no cover - compiled
    """The conflict graph as an n x ceil(n / 64) bit matrix."""
    bits = np.zeros((n, (n + 63) >> 6), dtype=np.uint64)
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            bits[i, j >> 6] |= np.uint64(1) << np.uint64(j & 63)
    return bits


@njit(cache=True)
def _pack_dense(size, bits, order, alignment, best_fit, cutoff, offsets):  # pragma: no cover
    """`_pack` for dense graphs: the placed buffers are kept in one list by offset (insertion
    by bisection), and each buffer walks that list, skipping non-neighbours by its bit row,
    until first fit finds a gap (best fit walks it all). The same gaps in the same order as
    `_pack`, so the same packing, without sorting a row per buffer. The gap step is written
    out as in `_pack` on purpose: as one shared compiled helper it cost `_pack` 10-20 % per
    pass (concurrent family, 2,000 buffers)."""
    placed = np.empty(len(size), dtype=np.int64)
    m = 0
    top = 0
    one = np.uint64(1)
    for k in range(len(order)):
        i = order[k]
        sz = size[i]
        cur = 0
        best = -1
        best_slack = 0
        for t in range(m):
            j = placed[t]
            if (bits[i, j >> 6] >> np.uint64(j & 63)) & one == 0:
                continue
            lo = offsets[j]
            slack = lo - cur - sz
            if slack >= 0:
                if not best_fit or slack == 0:
                    best = cur
                    break
                if best < 0 or slack < best_slack:
                    best = cur
                    best_slack = slack
            hi = lo + size[j]
            if alignment != 1:
                hi = -(-hi // alignment) * alignment
            cur = max(cur, hi)
        at = cur if best < 0 else best
        offsets[i] = at
        if at + sz > top:
            top = at + sz
            if top >= cutoff:
                return top
        a, b = 0, m
        while a < b:
            mid = (a + b) >> 1
            if offsets[placed[mid]] <= at:
                a = mid + 1
            else:
                b = mid
        for p in range(m, a, -1):
            placed[p] = placed[p - 1]
        placed[a] = i
        m += 1
    return top


KERNELS = (_pack, _pack_dense, _bit_rows)
"""The compiled kernels `pack` calls, for the solvers' "compiled yet?" check (`warm` builds
them)."""


def bit_rows(n: int, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The conflict graph (compressed rows) as a bit matrix for `pack(bits=...)`."""
    return _bit_rows(n, np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64))


def dense_bits(n: int, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """`bit_rows` when the graph is dense enough to pack through them (`DENSE_SHARE`,
    `DENSE_MAX`), else None (pack through the rows)."""
    if n == 0 or n > DENSE_MAX or len(indices) < DENSE_SHARE * n * n:
        return None
    return bit_rows(n, indptr, indices)


def key_shift(size: np.ndarray, alignment: int) -> int:
    """Bits for a buffer's index in the packed keys (offset << shift | buffer), or 0 when an
    offset could overflow them (no offset exceeds the stacking bound)."""
    if len(size) == 0:
        return 1
    shift = max(1, (len(size) - 1).bit_length())
    stack = int(((size + alignment - 1) // alignment).sum()) * alignment
    return shift if stack < 2 ** (62 - shift) else 0


def pack(
    size: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    order: np.ndarray | Sequence[int],
    alignment: int = 1,
    *,
    best_fit: bool = False,
    cutoff: int | None = None,
    shift: int | None = None,
    bits: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """(offsets, peak) of placing the buffers of `order` greedily over the conflict graph
    (`indptr`, `indices`: compressed rows, symmetric); buffers not in `order` get -1. First fit
    takes the lowest aligned offset clear of every placed neighbour, best fit the tightest gap
    (ties: the lowest; the top when none fits). With `cutoff`, stops as soon as the peak
    reaches it (the peak returned is then >= cutoff and the packing partial). `shift`: the
    packed-key width (`key_shift`, computed when None; 0 forces the argsort path). `bits`: the
    same graph as `bit_rows` gives it, to walk by offset instead (`_pack_dense`; same packing)."""
    size = np.asarray(size, dtype=np.int64)
    offsets = np.full(len(size), -1, dtype=np.int64)
    stop = np.int64(NO_CUTOFF if cutoff is None else cutoff)
    if bits is not None:
        top = _pack_dense(
            size,
            bits,
            np.asarray(order, dtype=np.int64),
            np.int64(alignment),
            bool(best_fit),
            stop,
            offsets,
        )
        return offsets, int(top)
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    if shift is None:
        shift = key_shift(size, alignment)
    top = _pack(
        size,
        indptr,
        indices,
        np.asarray(order, dtype=np.int64),
        np.int64(alignment),
        bool(best_fit),
        np.int64(shift),
        stop,
        offsets,
    )
    return offsets, int(top)


@njit(cache=True)
def _components(indptr, indices):  # pragma: no cover - compiled
    """Connected component label of every vertex (labels 0, 1, ... in order of first vertex)."""
    n = len(indptr) - 1
    label = np.full(n, -1, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    count = 0
    for root in range(n):
        if label[root] >= 0:
            continue
        label[root] = count
        stack[0] = root
        size = 1
        while size > 0:
            size -= 1
            v = stack[size]
            for p in range(indptr[v], indptr[v + 1]):
                u = indices[p]
                if label[u] < 0:
                    label[u] = count
                    stack[size] = u
                    size += 1
        count += 1
    return label


# --- an instance as arrays ------------------------------------------------------------------------


def _rank(ids: list[str]) -> np.ndarray:
    """Each buffer's position when sorted by id in natural order (numbers as numbers first)."""
    keyed = sorted(range(len(ids)), key=lambda i: _natural(ids[i]))
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.asarray(keyed, dtype=np.int64)] = np.arange(len(ids), dtype=np.int64)
    return rank


def _natural(x: str) -> tuple[int, int | str]:
    numeric = x.isdecimal() or (x[:1] == "-" and x[1:].isdecimal())
    return (0, int(x)) if numeric else (1, x)


@dataclass(frozen=True, eq=False)
class ConflictArrays:
    """A concurrent instance as int64 arrays for `pack`, with the features orders sort by."""

    size: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    rank: np.ndarray
    alignment: int
    source: AllocationInstance = field(repr=False)
    """The instance the arrays are of (its heavy clique is kept with it)."""

    @classmethod
    def of(cls, inst: AllocationInstance) -> ConflictArrays:
        g = conflict_graph(inst)
        size = sizes(inst).astype(np.int64)  # the instance's total is within 2**53
        ids = [b.id for b in inst.buffers]
        return cls(size, g.indptr, g.indices, _rank(ids), inst.alignment, inst)

    def __len__(self) -> int:
        return len(self.size)

    @property
    def clocks(self) -> ac.Clocks | None:
        """The vector clocks the conflicts were made of, when they were."""
        pairs = self.source.conflicts
        return pairs.clocks if pairs is not None else None

    @cached_property
    def graph(self) -> ac.Graph:
        return ac.Graph(self.indptr, self.indices)

    @cached_property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @cached_property
    def shift(self) -> int:
        return key_shift(self.size, self.alignment)

    @cached_property
    def neighbourhood(self) -> np.ndarray:
        """Each buffer's size plus its neighbours' sizes (what must stack around it)."""
        return allocation_kernels.neighbourhood(self.indptr, self.indices, self.size)

    @cached_property
    def clique(self) -> np.ndarray:
        """Members of a heavy clique, as a mask: the instance's (`problems.allocation.
        heavy_clique`), which the harness's bound reads too, so it is grown once a solve."""
        mask = np.zeros(len(self), dtype=bool)
        if len(self):
            mask[heavy_clique(self.source)] = True
        return mask

    @cached_property
    def clique_bound(self) -> int:
        """The bound on the peak of `clique` (sizes rounded to the alignment as
        `problems.allocation.clique_bound` does), or the largest size if more: sound, since
        the members are pairwise conflicting, so they stack."""
        if not len(self):
            return 0
        members = np.flatnonzero(self.clique).tolist()
        found = ac.rounded_clique_bound(self.size, members, self.alignment)
        return max(found, int(self.size.max()))

    @cached_property
    def bits(self) -> np.ndarray | None:
        """The bit matrix `place` packs through when the graph is dense (`DENSE_SHARE`), else
        None (the rows)."""
        return dense_bits(len(self), self.indptr, self.indices)

    @cached_property
    def components(self) -> tuple[np.ndarray, int]:
        """(component label of each buffer, how many components)."""
        if len(self) == 0:
            return np.zeros(0, dtype=np.int64), 0
        label = _components(self.indptr, self.indices)
        return label, int(label.max()) + 1

    def component_peaks(self, offsets: np.ndarray) -> np.ndarray:
        label, count = self.components
        out = np.zeros(count, dtype=np.int64)
        np.maximum.at(out, label, offsets + self.size)
        return out

    def place(
        self, order: np.ndarray, best_fit: bool = False, cutoff: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(offsets, peak) of one greedy pass over `order` (see `pack`)."""
        return pack(
            self.size,
            self.indptr,
            self.indices,
            order,
            self.alignment,
            best_fit=best_fit,
            cutoff=cutoff,
            shift=self.shift,
            bits=self.bits,
        )


_ARRAYS: Kept[ConflictArrays] = Kept()


def conflict_arrays(inst: AllocationInstance) -> ConflictArrays:
    """`ConflictArrays.of(inst)`, kept while `inst` lives."""
    return _ARRAYS.get(inst, ConflictArrays.of)


KEYS: dict[str, Callable[[ConflictArrays], tuple[np.ndarray, ...]]] = {
    # the seed's order: decreasing size (ffd, bfd)
    "size": lambda a: (-a.size,),
    # the members of a heavy clique first (they stack whatever we do), then by size
    "clique": lambda a: (~a.clique, -a.size),
    # most conflicts first
    "degree": lambda a: (-a.degree, -a.size),
    # OmniMalloc's greedy_by_conflict_size: conflicts x size
    "size-degree": lambda a: (-saturating_product(a.degree, a.size), -a.size),
    # the heaviest neighbourhood first (size plus the neighbours' sizes)
    "neighbourhood": lambda a: (-a.neighbourhood, -a.size),
    "clique-neighbourhood": lambda a: (~a.clique, -a.neighbourhood, -a.size),
    # by start clock, the first component first (OmniMalloc's greedy_by_start): every buffer
    # done before another starts comes first; without clocks, as "size" (then skipped as seen)
    "start": lambda a: (*(a.clocks.starts.T if a.clocks is not None else ()), -a.size),
    # the order the buffers are given in
    "input": lambda a: (),
}

PORTFOLIO = (
    ("size", False),  # ffd first: the portfolio is never worse than ffd
    ("start", False),  # on the sync patterns the lowest at 5,000 buffers (0.5-1.7 % below)
    ("size", True),
    ("start", True),
    ("clique", False),
    ("neighbourhood", False),
    ("size-degree", False),
    ("degree", False),
    ("clique-neighbourhood", False),
    ("clique", True),
    ("neighbourhood", True),
    ("size-degree", True),
    ("degree", True),
    ("clique-neighbourhood", True),
    ("input", False),
    ("input", True),
)
"""The portfolio's deterministic part, in the order it is tried."""


def sort_order(arrays: ConflictArrays, name: str) -> np.ndarray:
    """Buffer indices in ordering `name` (ties by id in natural order; `input`: as given)."""
    last = np.arange(len(arrays)) if name == "input" else arrays.rank
    return np.lexsort((last, *reversed(KEYS[name](arrays))))


def greedy(inst: AllocationInstance, order: str = "size", best_fit: bool = False) -> np.ndarray:
    """The offsets of one greedy pass over ordering `order` (a name of `KEYS`)."""
    arrays = conflict_arrays(inst)
    offsets, _ = arrays.place(sort_order(arrays, order), best_fit)
    return offsets


def compaction_order(arrays: ConflictArrays, offsets: np.ndarray) -> np.ndarray:
    """The buffers by increasing offset (ties by id). First fit in this order never places a
    buffer above its offset in the packing `offsets`: every placed neighbour lay wholly below
    it and only moved down. So it keeps or lowers the peak; so does any order that keeps this
    one's relative order on a subset placed first (the rest placed after)."""
    return np.lexsort((arrays.rank, offsets))


def hint_offsets(inst: AllocationInstance, opts: Options) -> np.ndarray | None:
    """The hint's offsets when it packs `inst` (capacity aside), else None."""
    hint = opts.hint
    if not isinstance(hint, AllocationSolution) or len(hint.offsets) != len(inst.buffers):
        return None
    if not all(type(o) is int and 0 <= o < 2**62 for o in hint.offsets):
        return None
    arrays = conflict_arrays(inst)
    off = np.asarray(hint.offsets, dtype=np.int64)
    if (off % arrays.alignment != 0).any():
        return None
    src = np.repeat(np.arange(len(arrays)), arrays.degree)
    dst = arrays.indices
    hit = (off[src] < off[dst] + arrays.size[dst]) & (off[dst] < off[src] + arrays.size[src])
    return None if hit.any() else off


# --- the anytime search ---------------------------------------------------------------------------

KICK = 0.8
"""The share of improvement passes that perturb (may worsen, then are refused) rather than
re-place by an order that cannot worsen (on `concurrent_family`, 0.3 to 0.9 are alike; fewer
lose: the plateau moves alone stall)."""
CLIQUE_S = 0.2
"""Up to `EXACT_CLIQUE_MAX` buffers, `portfolio` searches a maximum clique for so long at most
(and `CLIQUE_SHARE` of its limit), to stop when it meets that bound: it is then optimal. The
search is cached with the instance: the harness's check of the bound (0.2 s) reuses it."""
CLIQUE_SHARE = 0.2
HEAVY_CLIQUE_S = 0.35
"""What the heavy clique (`ConflictArrays.clique`, at its work budget) may take: 0.27-0.31 s
measured on OmniMalloc's 5,000-buffer sources (3-10 million pairs). With less time left it is
not grown: no early stop at its bound, no orderings by it."""
BEST_FIT = 0.2
"""The share of perturbing passes that take best fit instead of perturbing the order."""


def extension_order(
    arrays: ConflictArrays, offsets: np.ndarray, rng: np.random.Generator, mirror: bool
) -> np.ndarray:
    """A random order under which first fit never raises the peak of the packing `offsets`:
    every conflicting pair placed bottom one first (by a point o + u * size drawn in each
    buffer's range: the lower of two conflicting buffers ends at or below the other's start),
    or, `mirror`ed, top one first (first fit then builds the packing upside down; with an
    alignment above one it may lose a little, and is refused then)."""
    n = len(arrays)
    pick = rng.integers(4)
    if pick == 0:
        u = rng.random(n)
    elif pick == 1:
        u = np.full(n, rng.random())
    elif pick == 2:
        u = (rng.random(n) < 0.5).astype(np.float64)
    else:
        u = np.zeros(n)
    key = offsets + u * arrays.size
    if mirror:
        return np.lexsort((-(offsets + arrays.size), -key))
    return np.lexsort((offsets, key))


def kick(
    arrays: ConflictArrays, order: np.ndarray, offsets: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """`order` perturbed, one way of seven drawn at random: a few random buffers moved to the
    front, or to the back; the buffers at the peak moved to the front; one of them with a
    tenth of its neighbours, shuffled, to the front; the buffers reaching into a band below
    the peak moved to the back, largest first; two random positions swapped; a buffer at the
    peak swapped with one of its neighbours (OmniMalloc's annealing move; with it, `bb` at
    10 s on its sync-irregular source, 500 buffers, averaged 53.86 M over six seeds against
    54.15 M without, and OmniMalloc's annealing 54.08 M)."""
    n = len(arrays)
    ends = offsets + arrays.size
    top = int(ends.max())
    pick = int(rng.integers(7))
    if pick == 5:
        out = order.copy()
        i, j = rng.integers(n, size=2)
        out[i], out[j] = out[j], out[i]
        return out
    if pick == 6:  # a buffer at the peak swapped with a neighbour (OmniMalloc's annealing move)
        crit = np.flatnonzero(ends == top)
        c = int(crit[rng.integers(len(crit))])
        mates = arrays.indices[arrays.indptr[c] : arrays.indptr[c + 1]]
        if not len(mates):
            return order
        m = int(mates[rng.integers(len(mates))])
        where = np.empty(n, dtype=np.int64)
        where[order] = np.arange(n)
        out = order.copy()
        out[where[c]], out[where[m]] = m, c
        return out
    if pick in (0, 1):
        moved = rng.choice(n, int(rng.integers(1, min(n, 6) + 1)), replace=False)
    elif pick == 2:
        moved = np.flatnonzero(ends == top)
    elif pick == 3:
        crit = np.flatnonzero(ends == top)
        c = int(crit[rng.integers(len(crit))])
        mates = arrays.indices[arrays.indptr[c] : arrays.indptr[c + 1]]
        moved = np.concatenate([[c], mates[rng.random(len(mates)) < 0.1]])
        rng.shuffle(moved)
    else:
        band = int(rng.integers(1, max(2, top // 4)))
        moved = np.flatnonzero(ends > top - band)
        moved = moved[np.lexsort((arrays.rank[moved], -arrays.size[moved]))]
    mask = np.ones(n, dtype=bool)
    mask[moved] = False
    rest = order[mask[order]]
    return np.concatenate([rest, moved] if pick in (1, 4) else [moved, rest])


@dataclass
class ConcurrentSearch:
    """The portfolio for concurrent lifetimes as a search that can be resumed: `run` carries on
    with the orderings of `PORTFOLIO` not run yet, then improves the best packing, until its
    deadline or until the peak meets the clique bound. The best packing only ever gets lower;
    each component of the conflict graph keeps the lowest packing any ordering gave it."""

    arrays: ConflictArrays
    seed: int = 0
    hint: np.ndarray | None = None
    report: Reporter | None = None
    offsets: np.ndarray = field(init=False)
    peaks: np.ndarray = field(init=False)
    top: int = -1
    label: str = "empty"
    tries: int = 0
    improved: int = 0
    slowest: float = 0.0
    done: int = 0
    bound: int = 0
    tried: set[tuple[bytes, bool]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.offsets = np.zeros(len(self.arrays), dtype=np.int64)
        self.peaks = np.zeros(self.arrays.components[1], dtype=np.int64)
        self.bound = int(self.arrays.size.max()) if len(self.arrays) else 0

    def out_of_time(self, deadline: float) -> bool:
        return self.top <= self.bound or time.perf_counter() + self.slowest > deadline

    def attempt(self, order: np.ndarray, fit: bool, what: str, cutoff: int | None) -> int:
        """One greedy pass (stopped as soon as its peak reaches `cutoff`); its peak."""
        began = time.perf_counter()
        offsets, top = self.arrays.place(order, fit, cutoff)
        self.tries += 1
        self.slowest = max(self.slowest, time.perf_counter() - began)
        if cutoff is None or top < cutoff:
            self.absorb(offsets, top, what)
        self.tell()
        return top

    def tell(self) -> None:
        if self.report is not None and self.top >= 0:
            self.report(self.top)

    def absorb(self, offsets: np.ndarray, top: int, what: str) -> None:
        """Keep each component's packing in `offsets` where it is lower than the best's."""
        peaks = self.arrays.component_peaks(offsets)
        best = self.offsets if self.top >= 0 else None
        kept = lower_parts(best, self.peaks, offsets, peaks, self.arrays.components[0])
        if kept is None:
            return
        self.offsets, self.peaks, mask = kept
        new_top = int(self.peaks.max()) if len(self.peaks) else 0
        if self.top < 0 or new_top < self.top:
            whole = top == new_top and bool(mask.all())
            self.top, self.label = new_top, what if whole else f"{what} (merged by component)"

    def seen(self, order: np.ndarray, fit: bool) -> bool:
        key = (hashlib.blake2b(np.ascontiguousarray(order).data, digest_size=16).digest(), fit)
        if key in self.tried:
            return True
        self.tried.add(key)
        return False

    def tighten(self, deadline: float) -> None:
        """The heavy clique's bound (`ConflictArrays.clique_bound`), for the early stop, when
        the time allows it."""
        if self.clique_affordable(deadline):
            self.bound = max(self.bound, self.arrays.clique_bound)

    def clique_affordable(self, deadline: float) -> bool:
        """Whether the heavy clique is grown already or fits in the time left."""
        grown = "clique" in vars(self.arrays)  # cached_property keeps it there
        return grown or time.perf_counter() + HEAVY_CLIQUE_S <= deadline

    def run(
        self,
        deadline: float,
        upto: int = len(PORTFOLIO),
        improve: bool = True,
        stall: int | None = None,
    ) -> None:
        """The orderings up to `PORTFOLIO[upto]` not run yet (a hint is compacted after the
        first), then, with `improve`, improvement passes while `deadline` allows (and, with
        `stall`, until that many passes in a row found no lower peak)."""
        arrays, whole = self.arrays, self.arrays.components[1] == 1
        while self.done < upto and not (self.tries and self.out_of_time(deadline)):
            key, fit = PORTFOLIO[self.done]
            self.done += 1
            if key.startswith("clique") and not self.clique_affordable(deadline):
                continue
            order = sort_order(arrays, key)
            if not self.seen(order, fit):
                cut = self.top if whole and self.top >= 0 else None
                self.attempt(order, fit, f"{key}/{'best' if fit else 'first'}", cut)
            if self.done == 1:
                self.tighten(deadline)  # after ffd: stop there when it meets the bound
            if self.hint is not None and not self.out_of_time(deadline):
                self.attempt(compaction_order(arrays, self.hint), False, "hint", None)
                self.hint = None
        if self.hint is not None and (not self.tries or not self.out_of_time(deadline)):
            self.attempt(compaction_order(arrays, self.hint), False, "hint", None)
            self.hint = None
        if improve and len(arrays) > 1 and not self.out_of_time(deadline):
            self.improve(deadline, stall)

    def improve(self, deadline: float, stall: int | None = None) -> None:
        """Iterated greedy from the best packing until `deadline`: first fit by a random order
        that cannot raise the peak (`extension_order`), or, one pass in `KICK`, by such an
        order perturbed (`kick`) or with best fit; a pass that does not raise the peak is
        taken (a move along the plateau), any other is stopped at the peak and refused.
        Stops at `deadline`, at the bound, or after `stall` passes in a row without a lower
        peak. (Late acceptance, taking a pass at most the peak of 200 or 1,000 passes ago,
        was alike on OmniMalloc's 500-buffer sources at 10 s: better on some, worse on as
        many.)"""
        arrays, rng = self.arrays, self.rng
        since = 0
        while not self.out_of_time(deadline) and (stall is None or since < stall):
            since += 1
            order = extension_order(arrays, self.offsets, rng, bool(rng.random() < 0.5))
            fit = False
            if rng.random() < KICK:
                if rng.random() < BEST_FIT:
                    fit = True
                else:
                    order = kick(arrays, order, self.offsets, rng)
            began = time.perf_counter()
            offsets, top = arrays.place(order, fit, self.top + 1)
            self.tries += 1
            self.slowest = max(self.slowest, time.perf_counter() - began)
            if top <= self.top:
                if top < self.top:
                    self.improved, since = self.improved + 1, 0
                    self.label = "iterated greedy"
                self.offsets, self.top = offsets, top
                self.peaks = arrays.component_peaks(offsets)
                self.tell()

    def offer(self, offsets: np.ndarray, what: str) -> None:
        """Take in a packing found otherwise (each component where it is lower): the next
        improvement passes start from the best."""
        offsets = np.asarray(offsets, dtype=np.int64)
        top = int((offsets + self.arrays.size).max()) if len(offsets) else 0
        self.absorb(offsets, top, what)
        self.tell()

    def result(self, inst: AllocationInstance, name: str, runtime: float) -> Result:
        return result(
            inst,
            name,
            self.offsets,
            max(self.top, 0),
            runtime,
            tries=self.tries,
            improved=self.improved,
            best_of=self.label,
        )


result = packing_result


def run_greedy(inst: AllocationInstance, name: str, order: str, best_fit: bool) -> Result:
    """One greedy pass over ordering `order` (`ffd`, `bfd` on a concurrent instance)."""
    began = time.perf_counter()
    arrays = conflict_arrays(inst)
    offsets, top = arrays.place(sort_order(arrays, order), best_fit)
    return result(inst, name, offsets, top, time.perf_counter() - began)


def portfolio(
    inst: AllocationInstance,
    opts: Options,
    *,
    name: str = "multistart",
    stall: int | None = None,
) -> Result:
    """Every ordering of `PORTFOLIO` x its fit (a hint compacted after the first), then iterated
    greedy from the best packing, within the time limit (less the time the harness needs to
    check the answer), until the peak meets the clique bound (exact up to `EXACT_CLIQUE_MAX`
    buffers when found within `CLIQUE_S`; else the heavy clique's) or, with `stall`, until that
    many improvement passes in a row found no lower peak. Reports each new best."""
    began = time.perf_counter()
    deadline = began + opts.time_limit - solve_reserve(inst, began, opts.time_limit)
    report = Reporter(opts, name)
    search = ConcurrentSearch(conflict_arrays(inst), opts.seed, hint_offsets(inst, opts), report)
    search.run(deadline, upto=1, improve=False)  # ffd, and the heavy clique's bound
    if search.top > search.bound and len(inst.buffers) <= ac.EXACT_CLIQUE_MAX:
        exact, _ = clique_bound(inst, min(CLIQUE_S, CLIQUE_SHARE * opts.time_limit))
        search.bound = max(search.bound, exact)
    search.run(deadline, stall=stall)
    return report.result(search.result(inst, name, time.perf_counter() - began))


def warm() -> None:
    """Compile (or load from numba's cache) the kernels on a tiny concurrent instance."""
    size = np.array([3, 2, 2], dtype=np.int64)
    pairs = ac.Pairs.of(((0, 1), (1, 2)))
    g = pairs.graph(3)
    bits = bit_rows(3, g.indptr, g.indices)
    for fit in (False, True):
        for shift in (0, 2):
            pack(size, g.indptr, g.indices, np.arange(3), 2, best_fit=fit, shift=shift)
        pack(size, g.indptr, g.indices, np.arange(3), 2, best_fit=fit, bits=bits)
    _components(g.indptr, g.indices)
    allocation_kernels.heavy_clique(g.indptr, g.indices, size, np.arange(3), 1_000)
    allocation_kernels.neighbourhood(g.indptr, g.indices, size)
    held = pairs.array  # read-only int32, as every instance holds its pairs
    allocation_kernels.pair_rows(held[:, 0], held[:, 1], 3)  # the graphs of large instances
    allocation_kernels.overlap_mask(held[:, 0], held[:, 1], size, size)  # the check's screen
