"""Compiled sweep of the allocation checker (`problems.allocation.check` at 10^6 buffers).

The checker's sweep visits buffers by start time (ties by index) and keeps the buffers still
alive ordered by the key (offset, end address, index); each new buffer is compared with its two
neighbours in that order. Here every buffer's rank in the key order is computed once up front
(one stable sort), so the live set is a set of ranks in a 32-ary tree of bit words (n / 4
bytes): insert, remove and the neighbours of a rank touch one word per level, whatever the live
set's size. The kernel reports the same (earlier buffer, new buffer) pairs in the same order as
the Python sweep; the checker formats them.

`pair_rows` turns sorted conflict pairs into compressed rows in two passes, where a stable
argsort of 2m entries took most of 1.8 s at 7 million pairs.

`heavy_clique` grows greedy cliques of a conflict graph (concurrent lifetimes) from many starts,
within a budget of work (`CLIQUE_WORK`): the lower bound of large concurrent instances
(`allocation_conflicts.greedy_clique`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

CLIQUE_WORK = 300_000_000
"""`heavy_clique`'s work budget: about 0.25 s on this machine (0.7 ns a unit). A 5,000-buffer
sync pattern with 8.8 million conflicting pairs took 10 s for its 5,000 starts before there was
one; 1,000-buffer ones (400,000 pairs, 0.1 s) never reach it."""


@njit(cache=True)
def _msb(x):  # pragma: no cover - compiled
    """Index of the highest set bit of 0 < x < 2**32."""
    n = 0
    for step in (16, 8, 4, 2, 1):
        if x >> step:
            x >>= step
            n += step
    return n


@njit(cache=True)
def _insert(bits, base, depth, r):  # pragma: no cover - compiled
    for lvl in range(depth):
        w = base[lvl] + (r >> 5)
        old = bits[w]
        bits[w] = old | (1 << (r & 31))
        if old != 0:  # the levels above already mark this word
            return
        r >>= 5


@njit(cache=True)
def _remove(bits, base, depth, r):  # pragma: no cover - compiled
    for lvl in range(depth):
        w = base[lvl] + (r >> 5)
        bits[w] &= ~(1 << (r & 31))
        if bits[w] != 0:
            return
        r >>= 5


@njit(cache=True)
def _below(bits, base, depth, r):  # pragma: no cover - compiled
    """The largest member < r, or -1."""
    lvl = 0
    while True:
        if lvl == depth:
            return -1
        m = bits[base[lvl] + (r >> 5)] & ((1 << (r & 31)) - 1)
        if m:
            r = (r & ~31) | _msb(m)
            break
        r >>= 5
        lvl += 1
    while lvl > 0:
        lvl -= 1
        r = (r << 5) | _msb(bits[base[lvl] + r])
    return r


@njit(cache=True)
def _above(bits, base, depth, r):  # pragma: no cover - compiled
    """The smallest member > r, or -1."""
    lvl = 0
    while True:
        if lvl == depth:
            return -1
        m = bits[base[lvl] + (r >> 5)] >> ((r & 31) + 1)
        if m:
            r = r + 1 + _msb(m & -m)
            break
        r >>= 5
        lvl += 1
    while lvl > 0:
        lvl -= 1
        m = bits[base[lvl] + r]
        r = (r << 5) | _msb(m & -m)
    return r


@njit(cache=True)
def sweep(rank, offset, stop, start, gone_end, gone_rank, span):  # pragma: no cover - compiled
    """(rank of the earlier buffer, position of the later one) of every address-overlapping pair
    the sweep meets, in the order it meets them: each buffer with its live neighbour below,
    then above, in key order.

    Buffers come in sweep order (by start, ties by index): `rank` (in the key order (offset,
    end address, index)), `offset`, `stop` (end address), `start`; `gone_end` / `gone_rank`:
    the ends and ranks of all buffers sorted by end; `span[r]` = (offset, stop) of rank r. All
    reads but the neighbours' spans are sequential. The live ranks are a 32-ary tree of bit
    words (level l marks the non-empty words of level l - 1)."""
    n = len(rank)
    words = 0
    depth = 0
    m = n
    while True:  # level sizes: ceil(n / 32), ceil(that / 32), ..., 1
        m = (m + 31) >> 5
        words += m
        depth += 1
        if m == 1:
            break
    base = np.zeros(depth, dtype=np.int64)
    m = n
    for lvl in range(1, depth):
        m = (m + 31) >> 5
        base[lvl] = base[lvl - 1] + m
    bits = np.zeros(words, dtype=np.int64)
    cap = 16
    first = np.empty(cap, dtype=np.int64)
    second = np.empty(cap, dtype=np.int64)
    found = 0
    gone = 0
    for k in range(n):
        s = start[k]
        # a buffer ending before s started before it (start <= end), so it is live: it leaves
        while gone < n and gone_end[gone] < s:
            _remove(bits, base, depth, gone_rank[gone])
            gone += 1
        for side in range(2):
            if side == 0:
                r = _below(bits, base, depth, rank[k])
            else:
                r = _above(bits, base, depth, rank[k])
            if r >= 0 and span[r, 0] < stop[k] and offset[k] < span[r, 1]:
                if found == cap:
                    cap *= 2
                    first = _grow(first, cap)
                    second = _grow(second, cap)
                first[found] = r
                second[found] = k
                found += 1
        _insert(bits, base, depth, rank[k])
    return first[:found].copy(), second[:found].copy()


@njit(cache=True)
def _grow(a, cap):  # pragma: no cover - compiled
    out = np.empty(cap, dtype=np.int64)
    out[: len(a)] = a
    return out


def overlaps(
    offset: np.ndarray, size: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stop, earlier, later): the end addresses, and the overlapping pairs the checker's sweep
    reports, in its order. All int64; offset + size must not overflow (the caller ensures)."""
    n = len(offset)
    stop = offset + size
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return stop, empty, empty
    owner = sorted_by(offset, size)  # the key order: equal offsets, the smaller stop first
    rank = np.empty(n, dtype=np.int64)
    rank[owner] = np.arange(n, dtype=np.int64)
    by_start = sorted_by(start)
    by_end = np.argsort(end)  # leaving order among equal ends is immaterial
    span = np.stack([offset[owner], stop[owner]], axis=1)
    first, second = sweep(
        rank[by_start],
        offset[by_start],
        stop[by_start],
        start[by_start],
        end[by_end],
        rank[by_end],
        span,
    )
    return stop, owner[first], by_start[second]


