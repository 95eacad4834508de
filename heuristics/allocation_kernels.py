"""Compiled placement engine for the allocation heuristics, and its pure-Python reference.

Placing a buffer needs the address intervals of the already-placed buffers whose lifetimes
overlap its own. Instead of the full lifetime-overlap graph (quadratic in the live-set size,
hundreds of MB at 10^6 buffers) the engine keeps a time-bucketed index: time is cut into
buckets of about one mean lifetime, each bucket holds the placed buffers alive in it, and a
query scans the buckets its lifetime covers (a buffer is reported only in the first bucket
both share, so once). Each buffer sits in at most lifetime / width + 2 buckets and the width
is at least the mean lifetime, so the index holds at most 3 n entries: memory linear in n.

Each bucket keeps its entries sorted by address (an insertion shifts the higher ones up), so
a buffer covering few buckets walks its conflicting intervals in address order by merging
them, with no sort, and first fit stops at its gap; a long-lived buffer gathers its conflicts
and sorts them (one sort of packed integer keys). One walk in address order yields the free
gaps: first fit takes the lowest gap whose aligned start fits, best fit the fitting gap of
least slack (ties: the lowest), both falling back to the aligned top. First fit is therefore
exactly the seed's lowest free aligned offset. `place_py` is the reference implementation the
tests hold the kernel to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

NO_CUTOFF = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Layout:
    """The time buckets: bucket b covers times [t0 + b * width, t0 + (b + 1) * width) and owns
    index slots [ptr[b], ptr[b + 1]) (as many as buffers alive in it)."""

    t0: int
    width: int
    ptr: np.ndarray

    @property
    def entries(self) -> int:
        return int(self.ptr[-1])


def layout(start: np.ndarray, end: np.ndarray) -> Layout:
    """Bucket width = max(mean lifetime, span / n, 1): at most ~3 n index entries in all."""
    n = len(start)
    if n == 0:
        return Layout(0, 1, np.zeros(1, dtype=np.int64))
    t0 = int(start.min())
    span = int(end.max()) - t0 + 1
    total = int((end - start + 1).sum())
    width = max(1, -(-total // n), -(-span // n))
    nb = (span - 1) // width + 1
    return Layout(t0, width, _bucket_ptr(start, end, t0, width, nb))


@njit(cache=True)
def _bucket_ptr(start, end, t0, width, nb):  # pragma: no cover - compiled
    counts = np.zeros(nb + 1, dtype=np.int64)
    for j in range(len(start)):
        b0 = (start[j] - t0) // width
        b1 = (end[j] - t0) // width
        for b in range(b0, b1 + 1):
            counts[b + 1] += 1
    for b in range(nb):
        counts[b + 1] += counts[b]
    return counts


@njit(cache=True)
def _gap(keys, los, his, d, shift, size, alignment, best_fit):  # pragma: no cover - compiled
    """The offset for a buffer of `size` among d intervals sorted by start: packed keys
    (start << shift | length) when shift > 0, else `los`/`his` in order.

    Walks the intervals in address order keeping `cur`, the aligned end of everything so
    far: a start at or beyond cur + size closes a gap [cur, start) that fits."""
    mask = (np.int64(1) << shift) - 1
    cur = 0
    best = -1
    best_slack = 0
    for t in range(d):
        if shift > 0:
            lo = keys[t] >> shift
            hi = lo + (keys[t] & mask)
        else:
            lo = los[t]
            hi = his[t]
        slack = lo - cur - size
        if slack >= 0:
            if not best_fit:
                return cur
            if best < 0 or slack < best_slack:
                best = cur
                best_slack = slack
        if alignment != 1:
            hi = -(-hi // alignment) * alignment
        cur = max(cur, hi)
    return cur if best < 0 else best


MERGE_BUCKETS = 8
"""A buffer whose lifetime covers at most this many buckets finds its gap by merging their
sorted entries (a k-way walk in address order, stopping at the first fitting gap for first
fit); a longer-lived one gathers its conflicts and sorts them."""


@njit(cache=True)
def _merge_gap(
    keys,
    e_hi,
    e_start,
    e_end,
    ptr,
    fill,
    b0,
    b1,
    s,
    e,
    t0,
    width,
    shift,
    size,
    alignment,
    best_fit,
    heads,
):  # pragma: no cover - compiled
    """`_gap` over the entries of buckets b0..b1 (each sorted by key) that conflict with the
    lifetime [s, e], walked in address order by a k-way merge: no sort, and first fit (or a
    best fit of no slack) stops at its gap."""
    k = b1 - b0 + 1
    for c in range(k):
        heads[c] = ptr[b0 + c]
    mask = (np.int64(1) << shift) - 1
    cur = 0
    best = -1
    best_slack = 0
    while True:
        pick = -1
        key = 0
        for c in range(k):
            q = heads[c]
            if q < ptr[b0 + c] + fill[b0 + c] and (pick < 0 or keys[q] < key):
                pick = c
                key = keys[q]
        if pick < 0:
            break
        q = heads[pick]
        heads[pick] = q + 1
        sj = e_start[q]
        if sj > e or e_end[q] < s or (pick > 0 and sj < t0 + (b0 + pick) * width):
            continue  # no conflict, or seen in an earlier bucket
        if shift > 0:
            lo = key >> shift
            hi = lo + (key & mask)
        else:
            lo = key
            hi = e_hi[q]
        slack = lo - cur - size
        if slack >= 0:
            if not best_fit or slack == 0:
                return cur
            if best < 0 or slack < best_slack:
                best = cur
                best_slack = slack
        if alignment != 1:
            hi = -(-hi // alignment) * alignment
        cur = max(cur, hi)
    return cur if best < 0 else best


@njit(cache=True)
def _place(
    size, start, end, order, alignment, best_fit, t0, width, ptr, shift, cutoff, offsets
):  # pragma: no cover - compiled
    """Place `order` into `offsets` (others untouched); returns the peak, or stops early and
    returns a value >= `cutoff` as soon as the peak reaches `cutoff`.

    The index keeps each placed buffer's interval as one packed key (offset << shift | size)
    when `shift` > 0 (every offset < 2^(62 - shift), every size < 2^shift), else its offset
    (and its end in `e_hi`); each bucket's entries stay sorted by that key (an insertion
    shifts the larger ones up). A buffer covering few buckets merges them (`_merge_gap`);
    one covering many gathers its conflicts (a branch-free scan: every entry is written, the
    count advances only on a hit) and sorts them."""
    nb = len(ptr) - 1
    fill = np.zeros(nb, dtype=np.int64)
    m = ptr[nb]
    e_start = np.empty(m, dtype=np.int64)
    e_end = np.empty(m, dtype=np.int64)
    e_lo = np.empty(m, dtype=np.int64)  # the packed key when shift > 0
    e_hi = np.empty(m if shift == 0 else 0, dtype=np.int64)
    heads = np.empty(MERGE_BUCKETS, dtype=np.int64)
    cap = 256
    los = np.empty(cap, dtype=np.int64)
    his = np.empty(cap, dtype=np.int64)
    top = 0
    for k in range(len(order)):
        i = order[k]
        s = start[i]
        e = end[i]
        sz = size[i]
        b0 = (s - t0) // width
        b1 = (e - t0) // width
        cur = 0
        if b1 - b0 < MERGE_BUCKETS:
            cur = _merge_gap(
                e_lo,
                e_hi,
                e_start,
                e_end,
                ptr,
                fill,
                b0,
                b1,
                s,
                e,
                t0,
                width,
                shift,
                sz,
                alignment,
                best_fit,
                heads,
            )
        else:
            need = 0
            for b in range(b0, b1 + 1):
                need += fill[b]
            if need > cap:
                while cap < need:
                    cap *= 2
                los = np.empty(cap, dtype=np.int64)
                his = np.empty(cap, dtype=np.int64)
            d = 0
            for b in range(b0, b1 + 1):
                lo_t = t0 + b * width  # first time of bucket b
                first = b == b0  # later buckets skip buffers alive before them: seen already
                for q in range(ptr[b], ptr[b] + fill[b]):
                    sj = e_start[q]
                    hit = (sj <= e) & (e_end[q] >= s) & (first | (sj >= lo_t))
                    los[d] = e_lo[q]
                    if shift == 0:
                        his[d] = e_hi[q]
                    d += hit
            if d > 0:
                if shift > 0:
                    keys = los[:d]
                    keys.sort()
                    cur = _gap(keys, keys, his, d, shift, sz, alignment, best_fit)
                else:
                    perm = np.argsort(los[:d])
                    cur = _gap(perm, los[perm], his[perm], d, 0, sz, alignment, best_fit)
        offsets[i] = cur
        if cur + sz > top:
            top = cur + sz
            if top >= cutoff:
                return top
        key = (cur << shift) | sz if shift > 0 else cur
        for b in range(b0, b1 + 1):
            lo_q = ptr[b]
            hi_q = ptr[b] + fill[b]
            last = hi_q
            while lo_q < hi_q:  # the first entry with a larger key
                mid = (lo_q + hi_q) // 2
                if e_lo[mid] <= key:
                    lo_q = mid + 1
                else:
                    hi_q = mid
            for q in range(last, lo_q, -1):
                e_lo[q] = e_lo[q - 1]
                e_start[q] = e_start[q - 1]
                e_end[q] = e_end[q - 1]
                if shift == 0:
                    e_hi[q] = e_hi[q - 1]
            e_lo[lo_q] = key
            e_start[lo_q] = s
            e_end[lo_q] = e
            if shift == 0:
                e_hi[lo_q] = cur + sz
            fill[b] += 1
    return top


def packing_shift(size: np.ndarray, alignment: int) -> int:
    """Bits for a size in the packed keys (offset << shift | size), or 0 when an offset could
    overflow them (no offset exceeds the stacking bound: every buffer on its own aligned slot)."""
    if len(size) == 0:
        return 1
    shift = max(1, int(size.max()).bit_length())
    stack = int(((size + alignment - 1) // alignment).sum()) * alignment
    return shift if stack < 2 ** (62 - shift) else 0


def place(
    size: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    order: np.ndarray,
    alignment: int = 1,
    *,
    best_fit: bool = False,
    lay: Layout | None = None,
    cutoff: int | None = None,
    packed: bool = True,
) -> tuple[np.ndarray, int]:
    """(offsets, peak) of placing `order` (int64 arrays); unplaced buffers get -1. With
    `cutoff`, stops as soon as the peak reaches it (the peak returned is then >= cutoff).
    `packed=False` forces the argsort path that very large offsets take."""
    lay = lay if lay is not None else layout(start, end)
    offsets = np.full(len(size), -1, dtype=np.int64)
    top = _place(
        size,
        start,
        end,
        np.asarray(order, dtype=np.int64),
        np.int64(alignment),
        bool(best_fit),
        np.int64(lay.t0),
        np.int64(lay.width),
        lay.ptr,
        np.int64(packing_shift(size, alignment) if packed else 0),
        np.int64(NO_CUTOFF if cutoff is None else cutoff),
        offsets,
    )
    return offsets, int(top)


@njit(cache=True)
def _section_load(start, end, size):  # pragma: no cover - compiled
    """Per buffer: the largest total live size at any time of its lifetime."""
    n = len(start)
    times = np.unique(start)  # the live total peaks only where some buffer starts
    m = len(times)
    delta = np.zeros(m + 1, dtype=np.int64)
    for j in range(n):
        delta[np.searchsorted(times, start[j])] += size[j]
        delta[np.searchsorted(times, end[j], side="right")] -= size[j]
    tree_n = 1
    while tree_n < m:
        tree_n *= 2
    tree = np.zeros(2 * tree_n, dtype=np.int64)
    run = 0
    for k in range(m):
        run += delta[k]
        tree[tree_n + k] = run
    for k in range(tree_n - 1, 0, -1):
        tree[k] = max(tree[2 * k], tree[2 * k + 1])
    out = np.empty(n, dtype=np.int64)
    for j in range(n):
        lo = np.searchsorted(times, start[j]) + tree_n
        hi = np.searchsorted(times, end[j], side="right") - 1 + tree_n
        best = 0
        while lo <= hi:
            if lo & 1:
                best = max(best, tree[lo])
                lo += 1
            if not hi & 1:
                best = max(best, tree[hi])
                hi -= 1
            lo //= 2
            hi //= 2
        out[j] = best
    return out


def section_load(start: np.ndarray, end: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The peak live total over each buffer's lifetime (its tightest time section)."""
    if len(start) == 0:
        return np.zeros(0, dtype=np.int64)
    return _section_load(start, end, size)


