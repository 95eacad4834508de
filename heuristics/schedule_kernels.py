"""Compiled kernels of the schedule `shift` search (numba, `@njit(cache=True)`).

Everything here works on int64 arrays so that numba compiles it once and caches it: the graph
as CSR arrays (`Csr`), the mutable schedule (`Arrays`) and scratch space (`Work`). The Python
side (`heuristics/schedule_shift.py`) owns these and the clock. The tests hold every kernel to
recomputation from the order (`problems.schedule`), and run this same code under the plain
interpreter (`NUMBA_DISABLE_JIT=1`: the pure-Python reference) to check it takes the same moves.

Sections: schedule state (spans, first/last weights, the live profile, rotations); one block
(how far it can move, the allocs it shares); sum-liveness deltas of a block's moves; peak-mode
keys of a block's moves (passed ops + a segment tree over the block's positions); the ladder
(which blocks can move, one block's best move, the sweeps); annealing (random moves drawn as
CPython's `random.Random` draws them); evaluating a whole order. See the module docstring of
`heuristics/schedule_shift.py` for the algorithm.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np
from numba import njit

# meta[] slots of `Arrays`: scalars the kernels update in place
SUM, MOVES, PROPOSALS, PEAK, EXCESS, PEAK_MODE = range(6)
# cursor[] slots of `Work`: where the ladder stopped, so a later call resumes there
LEVEL, START, SWEEP_IMPROVED, LEVEL_IMPROVED, CLIMBED = range(5)


class Csr(NamedTuple):
    """The graph as int64 CSR arrays (row v of `succ` is succ_idx[succ_ptr[v]:succ_ptr[v+1]])."""

    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    op_ptr: np.ndarray  # op -> the allocs it uses
    op_alloc: np.ndarray
    alloc_ptr: np.ndarray  # alloc -> its (distinct) users
    alloc_op: np.ndarray
    size: np.ndarray
    multi: np.ndarray  # 1 when the alloc has >= 2 users (only those cross positions)
    edge_u: np.ndarray  # precedence edges u -> v
    edge_v: np.ndarray


class Arrays(NamedTuple):
    """Mutable schedule state: order and positions, alloc spans, first/last weights, profile."""

    order: np.ndarray
    pos: np.ndarray
    first: np.ndarray  # position of the alloc's first user, -1 without users
    last: np.ndarray
    flpos: np.ndarray  # sizes of multi-user allocs starting here minus those ending here
    flsum: np.ndarray  # flsum[p] = sum(flpos[:p]) = size of multi allocs with first < p <= last
    prof: np.ndarray  # peak mode: total size live at each position
    pre_max: np.ndarray  # pre_max[p] = max(prof[:p]), 0 if empty
    suf_max: np.ndarray  # suf_max[p] = max(prof[p:]), 0 if empty
    hot: np.ndarray  # hot[p] = number of positions < p at the peak
    meta: np.ndarray  # SUM, MOVES, PROPOSALS, PEAK, EXCESS, PEAK_MODE


class Work(NamedTuple):
    """Scratch space reused by every call (sized once for the graph)."""

    mark: np.ndarray  # per alloc: stamp of the last block that met it
    tick: np.ndarray  # [current stamp]
    cross: np.ndarray  # block's allocs with users inside and outside it (multi-user)
    touched: np.ndarray  # every alloc the block's ops use
    delta: np.ndarray  # sum-liveness change per distance
    c: np.ndarray  # piecewise-linear difference arrays (constant, slope)
    sl: np.ndarray
    passed: np.ndarray  # peak mode: live total at each passed op after the move
    pdiff: np.ndarray  # its difference array, kept all zero between calls
    pidx: np.ndarray  # the entries of pdiff a call set (to clear them again)
    pmax: np.ndarray
    pcnt: np.ndarray
    ok: np.ndarray  # movable block starts of the current level
    dirty: np.ndarray  # block starts this sweep of the ladder looks at (all, on a new level)
    again: np.ndarray  # ... and the next sweep: those next to a move of this one
    diff: np.ndarray
    buf: np.ndarray
    tree: np.ndarray  # segment tree over block offsets: max of the subtree (with lazy adds)
    tcnt: np.ndarray  # number of leaves at that max
    tadd: np.ndarray  # pending add of an internal node
    ev_d: np.ndarray  # events of the block profile as the distance grows
    ev_lo: np.ndarray
    ev_hi: np.ndarray
    ev_w: np.ndarray
    ev_next: np.ndarray  # events chained by distance: ev_head[d] -> ev_next[j] -> ... -1
    ev_head: np.ndarray
    out: np.ndarray  # (0, 4) placeholder for peak_keys' per-distance output
    cursor: np.ndarray  # LEVEL, START, SWEEP_IMPROVED, LEVEL_IMPROVED, CLIMBED


def new_arrays(n_ops: int, n_allocs: int) -> Arrays:
    """Zeroed state arrays for a graph of this size (filled by `init_state`)."""
    z = np.zeros
    return Arrays(
        z(n_ops, np.int64),
        z(n_ops, np.int64),
        z(n_allocs, np.int64),
        z(n_allocs, np.int64),
        z(n_ops + 1, np.int64),
        z(n_ops + 2, np.int64),
        z(n_ops + 1, np.int64),
        z(n_ops + 2, np.int64),
        z(n_ops + 2, np.int64),
        z(n_ops + 2, np.int64),
        z(6, np.int64),
    )


def new_work(n_ops: int, n_allocs: int) -> Work:
    """Scratch arrays for a graph of this size."""
    leaves = 1
    while leaves < max(n_ops, 1):
        leaves *= 2
    sizes = {
        "mark": n_allocs,
        "tick": 1,
        "cross": n_allocs,
        "touched": n_allocs,
        "pidx": 2 * n_allocs + 1,
        "tree": 2 * leaves,
        "tcnt": 2 * leaves,
        "tadd": 2 * leaves,
        "ev_d": 3 * n_allocs + 1,
        "ev_lo": 3 * n_allocs + 1,
        "ev_hi": 3 * n_allocs + 1,
        "ev_w": 3 * n_allocs + 1,
        "ev_next": 3 * n_allocs + 1,
        "cursor": 5,
    }
    arrays = {f: np.zeros(sizes.get(f, n_ops + 2), dtype=np.int64) for f in Work._fields}
    arrays["out"] = np.zeros((0, 4), dtype=np.int64)
    arrays["cursor"][LEVEL] = 1
    arrays["dirty"][:] = 1
    return Work(**arrays)


# Hot helpers take plain arrays and are inlined; functions taking the tuples read the fields
# they need once at the top (reading a tuple field inside a loop costs a reference count).

# --- schedule state -------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _span(alloc_ptr, alloc_op, pos, a):
    """(first, last) position of alloc a's users, (-1, -1) without users."""
    lo = alloc_ptr[a]
    hi = alloc_ptr[a + 1]
    if lo == hi:
        return -1, -1
    f = pos[alloc_op[lo]]
    la = f
    for i in range(lo + 1, hi):
        p = pos[alloc_op[i]]
        if p < f:
            f = p
        if p > la:
            la = p
    return f, la


