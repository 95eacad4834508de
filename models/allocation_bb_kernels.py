"""The compiled hot loop of `bb`: depth-first search over canonical placements, resumable.

A buffer rests on the top of what it meets or on 0; the search decides one point at a time which
buffer sits there or skips it, prunes by section bounds, dominance and a failure memory, and keeps
all its state in caller-owned arrays, so it runs for a node budget and resumes where it stopped.

Design notes (how and why): docs/design/allocation_bb_kernels.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

FOUND, EXHAUSTED, BUDGET, GROW = 1, 0, 2, 3
"""Kernel outcomes: a packing within the cap; no packing (unless a discrepancy cut, see
`R_CUT`); node budget spent; the depth or trail arrays must grow (the caller grows, resumes)."""

# reg[] slots: the scalar part of the resumable state
R_DEPTH, R_CPTR, R_NODES, R_CUT, R_STARTED, R_PLACED = range(6)
R_JUMPS, R_OBS, R_DOM, R_STAIR, R_ETR, R_MEMO, R_MTR = range(6, 13)
REG_SLOTS = 13


@dataclass
class Problem:
    """One independent part, renumbered so that the index is the branching priority.

    Sections are the maximal time intervals with a constant live set; buffer i lives in sections
    lo[i]..hi[i]; `ptr`/`nbr` is the lifetime-overlap graph (CSR); twin[i] is the previous buffer
    identical to i (same size and lifetime) or -1: identical buffers are placed in index order;
    gid[i] is the buffer's place in the order `build` was given (it survives `reorder`: the
    failure memory names buffers by it).
    """

    size: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    ptr: np.ndarray
    nbr: np.ndarray
    twin: np.ndarray
    sections: int
    align: int
    gid: np.ndarray


@dataclass
class State:
    """The resumable search state of one decision run ("does the part fit under cap?").

    Per depth: `kind` (-2 not yet visited, -3 visited), the point (estar, sstar) decided there,
    the last child tried (`lastj`: a buffer, or n for the skip), children tried, discrepancies so
    far, and the trail mark of the candidate offsets.
    """

    cap: int
    max_disc: int
    reg: np.ndarray
    placed: np.ndarray
    off: np.ndarray
    cand: np.ndarray
    rem: np.ndarray
    remr: np.ndarray
    kind: np.ndarray
    estar: np.ndarray
    sstar: np.ndarray
    lastj: np.ndarray
    ckey: np.ndarray
    vend: np.ndarray
    nchild: np.ndarray
    disc: np.ndarray
    cmark: np.ndarray
    ctr_j: np.ndarray
    ctr_v: np.ndarray
    ft: np.ndarray
    wl: np.ndarray
    wh: np.ndarray
    wb: np.ndarray
    pl: np.ndarray
    ph: np.ndarray
    pb: np.ndarray
    obmark: np.ndarray
    ob_j: np.ndarray
    ob_e: np.ndarray
    ob_w: np.ndarray
    emark: np.ndarray
    etr_s: np.ndarray
    etr_v: np.ndarray
    etr_c: np.ndarray
    memo: np.ndarray
    kh: np.ndarray
    ob_m: np.ndarray
    mtr: np.ndarray
    mmark: np.ndarray


def build(
    sizes: Sequence[int], starts: Sequence[int], ends: Sequence[int], align: int = 1
) -> Problem:
    """Sections, section ranges, overlap graph and twins of buffers given in priority order."""
    size = np.asarray(sizes, dtype=np.int64)
    start = np.asarray(starts, dtype=np.int64)
    end = np.asarray(ends, dtype=np.int64)
    n = len(size)
    points = np.unique(np.concatenate([start, end + 1])) if n else np.zeros(0, np.int64)
    lo = np.searchsorted(points, start, side="left").astype(np.int64)
    hi = (np.searchsorted(points, end + 1, side="left") - 1).astype(np.int64)
    sections = max(len(points) - 1, 0)
    ptr, nbr = _overlaps(start, end)
    twin = np.full(n, -1, dtype=np.int64)
    seen: dict[tuple[int, int, int], int] = {}
    for i in range(n):
        key = (int(size[i]), int(start[i]), int(end[i]))
        twin[i] = seen.get(key, -1)
        seen[key] = i
    gid = np.arange(n, dtype=np.int64)
    return Problem(size, lo, hi, ptr, nbr, twin, sections, int(align), gid)


def section_load(p: Problem, values: np.ndarray) -> np.ndarray:
    """For each section, the sum of `values` (one per buffer) over the buffers live in it."""
    load = np.zeros(p.sections + 1, dtype=np.int64)
    np.add.at(load, p.lo, values)
    np.add.at(load, p.hi + 1, -values)
    return np.cumsum(load)[: p.sections]


def reorder(p: Problem, perm: Sequence[int] | np.ndarray) -> Problem:
    """`p` with its buffers renumbered so that new buffer k is old buffer perm[k]: the same
    Problem `build` makes from the buffers in that order, without recomputing sections and
    overlaps (a restart's new priority costs a relabelling)."""
    perm = np.asarray(perm, dtype=np.int64)
    n = len(perm)
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    deg = np.diff(p.ptr)[perm]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=ptr[1:])
    nbr = inv[p.nbr[np.repeat(p.ptr[perm] - ptr[:-1], deg) + np.arange(ptr[-1])]]
    key = np.repeat(np.arange(n, dtype=np.int64) * n, deg) + nbr
    key.sort()
    nbr = key % n if n else nbr  # each row in index order, as `build` leaves it
    size, lo, hi, gid = p.size[perm], p.lo[perm], p.hi[perm], p.gid[perm]
    # twins: the previous buffer (new order) of the same size and section range
    by = np.lexsort((np.arange(n), hi, lo, size))
    sb, lb, hb = size[by], lo[by], hi[by]
    same = np.zeros(n, dtype=bool)
    same[1:] = (sb[1:] == sb[:-1]) & (lb[1:] == lb[:-1]) & (hb[1:] == hb[:-1])
    twin = np.full(n, -1, dtype=np.int64)
    twin[by[1:][same[1:]]] = by[:-1][same[1:]]
    return Problem(size, lo, hi, ptr, nbr, twin, p.sections, p.align, gid)