def conflict_degree(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per buffer: how many other buffers' lifetimes overlap its own, without the graph
    (those starting by its end, minus those ended before its start, minus itself)."""
    s_sorted, e_sorted = np.sort(start), np.sort(end)
    began = np.searchsorted(s_sorted, end, side="right")
    gone = np.searchsorted(e_sorted, start, side="left")
    return began - gone - 1


# --- pure-Python reference ----------------------------------------------------------------------


def place_py(
    size: Sequence[int],
    start: Sequence[int],
    end: Sequence[int],
    order: Sequence[int],
    alignment: int = 1,
    *,
    best_fit: bool = False,
) -> list[int]:
    """Reference placement, quadratic and literal. First fit is the seed's algorithm: from
    offset 0, jump past the end of every placed, time-overlapping buffer in the way, until
    none is. Best fit walks the free gaps of those buffers in address order."""
    a = alignment
    offsets = [-1] * len(size)
    placed: list[int] = []
    for i in order:
        mates = [j for j in placed if max(start[i], start[j]) <= min(end[i], end[j])]
        if not best_fit:
            cur = 0
            while True:
                hits = [
                    offsets[j] + size[j]
                    for j in mates
                    if offsets[j] < cur + size[i] and cur < offsets[j] + size[j]
                ]
                if not hits:
                    break
                cur = -(-max(cur + 1, *hits) // a) * a
        else:
            spans = sorted((offsets[j], offsets[j] + size[j]) for j in mates)
            cur, best, best_slack = 0, -1, -1
            for lo, hi in spans:
                if lo >= cur + size[i] and (best < 0 or lo - cur - size[i] < best_slack):
                    best, best_slack = cur, lo - cur - size[i]
                cur = max(cur, -(-hi // a) * a)
            cur = cur if best < 0 else best
        offsets[i] = cur
        placed.append(i)
    return offsets