@njit(cache=True, inline="always")
def _profile_at(op_ptr, op_alloc, size, order, first, flsum, p):
    """Total size live at position p: multi allocs crossing into p plus allocs starting at p."""
    total = flsum[p]
    v = order[p]
    for i in range(op_ptr[v], op_ptr[v + 1]):
        a = op_alloc[i]
        if first[a] == p:
            total += size[a]
    return total


@njit(cache=True)
def _profile_stats(st):
    """Peak, positions at the peak, prefix/suffix maxima and the prefix count of peak positions."""
    prof, pre_max, suf_max, hot, meta = st.prof, st.pre_max, st.suf_max, st.hot, st.meta
    n = st.order.shape[0]
    peak = 0
    for p in range(n):
        if prof[p] > peak:
            peak = prof[p]
    pre_max[0] = 0
    hot[0] = 0
    for p in range(n):
        pre_max[p + 1] = max(pre_max[p], prof[p])
        hot[p + 1] = hot[p] + (1 if prof[p] >= peak else 0)
    suf_max[n] = 0
    for p in range(n - 1, -1, -1):
        suf_max[p] = max(suf_max[p + 1], prof[p])
    meta[PEAK] = peak
    meta[EXCESS] = hot[n]


@njit(cache=True)
def init_state(g, st, peak_mode):
    """Fill positions, spans, first/last weights, sum-liveness and (peak mode) the profile."""
    order, pos, first, last, flpos, flsum = st.order, st.pos, st.first, st.last, st.flpos, st.flsum
    size, multi, alloc_ptr, alloc_op = g.size, g.multi, g.alloc_ptr, g.alloc_op
    n = order.shape[0]
    for p in range(n):
        pos[order[p]] = p
    total = 0
    flpos[:] = 0
    for a in range(size.shape[0]):
        f, la = _span(alloc_ptr, alloc_op, pos, a)
        first[a] = f
        last[a] = la
        if f < 0:
            continue
        total += size[a] * (la - f + 1)
        if multi[a]:
            flpos[f] += size[a]
            flpos[la] -= size[a]
    flsum[0] = 0
    for p in range(n):
        flsum[p + 1] = flsum[p] + flpos[p]
    st.meta[:] = 0
    st.meta[SUM] = total
    st.meta[PEAK_MODE] = peak_mode
    for p in range(n):
        st.prof[p] = _profile_at(g.op_ptr, g.op_alloc, size, order, first, flsum, p)
    _profile_stats(st)


@njit(cache=True)
def refresh(g, st, s, e):
    """After the ops at positions [s, e) were reordered among themselves (st.order written):
    update what they touch; returns the change in sum-liveness.

    Only allocs with their first or last user in the window change span, the window's
    first/last weights are rebuilt (their sum, hence flsum outside the window, is unchanged),
    and in peak mode the profile changes only inside the window.
    """
    order, pos, first, last, flpos, flsum = st.order, st.pos, st.first, st.last, st.flpos, st.flsum
    op_ptr, op_alloc, alloc_ptr, alloc_op = g.op_ptr, g.op_alloc, g.alloc_ptr, g.alloc_op
    size, multi = g.size, g.multi
    change = 0
    for p in range(s, e):
        pos[order[p]] = p
    for p in range(s, e):
        v = order[p]
        for i in range(op_ptr[v], op_ptr[v + 1]):
            a = op_alloc[i]
            if (s <= first[a] < e) or (s <= last[a] < e):
                f, la = _span(alloc_ptr, alloc_op, pos, a)
                change += size[a] * ((la - f) - (last[a] - first[a]))
                first[a] = f
                last[a] = la
    for p in range(s, e):
        flpos[p] = 0
        v = order[p]
        for i in range(op_ptr[v], op_ptr[v + 1]):
            a = op_alloc[i]
            if multi[a]:
                if first[a] == p:
                    flpos[p] += size[a]
                if last[a] == p:
                    flpos[p] -= size[a]
    for p in range(s, e):
        flsum[p + 1] = flsum[p] + flpos[p]
    if st.meta[PEAK_MODE]:
        prof = st.prof
        for p in range(s, e):
            prof[p] = _profile_at(op_ptr, op_alloc, size, order, first, flsum, p)
        _profile_stats(st)
    return change


@njit(cache=True)
def rotate(g, st, w, s, k0, k1):
    """Swap the adjacent sub-schedules [s, s+k0) and [s+k0, s+k0+k1); update what they touch
    (`refresh`; the caller knows the sum-liveness change)."""
    order, buf = st.order, w.buf
    e = s + k0 + k1
    for p in range(s, e):
        buf[p - s] = order[p]
    for j in range(k1):
        order[s + j] = buf[k0 + j]
    for j in range(k0):
        order[s + k1 + j] = buf[j]
    refresh(g, st, s, e)


@njit(cache=True)
def move(g, st, w, s, n, dist):
    """Move block [s, s+n) by dist places (positive: right, negative: left)."""
    if dist > 0:
        rotate(g, st, w, s, n, dist)
    elif dist < 0:
        rotate(g, st, w, s + dist, -dist, n)


# --- a block: how far it can move, which allocs it shares -----------------------------------------


@njit(cache=True)
def right_range(g, st, s, n):
    """How far block [s, s+n) can move right: up to its ops' nearest successor after it."""
    order, pos, succ_ptr, succ_idx = st.order, st.pos, g.succ_ptr, g.succ_idx
    e = s + n
    limit = order.shape[0]
    for p in range(s, e):
        v = order[p]
        for i in range(succ_ptr[v], succ_ptr[v + 1]):
            q = pos[succ_idx[i]]
            if e <= q < limit:
                limit = q
    return limit - e