def sorted_by(*keys: np.ndarray) -> np.ndarray:
    """Indices in the order of `keys` (primary first), ties by index: a stable sort's order.
    When the key ranges and the index fit in 63 bits together, one sort of packed distinct
    integers; else `np.lexsort`."""
    n = len(keys[0])
    lows = [int(k.min()) for k in keys]
    widths = [(int(k.max()) - lo).bit_length() for k, lo in zip(keys, lows, strict=True)]
    if sum(widths) + max(n - 1, 1).bit_length() > 63:
        return np.lexsort(keys[::-1])
    packed = np.zeros(n, dtype=np.int64)
    for k, lo, w in zip(keys, lows, widths, strict=True):
        packed = (packed << w) | (k - lo)
    packed = (packed << max(n - 1, 1).bit_length()) | np.arange(n, dtype=np.int64)
    return np.argsort(packed)


@njit(cache=True)
def pair_rows(lo, hi, n):  # pragma: no cover - compiled
    """(indptr, indices) of the graph of the pairs (lo[k], hi[k]), lo < hi, sorted by (lo, hi):
    row v lists its neighbours below it, then above it, each ascending, because the pairs
    (i, v) with i < v all come before the pairs (v, j)."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(len(lo)):
        indptr[lo[k] + 1] += 1
        indptr[hi[k] + 1] += 1
    for v in range(n):
        indptr[v + 1] += indptr[v]
    fill = indptr[:-1].copy()
    indices = np.empty(2 * len(lo), dtype=np.int64)
    for k in range(len(lo)):
        i, j = lo[k], hi[k]
        indices[fill[j]] = i
        fill[j] += 1
        indices[fill[i]] = j
        fill[i] += 1
    return indptr, indices


@njit(cache=True)
def overlap_mask(first, second, size, offsets):  # pragma: no cover - compiled
    """Per pair k, whether buffers first[k] and second[k] share addresses ([offset, offset +
    size) intersect): `allocation_conflicts.overlapping`'s screen in one pass (10 million
    pairs: 0.2-0.34 s in numpy, its four gathers and temporaries)."""
    m = len(first)
    hit = np.zeros(m, dtype=np.bool_)
    for k in range(m):
        i, j = first[k], second[k]
        if offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]:
            hit[k] = True
    return hit


@njit(cache=True)
def neighbourhood(indptr, indices, weight):  # pragma: no cover - compiled
    """Each vertex's weight plus its neighbours' (`allocation_conflicts.neighbourhood_weight`
    in one pass: on 20 million row entries 0.23-0.41 s in numpy, a few ms here)."""
    n = len(weight)
    out = np.empty(n, dtype=np.int64)
    for v in range(n):
        total = weight[v]
        for p in range(indptr[v], indptr[v + 1]):
            total += weight[indices[p]]
        out[v] = total
    return out


@njit(cache=True)
def heavy_clique(indptr, indices, weight, starts, budget):  # pragma: no cover - compiled
    """The heaviest of the greedy cliques grown from each vertex of `starts`: keep adding the
    heaviest vertex adjacent to all chosen (ties: the lowest index), as `greedy_clique` does
    from its 64 starts; candidates are kept in index order and cut by a stamped mark. Stops
    after the start at which the work (candidates scanned and neighbours marked) passes
    `budget`: on dense graphs of thousands of buffers every start costs milliseconds."""
    n = len(weight)
    mark = np.zeros(n, dtype=np.int64)
    cand = np.empty(n, dtype=np.int64)
    members = np.empty(n, dtype=np.int64)
    best = np.empty(0, dtype=np.int64)
    best_w = -1
    stamp = 0
    work = 0
    for v in starts:
        if work > budget:
            break
        k = 1
        members[0] = v
        total = weight[v]
        c = 0
        for p in range(indptr[v], indptr[v + 1]):
            cand[c] = indices[p]
            c += 1
        while c > 0:
            pick = 0
            for t in range(1, c):
                if weight[cand[t]] > weight[cand[pick]]:
                    pick = t
            u = cand[pick]
            members[k] = u
            k += 1
            total += weight[u]
            stamp += 1
            work += 2 * c + indptr[u + 1] - indptr[u]
            for p in range(indptr[u], indptr[u + 1]):
                mark[indices[p]] = stamp
            kept = 0
            for t in range(c):
                if mark[cand[t]] == stamp:
                    cand[kept] = cand[t]
                    kept += 1
            c = kept
        if total > best_w:
            best_w = total
            best = members[:k].copy()
    return best