def _overlaps(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR lifetime-overlap graph (pairs sharing a step), built with numpy in one pass: in start
    order, buffer order[k] overlaps the later-starting order[k+1 : upto[k]]."""
    n = len(start)
    order = np.argsort(start, kind="stable")
    upto = np.searchsorted(start[order], end[order], side="right")
    counts = upto - np.arange(1, n + 1)
    total = int(counts.sum())
    src_pos = np.repeat(np.arange(n), counts)
    first = np.repeat(np.arange(1, n + 1) - np.cumsum(counts) + counts, counts)
    dst_pos = np.arange(total) + first if total else np.zeros(0, dtype=np.int64)
    a, b = order[src_pos], order[dst_pos]
    u, v = np.concatenate([a, b]), np.concatenate([b, a])
    perm = np.lexsort((v, u))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=ptr[1:])
    return ptr, v[perm].astype(np.int64)


def overlap_pairs(starts: Sequence[int], ends: Sequence[int]) -> int:
    """How many lifetime-overlapping pairs, without building the graph (to refuse huge ones)."""
    start = np.sort(np.asarray(starts, dtype=np.int64))
    end = np.asarray(ends, dtype=np.int64)[np.argsort(np.asarray(starts), kind="stable")]
    upto = np.searchsorted(start, end, side="right")
    return int((upto - np.arange(1, len(start) + 1)).sum())


def new_state(p: Problem, cap: int, max_disc: int = -1, memo: np.ndarray | None = None) -> State:
    """A fresh search for "fits under `cap`?"; `max_disc` >= 0 limits discrepancies (LDS);
    `memo` (`new_memo`), shared by every search of the same buffers, remembers failed states
    (each such search must keep identical buffers in `gid` order: see the module docstring)."""
    n = len(p.size)
    rem = section_load(p, p.size)
    remr = section_load(p, -(-p.size // p.align) * p.align)
    depth = 2 * n + 16
    trail = 2 * (len(p.nbr) + n) + 16
    z = np.zeros
    return State(
        cap=int(cap),
        max_disc=int(max_disc),
        reg=z(REG_SLOTS, np.int64),
        placed=z(n, np.uint8),
        off=z(n, np.int64),
        cand=z(n, np.int64),
        rem=rem,
        remr=remr,
        kind=z(depth, np.int64),
        estar=z(depth, np.int64),
        sstar=z(depth, np.int64),
        lastj=z(depth, np.int64),
        ckey=z(depth, np.int64),
        vend=z(depth, np.int64),
        nchild=z(depth, np.int64),
        disc=z(depth, np.int64),
        cmark=z(depth, np.int64),
        ctr_j=z(trail, np.int64),
        ctr_v=z(trail, np.int64),
        ft=z(depth, np.int64),
        wl=z(depth, np.int64),
        wh=z(depth, np.int64),
        wb=z(depth, np.int64),
        pl=z(depth, np.int64),
        ph=z(depth, np.int64),
        pb=z(depth, np.int64),
        obmark=z(depth, np.int64),
        ob_j=z(4 * n + 16, np.int64),
        ob_e=z(4 * n + 16, np.int64),
        ob_w=z(4 * n + 16, np.int64),
        emark=z(depth, np.int64),
        etr_s=z(16 * n + 2 * p.sections + 16, np.int64),
        etr_v=z(16 * n + 2 * p.sections + 16, np.int64),
        etr_c=z(16 * n + 2 * p.sections + 16, np.int64),
        memo=new_memo(0) if memo is None else memo,
        kh=z((depth, 3), np.int64),
        ob_m=z(4 * n + 16, np.int64),
        mtr=z(4 * n + 16, np.int64),
        mmark=z(depth, np.int64),
    )


def new_memo(rows: int) -> np.ndarray:
    """A failure memory of `rows` entries (a power of two; 0: none), each the two 64-bit
    hashes of a state, the largest cap under which it was found to have no packing and the
    nodes that took (-1 in every column: empty)."""
    assert rows & (rows - 1) == 0, rows
    return np.full((rows, 4), -1, dtype=np.int64)


def grow(st: State) -> None:
    """Double the depth and trail arrays (keeping their contents) after a GROW outcome."""
    for name in (
        "kind",
        "estar",
        "sstar",
        "lastj",
        "ckey",
        "vend",
        "nchild",
        "disc",
        "cmark",
        "ctr_j",
        "ctr_v",
        "ft",
        "wl",
        "wh",
        "wb",
        "pl",
        "ph",
        "pb",
        "obmark",
        "ob_j",
        "ob_e",
        "ob_w",
        "emark",
        "etr_s",
        "etr_v",
        "etr_c",
        "kh",
        "ob_m",
        "mtr",
        "mmark",
    ):
        a = getattr(st, name)
        b = np.zeros((2 * len(a), *a.shape[1:]), dtype=a.dtype)
        b[: len(a)] = a
        setattr(st, name, b)


def run(p: Problem, st: State, budget: int, *, compiled: bool = True, mode: int = 2) -> int:
    """Advance the search by at most `budget` nodes; returns FOUND, EXHAUSTED or BUDGET.

    `mode` 2 decides the tightest qualifying point first, 0 the lowest-leftmost one, 3 the one
    nearest the tightest section; `| NO_STAIR` turns the staircase bound off.
    """
    fn = search if compiled else search_py
    before = int(st.reg[R_NODES])
    while True:
        left = budget - (int(st.reg[R_NODES]) - before)  # a GROW resumes within the budget
        out = int(
            fn(
                p.size,
                p.lo,
                p.hi,
                p.ptr,
                p.nbr,
                p.twin,
                p.gid,
                p.align,
                st.cap,
                st.max_disc,
                left,
                mode,
                st.reg,
                st.placed,
                st.off,
                st.cand,
                st.rem,
                st.remr,
                st.kind,
                st.estar,
                st.sstar,
                st.lastj,
                st.ckey,
                st.vend,
                st.nchild,
                st.disc,
                st.cmark,
                st.ctr_j,
                st.ctr_v,
                st.ft,
                st.wl,
                st.wh,
                st.wb,
                st.pl,
                st.ph,
                st.pb,
                st.obmark,
                st.ob_j,
                st.ob_e,
                st.ob_w,
                st.emark,
                st.etr_s,
                st.etr_v,
                st.etr_c,
                st.memo,
                st.kh,
                st.ob_m,
                st.mtr,
                st.mmark,
            )
        )
        if out != GROW:
            return out
        grow(st)


def _unplace_py(
    k, placed, lo, hi, size, align, rem, remr, ulist, upos, un, cross, occ, gid, cand, hs, on
):
    """Take buffer k (if it is one: a skip records n) off the packing, back into the first `un`
    entries of the unplaced list (`ulist`, positions `upos`) and the counts of unplaced buffers
    live across each section's right edge (`cross`) and starting in it (`occ`), and (`on`)
    into the state hash `hs`; 1 if it was placed."""
    if k >= placed.shape[0]:
        return 0
    placed[k] = 0
    if on:
        _hash(hs, gid[k], cand[k])
    _move(ulist, upos, k, un)
    _account(k, 1, lo, hi, size, align, rem, remr, cross, occ)
    return 1


def _move_py(ulist, upos, k, to):
    """Put buffer k at position `to` of the unplaced list, the one there where k was."""
    q = upos[k]
    other = ulist[to]
    ulist[q] = other
    upos[other] = q
    ulist[to] = k
    upos[k] = to


def _account_py(k, sign, lo, hi, size, align, rem, remr, cross, occ):
    """Add (sign 1) or take away (-1) buffer k's share of the per-section counts of the
    unplaced buffers: sizes, sizes rounded up to the alignment, crossings, starts."""
    for s in range(lo[k], hi[k] + 1):
        rem[s] += sign * size[k]
        remr[s] += sign * (size[k] + (align - size[k] % align) % align)
    for s in range(lo[k], hi[k]):
        cross[s] += sign
    occ[lo[k]] += sign


def _save_py(reg, d, cp, obc, et, nodes, np_, mtl):
    """Store the scalar search state in `reg` before the kernel returns (it resumes from it)."""
    reg[R_DEPTH] = d
    reg[R_CPTR] = cp
    reg[R_OBS] = obc
    reg[R_ETR] = et
    reg[R_MTR] = mtl
    reg[R_NODES] += nodes
    reg[R_PLACED] = np_


def _floors_py(j, c, a, b, lo, eff, effc, cmax):
    """Fold buffer j's aligned candidate c into sections a..b of its lifetime: the lowest
    candidate (eff), the lowest among the buffers continuing from the left (effc), the
    highest (cmax)."""
    for s in range(a, b + 1):
        if c < eff[s]:
            eff[s] = c
        if c < effc[s] and s > lo[j]:
            effc[s] = c
        if c > cmax[s]:
            cmax[s] = c


def _up_py(c, align):
    """c rounded up to a multiple of align (a candidate offset as an aligned one)."""
    r = c % align
    return c if r == 0 else c + align - r


def _restore_py(cp, mark, cand, ctr_j, ctr_v, gid, hs, on):
    """Undo the candidate raises trailed since `mark` (in the state hash `hs` too, if `on`);
    the new trail length."""
    while cp > mark:
        cp -= 1
        j = ctr_j[cp]
        if on:
            _hash(hs, gid[j], cand[j])
            _hash(hs, gid[j], ctr_v[cp])
        cand[j] = ctr_v[cp]
    return cp


def _restore_eff_py(et, mark, eff, effc, etr_s, etr_v, etr_c):
    """Undo the eff and effc changes trailed since `mark`; the new trail length."""
    while et > mark:
        et -= 1
        eff[etr_s[et]] = etr_v[et]
        effc[etr_s[et]] = etr_c[et]
    return et


def _obligation_py(j, e, a, b, ptr, nbr, placed, off, size, cand, lo, align):
    """Who can meet the obligation "a neighbour of j intrudes into [e, e + size_j)": MET (a
    placed one does), else INSIDE / OUTSIDE flags for unplaced ones that still can, starting in
    sections a..b or elsewhere (0: nobody can)."""
    top = e + size[j]
    flags = 0
    for q in range(ptr[j], ptr[j + 1]):
        i = nbr[q]
        if placed[i] != 0:
            if off[i] < top and off[i] + size[i] > e:
                return MET
        else:
            c = _up(cand[i], align)
            if c < top:
                flags |= INSIDE if a <= lo[i] <= b else OUTSIDE
                if b < a or flags == INSIDE | OUTSIDE:
                    return flags
    return flags


def _witness_py(j, e, ptr, nbr, placed, off, size, cand, align):
    """A neighbour that meets or can still meet the obligation (j, e): placed and intruding
    into [e, e + size_j), or unplaced with its candidate below e + size_j; -1 if none (the
    search checks the last one first with the same test, written out: a shared inlined
    predicate cost 20-70 % of kernel time there)."""
    top = e + size[j]
    for q in range(ptr[j], ptr[j + 1]):
        i = nbr[q]
        if placed[i] != 0:
            if off[i] < top and off[i] + size[i] > e:
                return i
        elif _up(cand[i], align) < top:
            return i
    return -1


def _mix_py(x):
    """A 64-bit integer hashed (the splitmix64 finaliser, in wrapping int64 arithmetic)."""
    x = (x ^ ((x >> 30) & 0x3FFFFFFFF)) * -4658895280553007687
    x = (x ^ ((x >> 27) & 0x1FFFFFFFFF)) * -7723592293110705685
    return x ^ ((x >> 31) & 0x1FFFFFFFF)


def _hash_py(hs, g, c):
    """Toggle "buffer g is unplaced with candidate c" in the state hash `hs` (two independent
    64-bit hashes: the XOR of one term per unplaced buffer, kept as buffers move)."""
    hs[0] ^= _mix(g * 0x2545F4914F6CDD1D + c)
    hs[1] ^= _mix(g * 0x5851F42D4C957F2D + c * 3 + 1)


def _ob_hash_py(hs, g, e):
    """Toggle "obligation (buffer g, level e) is open" in the state hash `hs`."""
    hs[0] ^= _mix(g * 0x369DEA0F31A53F85 + e * 5 + 2)
    hs[1] ^= _mix(g * 0x27BB2EE687B0B0FD + e * 7 + 3)


def _reopen_py(mtl, mark, obc, omark, mtr, ob_m, ob_j, ob_e, gid, hs):
    """Undo to a node's marks in the state hash: obligations met since `mark` (the met trail
    `mtr`) open again, then those recorded since `omark` go; the new met-trail length."""
    while mtl > mark:
        mtl -= 1
        o = mtr[mtl]
        ob_m[o] = 0
        _ob_hash(hs, gid[ob_j[o]], ob_e[o])
    for o in range(omark, obc):
        _ob_hash(hs, gid[ob_j[o]], ob_e[o])
    return mtl


def _recall_py(memo, h1, h2, cap):
    """Whether the memory holds the state (h1, h2) as having no packing under cap or more."""
    rows = memo.shape[0]
    if rows == 0:
        return False
    x = h1 & (rows - 1)
    y = x ^ 1
    if memo[x, 0] == h1 and memo[x, 1] == h2 and memo[x, 2] >= cap:
        return True
    return memo[y, 0] == h1 and memo[y, 1] == h2 and memo[y, 2] >= cap


def _remember_py(memo, h1, h2, cap, work):
    """Record that the state (h1, h2) has no packing under cap, found in `work` nodes. Two
    slots per hash: the first keeps the costlier of its entry and the new one (a failure near
    the root saves the most when met again), the second takes the other."""
    rows = memo.shape[0]
    if rows == 0:
        return
    x = h1 & (rows - 1)
    for r in (x, x ^ 1):
        if memo[r, 0] == h1 and memo[r, 1] == h2:
            memo[r, 2] = max(memo[r, 2], cap)
            memo[r, 3] = max(memo[r, 3], work)
            return
    y = x ^ 1
    if work >= memo[x, 3]:
        for c in range(4):
            memo[y, c] = memo[x, c]
        y = x
    memo[y, 0] = h1
    memo[y, 1] = h2
    memo[y, 2] = cap
    memo[y, 3] = work


def _staircase_py(ua, ub, ulist, un, cap, lo, hi, size, cval, eff, cmax, rem, bc, bstart, bucket):
    """The staircase bound on sections ua..ub: in a section s, the space [eff[s], y) can only be
    covered by unplaced buffers whose candidate lies below y, each by at most min(size, y - c);
    what they cannot cover is waste, and a section's waste cannot exceed its slack
    cap - eff[s] - rem[s]. False when some section's waste does (the node is pruned). The
    caller's bound pass has left eff over ua..ub and cval[j] (the aligned candidate) of every
    unplaced buffer (the first `un` of `ulist`) live there, and cmax[s], the highest of them."""
    # only sections with (nearly) no slack are looked at: the bound is valid on any section,
    # but on the tight set it pruned the same nodes whether sections up to 1/32 or 1/1024 of
    # the cap of slack were looked at, and looking costs a sort per section; and only those
    # with a candidate above eff + slack (no lower step y can waste more than the slack)
    a = ub + 1
    b = ua - 1
    for s in range(ua, ub + 1):
        bc[s] = 0
        slack = cap - eff[s] - rem[s]
        if rem[s] > 0 and slack * STAIR_SHARE <= cap and cmax[s] - eff[s] > slack:
            a = min(a, s)
            b = max(b, s)
    if a > b:
        return True
    ua = a
    ub = b
    for u in range(un):
        j = ulist[u]
        if hi[j] >= ua and lo[j] <= ub:
            for s in range(max(lo[j], ua), min(hi[j], ub) + 1):
                bc[s] += 1
    tot = 0
    for s in range(ua, ub + 1):
        bstart[s] = tot
        tot += bc[s]
        bc[s] = 0
    for u in range(un):
        j = ulist[u]
        if hi[j] >= ua and lo[j] <= ub:
            c = cval[j]
            for s in range(max(lo[j], ua), min(hi[j], ub) + 1):
                # insertion into the section's bucket, kept sorted by candidate
                k = bstart[s] + bc[s]
                while k > bstart[s] and cval[bucket[k - 1]] > c:
                    bucket[k] = bucket[k - 1]
                    k -= 1
                bucket[k] = j
                bc[s] += 1
    for s in range(ua, ub + 1):
        if rem[s] == 0:
            continue
        base = eff[s]
        slack = cap - base - rem[s]
        b0 = bstart[s]
        m = bc[s]
        for k in range(1, m):
            y = cval[bucket[b0 + k]]
            if y - base <= slack or y == cval[bucket[b0 + k - 1]]:
                continue
            cover = 0
            for i in range(k):
                j = bucket[b0 + i]
                c = cval[j]
                cover += size[j] if size[j] < y - c else y - c
            if y - base - cover > slack:
                return False
    return True


STAIR_SHARE = 1024
"""The staircase bound looks at sections whose slack is at most cap / STAIR_SHARE."""
NO_STAIR = 8
MEMO_LEFT = 6  # nodes with fewer unplaced buffers are neither looked up nor remembered
"""A `mode` bit that turns the staircase bound off (tests compare the two searches)."""
MET, INSIDE, OUTSIDE = 1, 2, 4
_up = njit(cache=True, nogil=True, inline="always")(_up_py)
_save = njit(cache=True, nogil=True, inline="always")(_save_py)
_floors = njit(cache=True, nogil=True, inline="always")(_floors_py)
_staircase = njit(cache=True, nogil=True)(_staircase_py)
_mix = njit(cache=True, nogil=True, inline="always")(_mix_py)
_hash = njit(cache=True, nogil=True, inline="always")(_hash_py)
_ob_hash = njit(cache=True, nogil=True, inline="always")(_ob_hash_py)
_reopen = njit(cache=True, nogil=True)(_reopen_py)
_recall = njit(cache=True, nogil=True)(_recall_py)
_remember = njit(cache=True, nogil=True)(_remember_py)
_move = njit(cache=True, nogil=True, inline="always")(_move_py)
_account = njit(cache=True, nogil=True, inline="always")(_account_py)
_unplace = njit(cache=True, nogil=True)(_unplace_py)
_obligation = njit(cache=True, nogil=True)(_obligation_py)
_witness = njit(cache=True, nogil=True)(_witness_py)
_restore = njit(cache=True, nogil=True)(_restore_py)
_restore_eff = njit(cache=True, nogil=True)(_restore_eff_py)


def _search(
    size,
    lo,
    hi,
    ptr,
    nbr,
    twin,
    gid,
    align,
    cap,
    max_disc,
    budget,
    mode,
    reg,
    placed,
    off,
    cand,
    rem,
    remr,
    kind,
    estar,
    sstar,
    lastj,
    ckey,
    vend,
    nchild,
    disc,
    cmark,
    ctr_j,
    ctr_v,
    ft,
    wl,
    wh,
    wb,
    pl,
    ph,
    pb,
    obmark,
    ob_j,
    ob_e,
    ob_w,
    emark,
    etr_s,
    etr_v,
    etr_c,
    memo,
    kh,
    ob_m,
    mtr,
    mmark,
):
    """One resumable run of the search described in the module docstring."""
    n = size.shape[0]
    nsec = rem.shape[0]
    eff = np.empty(nsec, dtype=np.int64)
    effc = np.empty(nsec, dtype=np.int64)  # the same over the buffers live before s too
    cnt = np.zeros(nsec, dtype=np.int64)
    bad = np.zeros(nsec, dtype=np.int64)
    inl = np.zeros(nsec, dtype=np.int64)
    lst = np.zeros(nsec, dtype=np.int64)
    cross = np.zeros(nsec, dtype=np.int64)  # unplaced buffers live in s and s + 1
    occ = np.zeros(nsec, dtype=np.int64)  # unplaced buffers starting in s
    cmax = np.zeros(nsec, dtype=np.int64)
    cval = np.zeros(n, dtype=np.int64)
    stair = (mode & NO_STAIR) == 0
    memo_on = max_disc < 0 and memo.shape[0] > 0
    mode = mode & (NO_STAIR - 1)
    bc = np.zeros(nsec, dtype=np.int64)
    bstart = np.zeros(nsec + 1, dtype=np.int64)
    spans = 0
    for j in range(n):
        spans += hi[j] - lo[j] + 1
    bucket = np.zeros(spans + 1, dtype=np.int64)
    # the unplaced buffers (the first n - np_ entries of ulist; upos: where each one is), and
    # the buffers by start section (sptr/sidx): loops visit these instead of all n buffers
    ulist = np.empty(n + 1, dtype=np.int64)
    upos = np.empty(n, dtype=np.int64)
    sptr = np.zeros(nsec + 1, dtype=np.int64)
    sidx = np.empty(n, dtype=np.int64)
    un = 0
    for j in range(n):
        if placed[j] == 0:
            ulist[un] = j
            upos[j] = un
            un += 1
        sptr[lo[j] + 1] += 1
    k = un
    for j in range(n):
        if placed[j] != 0:
            ulist[k] = j
            upos[j] = k
            k += 1
    for s in range(nsec):
        sptr[s + 1] += sptr[s]
    for j in range(n):
        sidx[sptr[lo[j]] + bc[lo[j]]] = j
        bc[lo[j]] += 1
    for s in range(nsec):
        bc[s] = 0
    if reg[R_STARTED] == 0:
        reg[R_STARTED] = 1
        reg[R_DEPTH] = 0
        reg[R_PLACED] = 0
        kind[0] = -2
        disc[0] = 0
        for j in range(n):
            if size[j] > cap:
                return EXHAUSTED
        if n == 0:
            return FOUND
        # the root's bound over every section (children check only what they change)
        for s in range(nsec):
            if rem[s] > 0 and (rem[s] > cap or remr[s] - align + 1 > cap):
                return EXHAUSTED
    d = reg[R_DEPTH]
    cp = reg[R_CPTR]
    obc = reg[R_OBS]
    et = reg[R_ETR]
    mtl = reg[R_MTR]
    np_ = reg[R_PLACED]
    nodes = 0
    hs = np.zeros(2, dtype=np.int64)  # the hash of the unplaced buffers and their candidates
    if np_ == n and d > 0:
        # resumed after FOUND: undo the last placement and go on with the next packing
        d -= 1
        np_ -= _unplace(
            lastj[d],
            placed,
            lo,
            hi,
            size,
            align,
            rem,
            remr,
            ulist,
            upos,
            n - np_,
            cross,
            occ,
            gid,
            cand,
            hs,
            memo_on,
        )
        cp = _restore(cp, cmark[d], cand, ctr_j, ctr_v, gid, hs, memo_on)
        if memo_on:
            mtl = _reopen(mtl, mmark[d], obc, obmark[d], mtr, ob_m, ob_j, ob_e, gid, hs)
        obc = obmark[d]
        et = emark[d]
    # eff[s], the lowest aligned candidate among the unplaced buffers live in s (cap if none):
    # computed here from the state, then kept by each child's bound pass over the sections it
    # changes, its old values trailed (etr_s/etr_v, from emark[d]) and restored on undo; and
    # the counts cross/occ, kept by place and unplace
    for s in range(nsec):
        eff[s] = cap
        effc[s] = cap
        cross[s] = 0
        occ[s] = 0
    hs[0] = 0
    hs[1] = 0
    for u in range(n - np_):
        j = ulist[u]
        occ[lo[j]] += 1
        for s in range(lo[j], hi[j]):
            cross[s] += 1
        _floors(j, _up(cand[j], align), lo[j], hi[j], lo, eff, effc, cmax)
        if memo_on:
            _hash(hs, gid[j], cand[j])
    if memo_on:
        for o in range(obc):
            if ob_m[o] == 0:
                _ob_hash(hs, gid[ob_j[o]], ob_e[o])
    while True:
        if nodes >= budget:
            _save(reg, d, cp, obc, et, nodes, np_, mtl)
            return BUDGET
        if (
            d + 2 >= kind.shape[0]
            or cp + 2 * n + 2 >= ctr_j.shape[0]
            or obc + n + 2 >= ob_j.shape[0]
            or et + nsec + 2 >= etr_s.shape[0]
        ):
            _save(reg, d, cp, obc, et, nodes, np_, mtl)
            return GROW
        sl = 0
        sh = nsec - 1
        first = kind[d] == -2
        if first:
            # the scope: the sections of the part this node works in. A node inherits its
            # parent's; once that part is all placed, the search returns to the scope the part
            # was split from, and a failure there is a failure of the node that split it (ft)
            sb = -1
            if d > 0:
                sl = wl[d - 1]
                sh = wh[d - 1]
                sb = wb[d - 1]
            f = d
            while sb >= 0:
                live = False
                for u in range(n - np_):
                    j = ulist[u]
                    if lo[j] >= sl and lo[j] <= sh:
                        live = True
                        break
                if live:
                    break
                f = sb
                sl = pl[f]
                sh = ph[f]
                sb = pb[f]
            ft[d] = f
            wl[d] = sl
            wh[d] = sh
            wb[d] = sb
        if kind[d] == -2 and mode >= 2:
            # first visit: the point to decide is (eff[s], s) for a section s where
            # - some buffer starting in s can sit at eff[s] (the lowest candidate among the
            #   unplaced buffers live in s): the children;
            # - every such buffer is *ready*: eff is eff[s] over its whole lifetime, so nothing
            #   unplaced can end up below it (its candidate is its final offset);
            # - no buffer from the left can sit at eff[s] across s (so a skip leaves it empty).
            # The lowest-leftmost point always qualifies; among those that do, the tightest
            # section (least slack), then the fewest children, then the leftmost.
            # (eff is kept up to date: over the scope, only its own buffers are live)
            # and a buffer from the left can sit at eff[s] across s when effc[s] == eff[s].
            # Sections where some buffer can start at eff are listed (lst; cnt, bad and inl
            # are zero outside this block), so no loop here runs over every section
            nl = 0
            for u in range(n - np_):
                j = ulist[u]
                s0 = lo[j]
                if s0 >= sl and s0 <= sh:
                    c = _up(cand[j], align)
                    if c == eff[s0] and effc[s0] != c:  # (a covered section cannot qualify)
                        if inl[s0] == 0:
                            inl[s0] = 1
                            lst[nl] = s0
                            nl += 1
                        if bad[s0] == 0:
                            for s in range(s0 + 1, hi[j] + 1):
                                if eff[s] != c:
                                    bad[s0] = 1
                                    break
                        t = twin[j]
                        if t < 0 or placed[t] != 0:
                            cnt[s0] += 1
            sm = nsec
            e = 0
            bslack = 0
            bcnt = 0
            # mode 3: the qualifying point nearest the tightest section of all (qualifying or
            # not), so the search works toward the tight region before wandering elsewhere
            tight = sl
            if mode == 3:
                tslack = cap + 1
                for s in range(sl, sh + 1):
                    if rem[s] > 0 and cap - eff[s] - rem[s] < tslack:
                        tslack = cap - eff[s] - rem[s]
                        tight = s
            bdist = 0
            for i in range(nl):
                s = lst[i]
                if cnt[s] > 0 and effc[s] != eff[s] and bad[s] == 0:
                    slack = cap - eff[s] - rem[s]
                    dist = 0 if mode == 2 else abs(s - tight)
                    if (
                        sm == nsec
                        or dist < bdist
                        or (dist == bdist and slack < bslack)
                        or (dist == bdist and slack == bslack and cnt[s] < bcnt)
                        or (dist == bdist and slack == bslack and cnt[s] == bcnt and s < sm)
                    ):
                        bdist = dist
                        sm = s
                        bslack = slack
                        bcnt = cnt[s]
                        e = eff[s]
            for i in range(nl):
                s = lst[i]
                cnt[s] = 0
                bad[s] = 0
                inl[s] = 0
            estar[d] = e
            sstar[d] = sm
            lastj[d] = -1
            ckey[d] = -1
            # the valley: sections from s* on where E is the floor; a child that spans it
            # exactly is tried first (it leaves no sliver)
            t = sm
            while t + 1 <= sh and eff[t + 1] == e:
                t += 1
            vend[d] = t
            nchild[d] = 0
            kind[d] = -3
        if kind[d] == -2:
            # first visit: find the lowest point
            e = cap
            for u in range(n - np_):
                j = ulist[u]
                if lo[j] >= sl and lo[j] <= sh:
                    c = _up(cand[j], align)
                    if c < e:
                        e = c
            # the lowest-leftmost point: the first section where some buffer can start at E
            # and no buffer that can sit at E covers it from the left (effc[s] == E)
            nl = 0
            for u in range(n - np_):
                j = ulist[u]
                s0 = lo[j]
                if s0 >= sl and s0 <= sh and _up(cand[j], align) == e:
                    t = twin[j]
                    if t < 0 or placed[t] != 0:
                        if cnt[s0] == 0:
                            lst[nl] = s0
                            nl += 1
                        cnt[s0] += 1
            sm = nsec
            for i in range(nl):
                s = lst[i]
                if effc[s] != e and s < sm:
                    sm = s
                cnt[s] = 0
            if sm == nsec:
                # every candidate is a later twin or covered: fall back to the leftmost start
                for u in range(n - np_):
                    j = ulist[u]
                    if lo[j] < sm and lo[j] >= sl and lo[j] <= sh:
                        c = _up(cand[j], align)
                        if c == e:
                            sm = lo[j]
            estar[d] = e
            sstar[d] = sm
            lastj[d] = -1
            ckey[d] = -1
            vend[d] = -1
            nchild[d] = 0
            kind[d] = -3  # visited, no child open
        if first and sstar[d] < nsec:
            # split: if the unplaced buffers of the scope form several parts (runs of sections
            # they join), this node and its descendants work in the part holding the point
            # (cross and occ are kept by place/unplace; inside the scope they count only its
            # own buffers)
            sm = sstar[d]
            sl = wl[d]
            sh = wh[d]
            a = sm
            while a > sl and cross[a - 1] > 0:
                a -= 1
            b = sm
            while b < sh and cross[b] > 0:
                b += 1
            other = False
            for s in range(sl, a):
                if occ[s] > 0:
                    other = True
                    break
            if not other:
                for s in range(b + 1, sh + 1):
                    if occ[s] > 0:
                        other = True
                        break
            if other:
                # an open dominance obligation (see the skip) that buffers of this part and of
                # another could both meet couples the parts: no split then
                for o in range(obc):
                    f = _obligation(
                        ob_j[o], ob_e[o], a, b, ptr, nbr, placed, off, size, cand, lo, align
                    )
                    if f == INSIDE | OUTSIDE:
                        other = False
                        break
            if other:
                pl[d] = sl
                ph[d] = sh
                pb[d] = wb[d]
                wl[d] = a
                wh[d] = b
                wb[d] = d
        e = estar[d]
        sm = sstar[d]
        # next child: a buffer starting in s* at E (index order), then the skip
        # (key: j for a child spanning the valley exactly, n + j otherwise, 2n the skip)
        bj = -1
        bk = 2 * n
        pk = ckey[d]
        if pk < 2 * n:
            for q in range(sptr[sm], sptr[sm + 1]):
                j = sidx[q]
                if placed[j] != 0:
                    continue
                key = j if hi[j] == vend[d] else n + j
                if key <= pk or key >= bk:
                    continue
                t = twin[j]
                if t >= 0 and placed[t] == 0:
                    continue
                c = _up(cand[j], align)
                if c == e:
                    bj = j
                    bk = key
        is_skip = False
        if bj < 0 and pk < 2 * n:
            is_skip = True
        if (bj >= 0 or is_skip) and max_disc >= 0 and disc[d] + nchild[d] > max_disc:
            reg[R_CUT] = 1
            bj = -1
            is_skip = False
        if bj < 0 and not is_skip:
            # node d is exhausted; if it began a later part of a split, so is the node that
            # split (that part cannot fit whatever the earlier parts do): unwind to it. Each
            # node found exhausted is remembered (not under a discrepancy limit: a cut is not
            # a proof)
            if d > 0 and memo_on and kh[d, 2] >= 0:
                _remember(memo, kh[d, 0], kh[d, 1], cap, reg[R_NODES] + nodes - kh[d, 2])
            while ft[d] != d:
                t = ft[d]
                reg[R_JUMPS] += 1
                while d > t:
                    d -= 1
                    np_ -= _unplace(
                        lastj[d],
                        placed,
                        lo,
                        hi,
                        size,
                        align,
                        rem,
                        remr,
                        ulist,
                        upos,
                        n - np_,
                        cross,
                        occ,
                        gid,
                        cand,
                        hs,
                        memo_on,
                    )
                cp = _restore(cp, cmark[t], cand, ctr_j, ctr_v, gid, hs, memo_on)
                et = _restore_eff(et, emark[t], eff, effc, etr_s, etr_v, etr_c)
                if memo_on:
                    mtl = _reopen(mtl, mmark[t], obc, obmark[t], mtr, ob_m, ob_j, ob_e, gid, hs)
                obc = obmark[t]
                if d > 0 and memo_on and kh[d, 2] >= 0:
                    _remember(memo, kh[d, 0], kh[d, 1], cap, reg[R_NODES] + nodes - kh[d, 2])
            if d == 0:
                _save(reg, 0, cp, obc, et, nodes, np_, mtl)
                return EXHAUSTED
            d -= 1  # and undo its last child, below
        else:
            child_disc = disc[d] + nchild[d]
            nchild[d] += 1
            nodes += 1
            cmark[d] = cp
            emark[d] = et
            obmark[d] = obc
            mmark[d] = mtl
            if bj >= 0:
                lastj[d] = bj
                ckey[d] = bk
                k = bj
                placed[k] = 1
                if memo_on:
                    _hash(hs, gid[k], cand[k])
                _move(ulist, upos, k, n - np_ - 1)  # to the end of the unplaced list, then cut
                np_ += 1
                _account(k, -1, lo, hi, size, align, rem, remr, cross, occ)
                off[k] = e
                top = e + size[k]
                for q in range(ptr[k], ptr[k + 1]):
                    j = nbr[q]
                    if placed[j] == 0 and cand[j] < top:
                        ctr_j[cp] = j
                        ctr_v[cp] = cand[j]
                        cp += 1
                        if memo_on:
                            _hash(hs, gid[j], cand[j])
                            _hash(hs, gid[j], top)
                        cand[j] = top
            else:
                lastj[d] = n  # the skip: raise every buffer that could have started at (E, s*)
                ckey[d] = 2 * n
                for q in range(sptr[sm], sptr[sm + 1]):
                    j = sidx[q]
                    if placed[j] != 0:
                        continue
                    c = _up(cand[j], align)
                    if c != e:
                        continue
                    t = twin[j]
                    if t < 0 or placed[t] != 0:
                        # a packing where [E, E + size) is free over j's lifetime is dominated
                        # (j can drop to E): some neighbour must intrude there
                        ob_j[obc] = j
                        ob_e[obc] = e
                        ob_w[obc] = -1
                        ob_m[obc] = 0
                        if memo_on:
                            _ob_hash(hs, gid[j], e)
                        obc += 1
                    # it will rest on an unplaced neighbour: at least that one's lowest top
                    least = cap + 1
                    for q in range(ptr[j], ptr[j + 1]):
                        i = nbr[q]
                        if placed[i] == 0:
                            c = _up(cand[i], align)
                            if c < e:
                                c = e
                            if c + size[i] < least:
                                least = c + size[i]
                    ctr_j[cp] = j
                    ctr_v[cp] = cand[j]
                    cp += 1
                    if memo_on:
                        _hash(hs, gid[j], cand[j])
                        _hash(hs, gid[j], least)
                    cand[j] = least
            ok = True
            if np_ == n:
                _save(reg, d + 1, cp, obc, et, nodes, np_, mtl)
                return FOUND
            # the parent passed every check below, so only what the child changed can fail: the
            # sections [ua, ub] of the buffer placed and of those raised (rem and eff change only
            # there), obligations of buffers near them, and the obligations the child records
            ua = nsec
            ub = -1
            if bj >= 0:
                ua = lo[bj]
                ub = hi[bj]
            for q in range(cmark[d], cp):
                j = ctr_j[q]
                ua = min(ua, lo[j])
                ub = max(ub, hi[j])
            for o in range(obc):
                j = ob_j[o]
                if o < obmark[d] and (hi[j] < ua or lo[j] > ub):
                    continue  # no neighbour of j changed: a neighbour overlaps j and the window
                if (
                    memo_on
                    and bj >= 0
                    and o < obmark[d]
                    and ob_m[o] == 0
                    and j != bj
                    and lo[bj] <= hi[j]
                    and lo[j] <= hi[bj]
                    and e < ob_e[o] + size[j]
                    and e + size[bj] > ob_e[o]
                ):
                    # the buffer just placed meets it: out of the state hash (the met trail
                    # puts it back on undo)
                    ob_m[o] = 1
                    mtr[mtl] = o
                    mtl += 1
                    _ob_hash(hs, gid[j], ob_e[o])
                # the neighbour that kept it open last time usually still does (a placed one that
                # intrudes stays put while placed; an unplaced one's candidate only rises)
                w = ob_w[o]
                oe = ob_e[o]
                top = oe + size[j]
                if w >= 0:
                    if placed[w] != 0:
                        if off[w] < top and off[w] + size[w] > oe:
                            continue
                    elif _up(cand[w], align) < top:
                        continue
                w = _witness(j, oe, ptr, nbr, placed, off, size, cand, align)
                ob_w[o] = w
                if w < 0:
                    reg[R_DOM] += 1
                    ok = False
                    break
            # bound: the unplaced buffers of a section stack from the lowest candidate among them
            for s in range(ua, ub + 1):
                etr_s[et] = s
                etr_v[et] = eff[s]
                etr_c[et] = effc[s]
                et += 1
                eff[s] = cap
                effc[s] = cap
                cmax[s] = 0
            for u in range(n - np_ if ok else 0):
                j = ulist[u]
                if hi[j] >= ua and lo[j] <= ub:
                    c = _up(cand[j], align)
                    cval[j] = c  # read again by the staircase bound
                    if c + size[j] > cap:
                        ok = False
                        break
                    _floors(j, c, max(lo[j], ua), min(hi[j], ub), lo, eff, effc, cmax)
            if ok:
                for s in range(ua, ub + 1):
                    if rem[s] > 0 and (eff[s] + rem[s] > cap or eff[s] + remr[s] - align + 1 > cap):
                        ok = False
                        break
            if ok and stair:
                ok = _staircase(
                    ua,
                    ub,
                    ulist,
                    n - np_,
                    cap,
                    lo,
                    hi,
                    size,
                    cval,
                    eff,
                    cmax,
                    rem,
                    bc,
                    bstart,
                    bucket,
                )
                if not ok:
                    reg[R_STAIR] += 1
            if ok and memo_on:
                kh[d + 1, 2] = -1  # not remembered (too few buffers left to be worth it)
                if n - np_ >= MEMO_LEFT:
                    if _recall(memo, hs[0], hs[1], cap):
                        ok = False
                        reg[R_MEMO] += 1
                    else:
                        kh[d + 1, 0] = hs[0]
                        kh[d + 1, 1] = hs[1]
                        kh[d + 1, 2] = reg[R_NODES] + nodes
            if ok:
                d += 1
                kind[d] = -2
                disc[d] = child_disc
                continue
        # undo the child just made (it failed a check), or the last child of the node that was
        # found exhausted above
        np_ -= _unplace(
            lastj[d],
            placed,
            lo,
            hi,
            size,
            align,
            rem,
            remr,
            ulist,
            upos,
            n - np_,
            cross,
            occ,
            gid,
            cand,
            hs,
            memo_on,
        )
        cp = _restore(cp, cmark[d], cand, ctr_j, ctr_v, gid, hs, memo_on)
        et = _restore_eff(et, emark[d], eff, effc, etr_s, etr_v, etr_c)
        if memo_on:
            mtl = _reopen(mtl, mmark[d], obc, obmark[d], mtr, ob_m, ob_j, ob_e, gid, hs)
        obc = obmark[d]


search_py = _search
search = njit(cache=True, nogil=True)(_search)


def reference_fits(
    sizes: Sequence[int], starts: Sequence[int], ends: Sequence[int], cap: int, align: int = 1
) -> list[int] | None:
    """Plain recursive search over every order with canonical placement and no pruning beyond
    the cap; offsets of a packing within `cap`, or None. Exponential: tiny inputs only."""
    n = len(sizes)
    offs: list[int | None] = [None] * n

    def overl(i: int, j: int) -> bool:
        return max(starts[i], starts[j]) <= min(ends[i], ends[j])

    def go(left: frozenset[int]) -> bool:
        if not left:
            return True
        for j in sorted(left):
            top = max(
                (offs[i] + sizes[i] for i in range(n) if offs[i] is not None and overl(i, j)),
                default=0,
            )
            o = -(-top // align) * align
            if o + sizes[j] > cap:
                continue
            offs[j] = o
            if go(left - {j}):
                return True
            offs[j] = None
        return False

    return [int(o) for o in offs if o is not None] if go(frozenset(range(n))) else None