@njit(cache=True)
def left_range(g, st, s, n):
    """How far block [s, s+n) can move left: down to its ops' nearest predecessor before it."""
    order, pos, pred_ptr, pred_idx = st.order, st.pos, g.pred_ptr, g.pred_idx
    limit = -1
    for p in range(s, s + n):
        v = order[p]
        for i in range(pred_ptr[v], pred_ptr[v + 1]):
            q = pos[pred_idx[i]]
            if limit < q < s:
                limit = q
    return s - 1 - limit


@njit(cache=True)
def collect(g, st, w, s, n):
    """Fill w.touched with the allocs the block's ops use and w.cross with those of them that
    have users outside the block too; returns (number crossing, number touched)."""
    order, first, last, op_ptr, op_alloc, multi = (
        st.order,
        st.first,
        st.last,
        g.op_ptr,
        g.op_alloc,
        g.multi,
    )
    mark, cross, touched = w.mark, w.cross, w.touched
    e = s + n
    w.tick[0] += 1
    tick = w.tick[0]
    k = 0
    kt = 0
    for p in range(s, e):
        v = order[p]
        for i in range(op_ptr[v], op_ptr[v + 1]):
            a = op_alloc[i]
            if mark[a] == tick:
                continue
            mark[a] = tick
            touched[kt] = a
            kt += 1
            if multi[a] and (first[a] < s or last[a] >= e):
                cross[k] = a
                k += 1
    return k, kt


@njit(cache=True, inline="always")
def _extents(alloc_ptr, alloc_op, pos, a, s, e):
    """Alloc a's users against block [s, e): (first offset inside, last offset inside,
    nearest position before s or -1, nearest position at or after e or -1)."""
    o_min = e
    o_max = -1
    q1 = -1
    p1 = -1
    for i in range(alloc_ptr[a], alloc_ptr[a + 1]):
        p = pos[alloc_op[i]]
        if p < s:
            if p > q1:
                q1 = p
        elif p >= e:
            if p1 < 0 or p < p1:
                p1 = p
        else:
            if p < o_min:
                o_min = p
            if p > o_max:
                o_max = p
    return o_min - s, o_max - s, q1, p1


# --- sum-liveness deltas of a block's moves -------------------------------------------------------


@njit(cache=True, inline="always")
def _piece(c, sl, dmax, lo, hi, const, slope):
    """Add const + slope * d for d in [lo, hi] (clipped to 1..dmax) as differences."""
    if lo < 1:
        lo = 1
    if hi > dmax:
        hi = dmax
    if lo <= hi:
        c[lo - 1] += const
        sl[lo - 1] += slope
        if hi < dmax:
            c[hi] -= const
            sl[hi] -= slope


@njit(cache=True, inline="always")
def _sum_up(delta, c, sl, dmax, min_dist):
    """delta[d-1] += the accumulated piecewise-linear corrections at d = 1..dmax; returns the
    (index, value) of the first smallest delta at d >= min_dist (index -1 if none)."""
    cc = 0
    ss = 0
    kbest = -1
    best = 0
    for k in range(dmax):
        cc += c[k]
        ss += sl[k]
        v = delta[k] + cc + ss * (k + 1)
        delta[k] = v
        if k + 1 >= min_dist and (kbest < 0 or v < best):
            kbest = k
            best = v
    return kbest, best


@njit(cache=True)
def right_deltas(g, st, w, s, n, dmax, k, min_dist):
    """w.delta[d-1] = change in sum-liveness when block [s, s+n) moves right by d = 1..dmax.

    Allocs the block does not use change by +-n*size when their first/last user is passed
    (flsum); each of the k crossing allocs (w.cross) is piecewise linear in d with at most one
    breakpoint in its first and one in its last position, added as difference arrays.
    Returns (d - 1, delta) of the first smallest delta at d >= min_dist.
    """
    pos, first, last, flsum = st.pos, st.first, st.last, st.flsum
    size, alloc_ptr, alloc_op = g.size, g.alloc_ptr, g.alloc_op
    delta, c, sl, cross = w.delta, w.c, w.sl, w.cross
    e = s + n
    base = flsum[e]
    for d in range(1, dmax + 1):
        delta[d - 1] = n * (flsum[e + d] - base)
        c[d - 1] = 0
        sl[d - 1] = 0
    for j in range(k):
        a = cross[j]
        sz = size[a]
        f0 = first[a]
        l0 = last[a]
        if e <= l0 < e + dmax:  # its last user is handled exactly below, not in flsum
            _piece(c, sl, dmax, l0 - e + 1, dmax, n * sz, 0)
        o_min, o_max, _, p1 = _extents(alloc_ptr, alloc_op, pos, a, s, e)
        _piece(c, sl, dmax, 1, dmax, -sz * (l0 - f0), 0)
        if f0 < s:  # first user: -f(d)
            _piece(c, sl, dmax, 1, dmax, -sz * f0, 0)
        elif p1 >= 0:
            _piece(c, sl, dmax, 1, p1 - e, -sz * (s + o_min), -sz)
            _piece(c, sl, dmax, p1 - e + 1, dmax, -sz * (p1 - n), 0)
        else:
            _piece(c, sl, dmax, 1, dmax, -sz * (s + o_min), -sz)
        if p1 >= 0:  # last user: +l(d)
            _piece(c, sl, dmax, 1, l0 - e, sz * l0, 0)
            _piece(c, sl, dmax, l0 - e + 1, dmax, sz * (s + o_max), sz)
        else:
            _piece(c, sl, dmax, 1, dmax, sz * (s + o_max), sz)
    return _sum_up(delta, c, sl, dmax, min_dist)


@njit(cache=True)
def left_deltas(g, st, w, s, n, dmax, k, min_dist):
    """w.delta[d-1] = change in sum-liveness when block [s, s+n) moves left by d (mirror);
    returns (d - 1, delta) of the first smallest delta at d >= min_dist."""
    pos, first, last, flsum = st.pos, st.first, st.last, st.flsum
    size, alloc_ptr, alloc_op = g.size, g.alloc_ptr, g.alloc_op
    delta, c, sl, cross = w.delta, w.c, w.sl, w.cross
    e = s + n
    base = flsum[s]
    for d in range(1, dmax + 1):
        delta[d - 1] = -n * (base - flsum[s - d])
        c[d - 1] = 0
        sl[d - 1] = 0
    for j in range(k):
        a = cross[j]
        sz = size[a]
        f0 = first[a]
        l0 = last[a]
        if s - dmax <= f0 < s:  # its first user is handled exactly below, not in flsum
            _piece(c, sl, dmax, s - f0, dmax, n * sz, 0)
        o_min, o_max, q1, _ = _extents(alloc_ptr, alloc_op, pos, a, s, e)
        _piece(c, sl, dmax, 1, dmax, -sz * (l0 - f0), 0)
        if l0 >= e:  # last user: +l(d)
            _piece(c, sl, dmax, 1, dmax, sz * l0, 0)
        elif q1 >= 0:
            _piece(c, sl, dmax, 1, s - q1 - 1, sz * (s + o_max), -sz)
            _piece(c, sl, dmax, s - q1, dmax, sz * (q1 + n), 0)
        else:
            _piece(c, sl, dmax, 1, dmax, sz * (s + o_max), -sz)
        if q1 >= 0:  # first user: -f(d)
            _piece(c, sl, dmax, 1, s - f0 - 1, -sz * f0, 0)
            _piece(c, sl, dmax, s - f0, dmax, -sz * (s + o_min), sz)
        else:
            _piece(c, sl, dmax, 1, dmax, -sz * (s + o_min), sz)
    return _sum_up(delta, c, sl, dmax, min_dist)


@njit(cache=True)
def block_deltas(g, st, w, s, n, sign, dmax):
    """w.delta[:dmax]: sum-liveness change of moving block [s, s+n) by 1..dmax places."""
    k, _ = collect(g, st, w, s, n)
    if sign > 0:
        right_deltas(g, st, w, s, n, dmax, k, 1)
    else:
        left_deltas(g, st, w, s, n, dmax, k, 1)


# --- peak mode: (peak, positions at the peak) of every move of a block ----------------------------


@njit(cache=True)
def passed_profile(g, st, w, s, n, dmax, sign, k, bar):
    """w.passed[i] = live total at the (i+1)-th op the block passes, after the move; w.pmax and
    w.pcnt its prefix maxima and prefix counts of values >= the peak. Stops once the prefix
    maximum exceeds `bar` (no later distance can then beat it); returns how many it filled.

    The total does not depend on how far the block goes: allocs the block does not use keep
    their liveness there; a crossing alloc is live at passed op q (moving right) before the move
    iff last >= q, and after it iff it has a user before s or one in [e, q]; mirrored leftwards.
    """
    pos, first, last, prof, peak = st.pos, st.first, st.last, st.prof, st.meta[PEAK]
    size, alloc_ptr, alloc_op = g.size, g.alloc_ptr, g.alloc_op
    passed, pmax, pcnt, diff, pidx, cross = w.passed, w.pmax, w.pcnt, w.pdiff, w.pidx, w.cross
    e = s + n
    for j in range(k):
        a = cross[j]
        sz = size[a]
        f0 = first[a]
        l0 = last[a]
        _, _, q1, p1 = _extents(alloc_ptr, alloc_op, pos, a, s, e)
        if sign > 0:
            was = min(max(l0 - e + 1, 0), dmax)  # live at passed i < was
            now = 0 if f0 < s else (min(p1 - e, dmax) if p1 >= 0 else dmax)  # live at i >= now
        else:
            was = min(max(s - f0, 0), dmax)
            now = 0 if l0 >= e else (min(s - 1 - q1, dmax) if q1 >= 0 else dmax)
        diff[0] -= sz
        diff[was] += sz
        diff[now] += sz
        pidx[2 * j] = was
        pidx[2 * j + 1] = now
    run = 0
    pm = 0
    pc = 0
    step = 1 if sign > 0 else -1
    q = e if sign > 0 else s - 1
    reach = dmax
    for i in range(dmax):
        run += diff[i]
        v = prof[q] + run
        q += step
        passed[i] = v
        pm = max(pm, v)
        pc += 1 if v >= peak else 0
        pmax[i] = pm
        pcnt[i] = pc
        if pm > bar:
            reach = i
            break
    diff[0] = 0
    for j in range(2 * k):
        diff[pidx[j]] = 0
    return reach


@njit(cache=True, inline="always")
def _tree_pull(tree, tcnt, tadd, p):
    """Recompute node p's max and count from its children and its own pending add."""
    left = 2 * p
    right = left + 1
    m = max(tree[left], tree[right])
    c = 0
    if tree[left] == m:
        c += tcnt[left]
    if tree[right] == m:
        c += tcnt[right]
    tree[p] = m + tadd[p]
    tcnt[p] = c


@njit(cache=True, inline="always")
def _tree_build(tree, tcnt, tadd, leaves, n):
    """Segment tree over the first n of `leaves` leaves (values already in tree[leaves:])."""
    low = -(1 << 60)
    for i in range(n, leaves):
        tree[leaves + i] = low
        tcnt[leaves + i] = 0
    for i in range(n):
        tcnt[leaves + i] = 1
    for p in range(leaves - 1, 0, -1):
        tadd[p] = 0
        _tree_pull(tree, tcnt, tadd, p)


@njit(cache=True, inline="always")
def _tree_add(tree, tcnt, tadd, leaves, lo, hi, value):
    """Add value to leaves [lo, hi); the root then holds the new max and its count."""
    if lo >= hi:
        return
    lo += leaves
    hi += leaves
    l0 = lo
    r0 = hi - 1
    while lo < hi:
        if lo & 1:
            tree[lo] += value
            if lo < leaves:
                tadd[lo] += value
            lo += 1
        if hi & 1:
            hi -= 1
            tree[hi] += value
            if hi < leaves:
                tadd[hi] += value
        lo >>= 1
        hi >>= 1
    p = l0 >> 1
    while p >= 1:
        _tree_pull(tree, tcnt, tadd, p)
        p >>= 1
    p = r0 >> 1
    while p >= 1:
        _tree_pull(tree, tcnt, tadd, p)
        p >>= 1


@njit(cache=True)
def _block_setup(g, st, w, s, n, dmax, sign, kt, leaves):
    """The block's own positions after a move by d = 1, as a segment tree, and the later events.

    After the move the block sits at a cut c (c = e + d moving right, s - d moving left):
    outside ops before c come before it. An alloc the block does not use is live on the block
    iff it crosses c (flsum[c]); one it uses is live on offsets [lo, hi) with lo = 0 if it has
    an outside user before c (else its first offset) and hi = n if it has one after c (else
    last offset + 1); flsum[c] counts it when first < c <= last, which is corrected for. Each of
    these flips at most once as d grows: an event (d, lo, hi, w) adds w on offsets [lo, hi)
    (lo == hi: a correction of the flsum term). Returns (events, correction at d = 1).
    """
    pos, first, last = st.pos, st.first, st.last
    size, alloc_ptr, alloc_op = g.size, g.alloc_ptr, g.alloc_op
    diff, touched, tree = w.diff, w.touched, w.tree
    ev_d, ev_lo, ev_hi, ev_w = w.ev_d, w.ev_lo, w.ev_hi, w.ev_w
    n_ops = st.order.shape[0]
    e = s + n
    c1 = e + 1 if sign > 0 else s - 1
    for i in range(n + 1):
        diff[i] = 0
    corr = 0
    m = 0
    for j in range(kt):
        a = touched[j]
        sz = size[a]
        o_min = n
        o_max = -1
        out_min = n_ops
        out_max = -1
        for i in range(alloc_ptr[a], alloc_ptr[a + 1]):
            p = pos[alloc_op[i]]
            if s <= p < e:
                o_min = min(o_min, p - s)
                o_max = max(o_max, p - s)
            else:
                out_min = min(out_min, p)
                out_max = max(out_max, p)
        f0 = first[a]
        l0 = last[a]
        lo = 0 if out_min < c1 else o_min
        hi = n if out_max >= c1 else o_max + 1
        diff[lo] += sz
        diff[hi] -= sz
        counted = f0 < c1 <= l0
        if counted:
            corr += sz
        if sign > 0:  # c grows: a passed user joins the side before the block
            d_lo = out_min - e + 1 if out_min < n_ops else 0
            d_hi = out_max - e + 1 if out_max >= 0 else 0
            d_co = l0 - e + 1
            lo_w = sz  # lo drops to 0
            hi_w = -sz  # hi drops to o_max + 1
        else:  # c shrinks: a passed user joins the side after the block
            d_lo = s - out_min if out_min < n_ops else 0
            d_hi = s - out_max if out_max >= 0 else 0
            d_co = s - f0
            lo_w = -sz  # lo rises to o_min
            hi_w = sz  # hi rises to n
        if 2 <= d_lo <= dmax and o_min > 0:
            ev_d[m] = d_lo
            ev_lo[m] = 0
            ev_hi[m] = o_min
            ev_w[m] = lo_w
            m += 1
        if 2 <= d_hi <= dmax and o_max + 1 < n:
            ev_d[m] = d_hi
            ev_lo[m] = o_max + 1
            ev_hi[m] = n
            ev_w[m] = hi_w
            m += 1
        if 2 <= d_co <= dmax and counted:
            ev_d[m] = d_co
            ev_lo[m] = 0
            ev_hi[m] = 0
            ev_w[m] = sz
            m += 1
    run = 0
    for i in range(n):
        run += diff[i]
        tree[leaves + i] = run
    _tree_build(tree, w.tcnt, w.tadd, leaves, n)
    return m, corr


@njit(cache=True)
def peak_keys(g, st, w, s, n, sign, reach, min_dist, kt, every, out, bp, bx, bd):
    """The best move of block [s, s+n) in one direction, by (peak, excess, sum delta), among
    the distances d = min_dist..reach, and only if its key is below the bar (bp, bx, bd).

    Needs w.delta (sum deltas) and w.pmax/w.pcnt (`passed_profile`) up to `reach`. For each
    distance the new peak is the max of the profile outside the window (pre_max/suf_max), at
    the passed ops (prefix maxima) and on the block's positions (a segment tree, updated by
    events as d grows); the excess (positions at the old peak) likewise. Distances whose window
    holds no peak position and whose sum delta is >= 0 cannot improve and are skipped unless
    `every` (tests: then out[d-1] = (new peak, excess, block max, its count) for every d).
    Returns (best d or 0, its peak, excess, delta).
    """
    hot_at, pre_max, suf_max, flsum, meta = st.hot, st.pre_max, st.suf_max, st.flsum, st.meta
    delta, pmax, pcnt = w.delta, w.pmax, w.pcnt
    tree, tcnt, tadd = w.tree, w.tcnt, w.tadd
    ev_d, ev_lo, ev_hi, ev_w = w.ev_d, w.ev_lo, w.ev_hi, w.ev_w
    head, nxt = w.ev_head, w.ev_next
    peak = meta[PEAK]
    excess = meta[EXCESS]
    e = s + n
    best_d = 0
    leaves = 1
    while leaves < n:
        leaves *= 2
    m, corr = _block_setup(g, st, w, s, n, reach, sign, kt, leaves)
    for d in range(reach + 2):  # events listed by distance: head[d] -> next[j] -> ... -1
        head[d] = -1
    for j in range(m):
        nxt[j] = head[ev_d[j]]
        head[ev_d[j]] = j
    proposals = 0
    for d in range(1, reach + 1):
        j = head[d]
        while j >= 0:
            if ev_lo[j] == ev_hi[j]:
                corr -= ev_w[j]
            else:
                _tree_add(tree, tcnt, tadd, leaves, ev_lo[j], ev_hi[j], ev_w[j])
            j = nxt[j]
        if d < min_dist:
            continue
        if sign > 0:
            ws = s
            we = e + d
            c = e + d
        else:
            ws = s - d
            we = e
            c = s - d
        hot = hot_at[we] - hot_at[ws]
        dd = delta[d - 1]
        if not every and hot == 0 and dd >= 0:
            continue
        proposals += 1
        bmax = flsum[c] - corr + tree[1]
        new_peak = max(max(pre_max[ws], suf_max[we]), max(pmax[d - 1], bmax))
        if new_peak < peak:
            new_excess = 0
        else:
            new_excess = excess - hot + pcnt[d - 1] + (tcnt[1] if bmax >= peak else 0)
        if every:
            out[d - 1, 0] = new_peak
            out[d - 1, 1] = new_excess
            out[d - 1, 2] = bmax
            out[d - 1, 3] = tcnt[1]
        if new_peak > peak:
            continue
        if new_peak < bp or (
            new_peak == bp and (new_excess < bx or (new_excess == bx and dd < bd))
        ):
            best_d = d
            bp = new_peak
            bx = new_excess
            bd = dd
    meta[PROPOSALS] += proposals
    return best_d, bp, bx, bd


# --- the ladder: which blocks can move, one block's best move, the sweep -------------------------


@njit(cache=True)
def movable(g, st, w, n):
    """w.ok[s] = 1 for block starts s where block [s, s+n) can move by at least n places;
    returns whether any can.

    Moving right by >= n needs the rotation of [s, s+n) with [s+n, s+2n) to be valid: no
    precedence edge from the first half into the second. Each edge (pu -> pv) forbids the
    starts s <= pu < s+n <= pv < s+2n, an interval, so one difference array marks them all;
    moving left by >= n is the same pair seen from its second half. When no block of n ops
    can, no block of more can either: a valid rotation of two (n+1)-blocks holds one of two
    n-blocks (drop the first block's first op and the second's last).
    """
    pos, edge_u, edge_v, ok, diff = st.pos, g.edge_u, g.edge_v, w.ok, w.diff
    n_ops = st.order.shape[0]
    for i in range(n_ops - n + 1):
        ok[i] = 0
    m = n_ops - 2 * n + 1
    if m <= 0:
        return False
    for i in range(m + 1):
        diff[i] = 0
    for i in range(edge_u.shape[0]):
        pu = pos[edge_u[i]]
        pv = pos[edge_v[i]]
        lo = max(max(pu - n + 1, pv - 2 * n + 1), 0)
        hi = min(min(pu, pv - n), m - 1)
        if lo <= hi:
            diff[lo] += 1
            diff[hi + 1] -= 1
    run = 0
    anyone = False
    for i in range(m):
        run += diff[i]
        if run == 0:
            ok[i] = 1
            ok[i + n] = 1
            anyone = True
    return anyone


@njit(cache=True)
def try_block(g, st, w, s, n, min_dist):
    """Apply the best improving move of block [s, s+n) by >= min_dist places, if any.

    Sum mode: the largest sum-liveness decrease; peak mode: the lowest (peak, positions at the
    peak, sum-liveness). Ties go to the shortest move, right before left. Returns
    (moved, work done) -- the work counts towards the ladder's budget between clock checks.
    """
    meta = st.meta
    dr = right_range(g, st, s, n)
    dl = left_range(g, st, s, n)
    if dr < min_dist and dl < min_dist:
        return False, n
    k, kt = collect(g, st, w, s, n)
    peak_mode = meta[PEAK_MODE]
    found = False
    best_dist = 0
    best_delta = 0
    bp = meta[PEAK]
    bx = meta[EXCESS]
    work = n + kt
    for sign in (1, -1):
        dmax = dr if sign > 0 else dl
        if dmax < min_dist:
            continue
        if peak_mode:
            # what stays in place, then the passed ops (their max only grows with d), bound
            # every new peak from below: only distances up to `reach` can beat the bar
            if (st.pre_max[s] if sign > 0 else st.suf_max[s + n]) > bp:
                continue
            reach = passed_profile(g, st, w, s, n, dmax, sign, k, bp)
            work += reach
            if reach < min_dist:
                continue
            if sign > 0:
                _, low = right_deltas(g, st, w, s, n, reach, k, min_dist)
                hot = st.hot[s + n + reach] - st.hot[s]
            else:
                _, low = left_deltas(g, st, w, s, n, reach, k, min_dist)
                hot = st.hot[s + n] - st.hot[s - reach]
            if low >= 0 and hot == 0:
                continue
            d, p, x, dd = peak_keys(
                g, st, w, s, n, sign, reach, min_dist, kt, False, w.out, bp, bx, best_delta
            )
            if d:
                found = True
                best_dist = sign * d
                best_delta = dd
                bp = p
                bx = x
            continue
        work += dmax
        if sign > 0:
            kbest, low = right_deltas(g, st, w, s, n, dmax, k, min_dist)
        else:
            kbest, low = left_deltas(g, st, w, s, n, dmax, k, min_dist)
        meta[PROPOSALS] += dmax - min_dist + 1
        if low < 0 and (not found or low < best_delta):
            found = True
            best_delta = low
            best_dist = sign * (kbest + 1)
    if not found:
        return False, work
    move(g, st, w, s, n, best_dist)
    meta[SUM] += best_delta
    meta[MOVES] += 1
    return True, work + 2 * (n + abs(best_dist))


@njit(cache=True)
def ladder(g, st, w, top, restart, budget):
    """Climb the n-shift ladder from the saved cursor until converged (returns True) or until
    about `budget` units of work are done (returns False, cursor saved: call again).

    Level n offers every movable block of n ops its best move by >= n places, sweeping until a
    sweep applies nothing; then level n + 1. `restart`: back to level 1 after an improving
    sweep above level 1; otherwise climb on and start again from 1 after a climb that improved.
    A level's first sweep looks at every block; a sweep after an improving one only at the
    blocks within n places of a move of that sweep (`w.dirty`), so the last, full climb still
    ends at a local minimum of every rotation.
    """
    cur, ok, dirty, again = w.cursor, w.ok, w.dirty, w.again
    level = cur[LEVEL]
    s = cur[START]
    sweep_imp = cur[SWEEP_IMPROVED]
    level_imp = cur[LEVEL_IMPROVED]
    climbed = cur[CLIMBED]
    n_ops = st.order.shape[0]
    edges = g.edge_u.shape[0] + n_ops
    work = 0
    done = False
    if level > top:
        done = True
    else:
        movable(g, st, w, level)
        work += edges
    while not done:
        last = n_ops - level
        while s <= last and (ok[s] == 0 or dirty[s] == 0):
            s += 1
        if s <= last:
            first = st.order[s]
            moved, cost = try_block(g, st, w, s, level, level)
            work += cost
            if moved:
                sweep_imp = 1
                to = st.pos[first]
                lo = max(min(s, to) - level, 0)
                hi = min(max(s, to) + level, last)
                for x in range(lo, hi + 1):  # the blocks the move touched
                    again[x] = 1
                    dirty[x] = 1
                work += hi - lo + 1
                movable(g, st, w, level)
                work += edges
            s += 1
            if work >= budget:
                break
            continue
        s = 0
        if sweep_imp:  # end of an improving sweep: sweep the level again
            sweep_imp = 0
            level_imp = 1
            if not (restart and level > 1):
                for x in range(last + 1):
                    dirty[x] = again[x]
                    again[x] = 0
                movable(g, st, w, level)
                work += edges
                continue
        for x in range(n_ops + 1):  # a new level: its first sweep looks at every block
            dirty[x] = 1
            again[x] = 0
        work += n_ops
        climbed = climbed | level_imp
        level = 1 if (level_imp and restart and level > 1) else level + 1
        level_imp = 0
        if level <= top:
            work += edges
            if not movable(g, st, w, level):
                level = top + 1  # nor can any block of more ops: the levels above are idle
        if level > top:
            if restart or not climbed:
                done = True
                break
            climbed = 0
            level = 1
            movable(g, st, w, level)
            work += edges
        if work >= budget:
            break
    cur[LEVEL] = level
    cur[START] = s
    cur[SWEEP_IMPROVED] = sweep_imp
    cur[LEVEL_IMPROVED] = level_imp
    cur[CLIMBED] = climbed
    return done


# --- annealing: random block moves, drawn exactly as CPython's `random.Random` would -------------

MT_N = 624


@njit(cache=True, inline="always")
def _mt_next(mt, mti):
    """Next 32-bit word of the Mersenne Twister state `mt` (CPython's generator, same words)."""
    if mti[0] >= MT_N:
        for kk in range(MT_N):
            y = (mt[kk] & 0x80000000) | (mt[(kk + 1) % MT_N] & 0x7FFFFFFF)
            mt[kk] = mt[(kk + 397) % MT_N] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        mti[0] = 0
    y = mt[mti[0]]
    mti[0] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y


@njit(cache=True, inline="always")
def _random(mt, mti):
    """`random.random()`: 53 random bits as a float in [0, 1)."""
    a = _mt_next(mt, mti) >> 5
    b = _mt_next(mt, mti) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def _randbelow(mt, mti, n):
    """`random.randrange(n)` for 0 < n < 2**32: rejection sampling on n's bit length."""
    k = 0
    while (1 << k) <= n:
        k += 1
    r = _mt_next(mt, mti) >> (32 - k)
    while r >= n:
        r = _mt_next(mt, mti) >> (32 - k)
    return r


@njit(cache=True)
def _propose(g, st, w, mt, mti):
    """A random block move: (found, start, length, signed distance, sum-liveness change)."""
    n_ops = st.order.shape[0]
    s = _randbelow(mt, mti, n_ops)
    n = 1 if _random(mt, mti) < 0.5 else 2 + _randbelow(mt, mti, 7)
    n = min(n, n_ops - s)
    sign = 1 if _random(mt, mti) < 0.5 else -1
    dmax = right_range(g, st, s, n) if sign > 0 else left_range(g, st, s, n)
    dist = 0
    delta = 0
    if dmax >= 1:
        d = max(1, min(dmax, int(dmax ** _random(mt, mti))))
        k, _ = collect(g, st, w, s, n)
        if sign > 0:
            right_deltas(g, st, w, s, n, d, k, 1)
        else:
            left_deltas(g, st, w, s, n, d, k, 1)
        dist = sign * d
        delta = w.delta[d - 1]
    return dmax >= 1, s, n, dist, delta


@njit(cache=True)
def anneal_sample(g, st, w, mt, mti, count, ups):
    """Draw `count` random moves (none applied); ups[:m] = their positive sum deltas; returns m."""
    m = 0
    for _ in range(count):
        found, _, _, _, delta = _propose(g, st, w, mt, mti)
        if found and delta > 0:
            ups[m] = delta
            m += 1
    return m


@njit(cache=True)
def anneal_steps(g, st, w, mt, mti, steps, temp, cool, best_key, best_order):
    """Run `steps` annealing steps at temperature temp[0] (cooled by `cool` each step).

    An uphill move is taken with probability exp(-delta / T). The best state seen so far is
    kept in best_key / best_order, by sum-liveness (or (peak, excess, sum) in peak mode).
    Returns the number of moves taken.
    """
    meta = st.meta
    peak_mode = meta[PEAK_MODE]
    accepted = 0
    t = temp[0]
    for _ in range(steps):
        t *= cool
        found, s, n, dist, delta = _propose(g, st, w, mt, mti)
        if not found:
            continue
        if delta > 0 and _random(mt, mti) >= np.exp(-delta / t):
            continue
        move(g, st, w, s, n, dist)
        meta[SUM] += delta
        accepted += 1
        if delta < 0 or peak_mode:
            if peak_mode:
                k0, k1, k2 = meta[PEAK], meta[EXCESS], meta[SUM]
            else:
                k0, k1, k2 = meta[SUM], 0, 0
            if k0 < best_key[0] or (
                k0 == best_key[0] and (k1 < best_key[1] or (k1 == best_key[1] and k2 < best_key[2]))
            ):
                best_key[0] = k0
                best_key[1] = k1
                best_key[2] = k2
                best_order[:] = st.order
    temp[0] = t
    return accepted


# --- iterated local search: kicks and local descents ---------------------------------------------


@njit(cache=True)
def kick(g, st, w, a, b, mt, mti):
    """Reorder the ops at positions [a, b) by a random topological order of them (Kahn over
    the precedence edges inside the window, each next op drawn uniformly from the ready ones):
    every such order keeps the schedule valid. Returns the change in sum-liveness."""
    order, pos, pred_ptr, pred_idx = st.order, st.pos, g.pred_ptr, g.pred_idx
    succ_ptr, succ_idx = g.succ_ptr, g.succ_idx
    indeg, ready, out = w.c, w.sl, w.buf
    r = 0
    for p in range(a, b):
        v = order[p]
        cnt = 0
        for i in range(pred_ptr[v], pred_ptr[v + 1]):
            if a <= pos[pred_idx[i]] < b:
                cnt += 1
        indeg[p - a] = cnt
        if cnt == 0:
            ready[r] = v
            r += 1
    k = 0
    while r > 0:
        j = _randbelow(mt, mti, r)
        v = ready[j]
        ready[j] = ready[r - 1]
        r -= 1
        out[k] = v
        k += 1
        for i in range(succ_ptr[v], succ_ptr[v + 1]):
            u = succ_idx[i]
            q = pos[u]
            if a <= q < b:
                indeg[q - a] -= 1
                if indeg[q - a] == 0:
                    ready[r] = u
                    r += 1
    for j in range(b - a):
        order[a + j] = out[j]
    change = refresh(g, st, a, b)
    st.meta[SUM] += change
    return change


@njit(cache=True)
def load(g, st, order):
    """Make `order` the state's schedule (rebuilt from scratch), keeping the move counters."""
    moves = st.meta[MOVES]
    proposals = st.meta[PROPOSALS]
    st.order[:] = order
    init_state(g, st, st.meta[PEAK_MODE])
    st.meta[MOVES] = moves
    st.meta[PROPOSALS] = proposals


@njit(cache=True)
def local_ladder(g, st, w, lo, hi, top, budget):
    """The ladder restricted to block starts in [lo, hi) and levels 1..top: each level is swept
    until a sweep applies nothing, and the levels again from 1 while any applied something.
    Stops after about `budget` work; returns the work done."""
    n_ops = st.order.shape[0]
    lo = max(lo, 0)
    work = 0
    again = True
    while again and work < budget:
        again = False
        for level in range(1, top + 1):
            last = min(hi, n_ops - level + 1)
            swept = True
            while swept and work < budget:
                swept = False
                for s in range(lo, last):
                    if work >= budget:  # mid-sweep too: a sweep of a long window is long
                        break
                    moved, cost = try_block(g, st, w, s, level, level)
                    work += cost
                    if moved:
                        swept = True
                        again = True
    return work


# --- the greedy start ---------------------------------------------------------------------------


@njit(cache=True)
def greedy_list(g, n):
    """List scheduling (`heuristics.schedule.greedy_order`): next, the ready op that starts the
    least new memory less what it frees (ties: the least new memory, then the one that became
    ready last), by a lazy heap of (key, new, stamp, op, version)."""
    size, op_ptr, op_alloc = g.size, g.op_ptr, g.op_alloc
    alloc_ptr, alloc_op = g.alloc_ptr, g.alloc_op
    indeg = np.empty(n, dtype=np.int64)
    new = np.zeros(n, dtype=np.int64)
    close = np.zeros(n, dtype=np.int64)
    for v in range(n):
        indeg[v] = g.pred_ptr[v + 1] - g.pred_ptr[v]
        for i in range(op_ptr[v], op_ptr[v + 1]):
            a = op_alloc[i]
            new[v] += size[a]
            if alloc_ptr[a + 1] - alloc_ptr[a] == 1:
                close[v] += size[a]
    m = size.shape[0]
    started = np.zeros(m, dtype=np.bool_)
    remaining = np.empty(m, dtype=np.int64)
    for a in range(m):
        remaining[a] = alloc_ptr[a + 1] - alloc_ptr[a]
    done = np.zeros(n, dtype=np.bool_)
    version = np.zeros(n, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    heap = [(np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int64(0))]
    heap.pop()
    for v in range(n):
        if indeg[v] == 0:
            heap.append((new[v] - close[v], new[v], np.int64(0), np.int64(v), np.int64(0)))
    heapq.heapify(heap)
    order = np.empty(n, dtype=np.int64)
    t = 0
    while len(heap) > 0:
        item = heapq.heappop(heap)
        v = item[3]
        if done[v] or item[4] != version[v]:
            continue
        done[v] = True
        order[t] = v
        t += 1
        for i in range(op_ptr[v], op_ptr[v + 1]):
            a = op_alloc[i]
            if not started[a]:
                started[a] = True
                for j in range(alloc_ptr[a], alloc_ptr[a + 1]):
                    u = alloc_op[j]
                    if not done[u]:
                        new[u] -= size[a]
                        _touch(heap, u, indeg, done, version, new, close, stamp)
            remaining[a] -= 1
            if remaining[a] == 1:
                for j in range(alloc_ptr[a], alloc_ptr[a + 1]):
                    u = alloc_op[j]
                    if not done[u]:
                        close[u] += size[a]
                        _touch(heap, u, indeg, done, version, new, close, stamp)
                        break
        for i in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            u = g.succ_idx[i]
            indeg[u] -= 1
            if indeg[u] == 0:
                stamp[u] = -t
                _touch(heap, u, indeg, done, version, new, close, stamp)
    return order


@njit(cache=True)
def _touch(heap, u, indeg, done, version, new, close, stamp):
    """Op u's greedy values changed: a fresh heap entry if it is ready (older ones go stale)."""
    version[u] += 1
    if indeg[u] == 0 and not done[u]:
        heapq.heappush(heap, (new[u] - close[u], new[u], stamp[u], np.int64(u), version[u]))


@njit(cache=True)
def kahn_list(g, n, filo):
    """Kahn's topological order: ready ops leave in arrival order, or (`filo`) latest first;
    they arrive in index order, then as their last predecessor leaves, in successor order."""
    indeg = np.empty(n, dtype=np.int64)
    ready = np.empty(n, dtype=np.int64)
    head = tail = 0
    for v in range(n):
        indeg[v] = g.pred_ptr[v + 1] - g.pred_ptr[v]
        if indeg[v] == 0:
            ready[tail] = v
            tail += 1
    order = np.empty(n, dtype=np.int64)
    t = 0
    while tail > head:
        if filo:
            tail -= 1
            v = ready[tail]
        else:
            v = ready[head]
            head += 1
        order[t] = v
        t += 1
        tail = release(g, v, indeg, ready, tail)
    return order[:t]


@njit(cache=True)
def release(g, v, indeg, ready, tail):
    """Op v has run: the successors it was the last predecessor of join `ready` from `tail` on
    (in successor order); returns the new tail."""
    for i in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
        u = g.succ_idx[i]
        indeg[u] -= 1
        if indeg[u] == 0:
            ready[tail] = u
            tail += 1
    return tail


# --- evaluating a whole order ---------------------------------------------------------------------


@njit(cache=True)
def evaluate(g, order, peak_mode):
    """The objective of a complete order: sum-liveness, or (peak_mode) the peak live total."""
    size, alloc_ptr, alloc_op = g.size, g.alloc_ptr, g.alloc_op
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    for p in range(n):
        pos[order[p]] = p
    diff = np.zeros(n + 1, dtype=np.int64)
    total = 0
    for a in range(size.shape[0]):
        f, la = _span(alloc_ptr, alloc_op, pos, a)
        if f < 0:
            continue
        total += size[a] * (la - f + 1)
        diff[f] += size[a]
        diff[la + 1] -= size[a]
    if not peak_mode:
        return total
    run = 0
    peak = 0
    for p in range(n):
        run += diff[p]
        peak = max(peak, run)
    return peak
