"""The compiled hot loop of `bb`: depth-first search over canonical placements, resumable.

A buffer rests on the top of what it meets or on 0; the search decides one point at a time which
buffer sits there or skips it, prunes by section bounds, dominance and a failure memory, and keeps
all its state in caller-owned arrays, so it runs for a node budget and resumes where it stopped.
The kernels take the arrays grouped (`Part`, `Packing`, `Stack`, `Trails`, the scratch `Work`).

Design notes (how and why): docs/design/allocation_bb_kernels.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import FunctionType
from typing import Any, NamedTuple

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

FOUND, EXHAUSTED, BUDGET, GROW = 1, 0, 2, 3
"""Kernel outcomes: a packing within the cap; no packing (unless a discrepancy cut, see
`R_CUT`); node budget spent; the depth or trail arrays must grow (the caller grows, resumes)."""

# reg[] slots: the scalar part of the resumable state
R_DEPTH, R_CPTR, R_NODES, R_CUT, R_STARTED, R_PLACED = range(6)
R_JUMPS, R_OBS, R_DOM, R_STAIR, R_ETR, R_MEMO, R_MTR = range(6, 13)
REG_SLOTS = 13

STAIR_SHARE = 1024
"""The staircase bound looks at sections whose slack is at most cap / STAIR_SHARE."""
NO_STAIR = 8
"""A `mode` bit that turns the staircase bound off (tests compare the two searches)."""
MEMO_LEFT = 6  # nodes with fewer unplaced buffers are neither looked up nor remembered
MET, INSIDE, OUTSIDE = 1, 2, 4  # who can meet an obligation (`_obligation`)
NOT_VISITED, VISITED = -2, -3  # Stack.kind of a depth


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

    def arrays(self) -> Part:
        """The buffers' arrays as the kernel takes them."""
        return Part(self.size, self.lo, self.hi, self.ptr, self.nbr, self.twin, self.gid)


class Part(NamedTuple):
    """A `Problem`'s arrays, read-only in the kernel."""

    size: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    ptr: np.ndarray
    nbr: np.ndarray
    twin: np.ndarray
    gid: np.ndarray


class Packing(NamedTuple):
    """The packing so far: per buffer placed or not, its offset, its candidate (the lowest
    offset it can still take); per section the sizes of the unplaced buffers (`remr`: rounded
    up to the alignment)."""

    placed: np.ndarray
    off: np.ndarray
    cand: np.ndarray
    rem: np.ndarray
    remr: np.ndarray


class Stack(NamedTuple):
    """Per depth of the search path (grown on GROW)."""

    kind: np.ndarray  # NOT_VISITED or VISITED
    estar: np.ndarray  # the point decided there: level E ...
    sstar: np.ndarray  # ... and section s*
    lastj: np.ndarray  # the last child tried: a buffer, or n for the skip
    ckey: np.ndarray  # its key in the order children are tried (`_next_child`)
    vend: np.ndarray  # the valley's last section (-1: none)
    nchild: np.ndarray  # children tried
    disc: np.ndarray  # discrepancies on the path so far
    ft: np.ndarray  # the node a failure here is a failure of (a split's later part: its splitter)
    wl: np.ndarray  # the scope: sections wl..wh, from the split at wb (-1: none) ...
    wh: np.ndarray
    wb: np.ndarray
    pl: np.ndarray  # ... and the scope a split at this depth was made from
    ph: np.ndarray
    pb: np.ndarray
    cmark: np.ndarray  # trail lengths when the last child was made: candidates, eff,
    emark: np.ndarray
    obmark: np.ndarray  # obligations, met obligations
    mmark: np.ndarray
    kh: np.ndarray  # (depth, 3): the node's state hash and the node count it was reached at


class Trails(NamedTuple):
    """What undo takes back: candidate raises (buffer, old value), eff/effc changes (section,
    old values), the dominance obligations (buffer, level, last witness, met) and the
    obligations met since (grown on GROW)."""

    ctr_j: np.ndarray
    ctr_v: np.ndarray
    etr_s: np.ndarray
    etr_v: np.ndarray
    etr_c: np.ndarray
    ob_j: np.ndarray
    ob_e: np.ndarray
    ob_w: np.ndarray
    ob_m: np.ndarray
    mtr: np.ndarray


class Work(NamedTuple):
    """Scratch space, sized once for the part and rebuilt from the state on every call."""

    eff: np.ndarray  # per section: the lowest aligned candidate of the unplaced live there
    effc: np.ndarray  # the same over those live before s too
    cmax: np.ndarray  # the highest
    cross: np.ndarray  # unplaced buffers live in s and s + 1
    occ: np.ndarray  # unplaced buffers starting in s
    cnt: np.ndarray  # the point choice's per-section counts (zero between uses)
    bad: np.ndarray
    inl: np.ndarray
    lst: np.ndarray
    cval: np.ndarray  # per buffer: the aligned candidate the bound pass saw
    bc: np.ndarray  # the staircase bound's buckets (zero between uses)
    bstart: np.ndarray
    bucket: np.ndarray
    ulist: np.ndarray  # the unplaced buffers first, then the placed ones
    upos: np.ndarray  # where each buffer is in ulist
    sptr: np.ndarray  # the buffers by start section (CSR)
    sidx: np.ndarray
    hs: np.ndarray  # the state hash (two 64-bit words)


class Search(NamedTuple):
    """One kernel call's arguments: the arrays, grouped, and the decision's scalars."""

    part: Part
    pack: Packing
    stack: Stack
    trails: Trails
    work: Work
    reg: np.ndarray
    memo: np.ndarray
    cap: int
    align: int
    mode: int  # the point rule (without NO_STAIR)
    stair: bool  # the staircase bound is on
    memo_on: bool  # the failure memory is on (never under a discrepancy limit)


@dataclass
class State:
    """The resumable search state of one decision run ("does the part fit under cap?"): the
    scalars in `reg` (R_* slots), the arrays grouped as the kernel takes them."""

    cap: int
    max_disc: int
    reg: np.ndarray
    memo: np.ndarray
    pack: Packing
    stack: Stack
    trails: Trails
    work: Work


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
    depth = 2 * n + 16
    trail = 2 * (len(p.nbr) + n) + 16
    obs = 4 * n + 16
    effs = 16 * n + 2 * p.sections + 16
    z = np.zeros
    pack = Packing(
        placed=z(n, np.uint8),
        off=z(n, np.int64),
        cand=z(n, np.int64),
        rem=section_load(p, p.size),
        remr=section_load(p, -(-p.size // p.align) * p.align),
    )
    per_depth = [z(depth, np.int64) for _ in Stack._fields[:-1]]
    stack = Stack._make([*per_depth, z((depth, 3), np.int64)])
    sizes = {"ctr": trail, "etr": effs, "ob_": obs, "mtr": obs}
    trails = Trails(*(z(sizes[f[:3]], np.int64) for f in Trails._fields))
    memo = new_memo(0) if memo is None else memo
    reg = z(REG_SLOTS, np.int64)
    return State(int(cap), int(max_disc), reg, memo, pack, stack, trails, _new_work(p))


def _new_work(p: Problem) -> Work:
    """Scratch space for the kernel's calls on `p`."""
    n, nsec = len(p.size), p.sections
    spans = int((p.hi - p.lo + 1).sum())
    sizes = {"cval": n, "upos": n, "sidx": n, "ulist": n + 1, "bstart": nsec + 1}
    sizes |= {"sptr": nsec + 1, "bucket": spans + 1, "hs": 2}
    return Work(*(np.zeros(sizes.get(f, nsec), np.int64) for f in Work._fields))


def new_memo(rows: int) -> np.ndarray:
    """A failure memory of `rows` entries (a power of two; 0: none), each the two 64-bit
    hashes of a state, the largest cap under which it was found to have no packing and the
    nodes that took (-1 in every column: empty)."""
    assert rows & (rows - 1) == 0, rows
    return np.full((rows, 4), -1, dtype=np.int64)


def _doubled(a: np.ndarray) -> np.ndarray:
    """`a` in an array twice as long, the rest zero."""
    b = np.zeros((2 * len(a), *a.shape[1:]), dtype=a.dtype)
    b[: len(a)] = a
    return b


def grow(st: State) -> None:
    """Double the depth and trail arrays (keeping their contents) after a GROW outcome."""
    st.stack = Stack(*(_doubled(a) for a in st.stack))
    st.trails = Trails(*(_doubled(a) for a in st.trails))


def run(p: Problem, st: State, budget: int, *, compiled: bool = True, mode: int = 2) -> int:
    """Advance the search by at most `budget` nodes; returns FOUND, EXHAUSTED or BUDGET.

    `mode` 2 decides the tightest qualifying point first, 0 the lowest-leftmost one, 3 the one
    nearest the tightest section; `| NO_STAIR` turns the staircase bound off. `compiled=False`
    runs the pure-Python twin (`search_py`; numpy's int64 arithmetic wraps as the kernel's).
    """
    fn = search if compiled else search_py
    memo_on = st.max_disc < 0 and len(st.memo) > 0
    before = int(st.reg[R_NODES])
    while True:
        left = budget - (int(st.reg[R_NODES]) - before)  # a GROW resumes within the budget
        args = Search(
            p.arrays(),
            st.pack,
            st.stack,
            st.trails,
            st.work,
            st.reg,
            st.memo,
            st.cap,
            p.align,
            mode & (NO_STAIR - 1),
            (mode & NO_STAIR) == 0,
            memo_on,
        )
        with np.errstate(over="ignore"):
            out = int(fn(args, st.max_disc, left))
        if out != GROW:
            return out
        grow(st)


# --- kernels --------------------------------------------------------------------------------------
# The helpers of `search` are inlined into it and take the arrays as one `Search` tuple `st`,
# reading each field where it is used (`st.pack.cand[j]`). Numba counts references to the arrays
# a helper is handed; with a single tuple argument and no field bound to a local name it prunes
# those counts, with more it leaves an atomic count per array and call (up to 5x slower). Leaf
# helpers take plain arrays. `search_py` at the end is the same code run by the interpreter.

JIT: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False}  # _nrt: no refcounting
_kernel = njit(**JIT)
_inline = njit(**JIT, inline="always")


@_inline
def _up(c, align):
    """c rounded up to a multiple of align (a candidate offset as an aligned one)."""
    r = c % align
    return c if r == 0 else c + align - r


@_inline
def _mix(x):
    """A 64-bit integer hashed (the splitmix64 finaliser, in wrapping int64 arithmetic)."""
    x = (x ^ ((x >> 30) & 0x3FFFFFFFF)) * -4658895280553007687
    x = (x ^ ((x >> 27) & 0x1FFFFFFFFF)) * -7723592293110705685
    return x ^ ((x >> 31) & 0x1FFFFFFFF)


@_inline
def _hash(st, g, c):
    """Toggle "buffer g is unplaced with candidate c" in the state hash (two independent 64-bit
    hashes: the XOR of one term per unplaced buffer, kept as buffers move)."""
    st.work.hs[0] ^= _mix(g * 0x2545F4914F6CDD1D + c)
    st.work.hs[1] ^= _mix(g * 0x5851F42D4C957F2D + c * 3 + 1)


@_inline
def _ob_hash(st, g, e):
    """Toggle "obligation (buffer g, level e) is open" in the state hash."""
    st.work.hs[0] ^= _mix(g * 0x369DEA0F31A53F85 + e * 5 + 2)
    st.work.hs[1] ^= _mix(g * 0x27BB2EE687B0B0FD + e * 7 + 3)


@_inline
def _move(st, k, to):
    """Put buffer k at position `to` of the unplaced list, the one there where k was."""
    q = st.work.upos[k]
    other = st.work.ulist[to]
    st.work.ulist[q] = other
    st.work.upos[other] = q
    st.work.ulist[to] = k
    st.work.upos[k] = to


@_inline
def _floors(st, j, c, a, b):
    """Fold buffer j's aligned candidate c into sections a..b of its lifetime: the lowest
    candidate (eff), the lowest among the buffers continuing from the left (effc), the
    highest (cmax)."""
    for s in range(a, b + 1):
        if c < st.work.eff[s]:
            st.work.eff[s] = c
        if c < st.work.effc[s] and s > st.part.lo[j]:
            st.work.effc[s] = c
        if c > st.work.cmax[s]:
            st.work.cmax[s] = c


@_inline
def _account(st, k, sign):
    """Add (sign 1) or take away (-1) buffer k's share of the per-section counts of the
    unplaced buffers: sizes, sizes rounded up to the alignment, crossings, starts."""
    size = st.part.size[k]
    for s in range(st.part.lo[k], st.part.hi[k] + 1):
        st.pack.rem[s] += sign * size
        st.pack.remr[s] += sign * (size + (st.align - size % st.align) % st.align)
    for s in range(st.part.lo[k], st.part.hi[k]):
        st.work.cross[s] += sign
    st.work.occ[st.part.lo[k]] += sign


# (loops in inlined helpers return rather than break: numba leaves the reference counts of the
# arrays around a loop with a break unpruned)


@_inline
def _starts_in(st, un, sl, sh):
    """Whether some unplaced buffer (the first `un` of `ulist`) starts in sections sl..sh."""
    for u in range(un):
        s = st.part.lo[st.work.ulist[u]]
        if s >= sl and s <= sh:
            return True
    return False


@_inline
def _level(st, a, b, c):
    """Whether eff is c over sections a..b."""
    for s in range(a, b + 1):  # noqa: SIM110 (numba: no generators)
        if st.work.eff[s] != c:
            return False
    return True


@_inline
def _occupied(st, a, b):
    """Whether some unplaced buffer starts in sections a..b."""
    for s in range(a, b + 1):  # noqa: SIM110 (numba: no generators)
        if st.work.occ[s] > 0:
            return True
    return False


# --- entry: scratch space, the root, the state rebuilt --------------------------------------------


@_inline
def _prepare(st):
    """The scratch space as a fresh call needs it: zeros, the unplaced list (the first
    n - placed entries of `ulist`) and the buffers by start section; loops visit these
    instead of all n buffers."""
    w = st.work
    for a in (w.cmax, w.cross, w.occ, w.cnt, w.bad, w.inl, w.lst, w.cval, w.bc, w.bstart):
        a[:] = 0
    w.bucket[:] = 0
    w.sptr[:] = 0
    w.hs[:] = 0
    n = st.part.size.shape[0]
    un = 0
    for j in range(n):
        if st.pack.placed[j] == 0:
            w.ulist[un] = j
            w.upos[j] = un
            un += 1
        w.sptr[st.part.lo[j] + 1] += 1
    k = un
    for j in range(n):
        if st.pack.placed[j] != 0:
            w.ulist[k] = j
            w.upos[j] = k
            k += 1
    for s in range(w.eff.shape[0]):
        w.sptr[s + 1] += w.sptr[s]
    for j in range(n):
        s = st.part.lo[j]
        w.sidx[w.sptr[s] + w.bc[s]] = j
        w.bc[s] += 1
    w.bc[:] = 0


@_inline
def _start(st):
    """The first call: the root node, and its bound over every section (children check only
    what they change); EXHAUSTED or FOUND when the root settles it, else -1."""
    st.reg[R_STARTED] = 1
    st.reg[R_DEPTH] = 0
    st.reg[R_PLACED] = 0
    st.stack.kind[0] = NOT_VISITED
    st.stack.disc[0] = 0
    for j in range(st.part.size.shape[0]):
        if st.part.size[j] > st.cap:
            return EXHAUSTED
    if st.part.size.shape[0] == 0:
        return FOUND
    for s in range(st.pack.rem.shape[0]):
        rem = st.pack.rem[s]
        if rem > 0 and (rem > st.cap or st.pack.remr[s] - st.align + 1 > st.cap):
            return EXHAUSTED
    return -1


@_inline
def _rebuild(st, un, obc):
    """eff, effc, cmax, the counts cross/occ and the state hash, computed from the state (the
    nodes keep them up to date from here on)."""
    for s in range(st.work.eff.shape[0]):
        st.work.eff[s] = st.cap
        st.work.effc[s] = st.cap
        st.work.cross[s] = 0
        st.work.occ[s] = 0
    st.work.hs[0] = 0
    st.work.hs[1] = 0
    for u in range(un):
        j = st.work.ulist[u]
        st.work.occ[st.part.lo[j]] += 1
        for s in range(st.part.lo[j], st.part.hi[j]):
            st.work.cross[s] += 1
        c = _up(st.pack.cand[j], st.align)
        hi = st.part.hi[j]
        _floors(st, j, c, st.part.lo[j], hi)
        if st.memo_on:
            _hash(st, st.part.gid[j], st.pack.cand[j])
    if st.memo_on:
        for o in range(obc):
            if st.trails.ob_m[o] == 0:
                _ob_hash(st, st.part.gid[st.trails.ob_j[o]], st.trails.ob_e[o])


# --- a node's first visit: its scope, its point, a split ------------------------------------------


@_inline
def _scope(st, d, un):
    """The sections of the part node d works in (wl..wh): its parent's; once that part is all
    placed, the scope the part was split from, and a failure there is a failure of the node
    that split it (ft)."""
    sl = 0
    sh = st.work.eff.shape[0] - 1
    sb = -1
    if d > 0:
        sl = st.stack.wl[d - 1]
        sh = st.stack.wh[d - 1]
        sb = st.stack.wb[d - 1]
    f = d
    while sb >= 0 and not _starts_in(st, un, sl, sh):
        f = sb
        sl = st.stack.pl[f]
        sh = st.stack.ph[f]
        sb = st.stack.pb[f]
    st.stack.ft[d] = f
    st.stack.wl[d] = sl
    st.stack.wh[d] = sh
    st.stack.wb[d] = sb
    return sl, sh


@_inline
def _tightest(st, sl, sh, un):
    """Modes 2 and 3: the point (E, s*) = (eff[s], s) for a section s where
    - some buffer starting in s can sit at eff[s] (the lowest candidate among the unplaced
      buffers live in s): the children;
    - every such buffer is *ready*: eff is eff[s] over its whole lifetime, so nothing unplaced
      can end up below it (its candidate is its final offset);
    - no buffer from the left can sit at eff[s] across s (effc[s] != eff[s]), so a skip leaves
      it empty.
    The lowest-leftmost point always qualifies; among those that do, the tightest section
    (least slack), then the fewest children, then the leftmost; mode 3: the one nearest the
    tightest section of all, so the search works toward the tight region first. (E, s*)."""
    nsec = st.work.eff.shape[0]
    cap = st.cap
    # sections where some buffer can start at eff are listed (lst; cnt, bad and inl are zero
    # outside this function), so no loop here runs over every section
    nl = 0
    for u in range(un):
        j = st.work.ulist[u]
        s0 = st.part.lo[j]
        if s0 >= sl and s0 <= sh:
            c = _up(st.pack.cand[j], st.align)
            if c == st.work.eff[s0] and st.work.effc[s0] != c:  # (a covered section cannot qualify)
                if st.work.inl[s0] == 0:
                    st.work.inl[s0] = 1
                    st.work.lst[nl] = s0
                    nl += 1
                if st.work.bad[s0] == 0 and not _level(st, s0 + 1, st.part.hi[j], c):
                    st.work.bad[s0] = 1
                t = st.part.twin[j]
                if t < 0 or st.pack.placed[t] != 0:
                    st.work.cnt[s0] += 1
    sm = nsec
    e = 0
    bslack = 0
    bcnt = 0
    tight = sl
    if st.mode == 3:
        tslack = cap + 1
        for s in range(sl, sh + 1):
            if st.pack.rem[s] > 0 and cap - st.work.eff[s] - st.pack.rem[s] < tslack:
                tslack = cap - st.work.eff[s] - st.pack.rem[s]
                tight = s
    bdist = 0
    for i in range(nl):
        s = st.work.lst[i]
        if st.work.cnt[s] > 0 and st.work.effc[s] != st.work.eff[s] and st.work.bad[s] == 0:
            slack = cap - st.work.eff[s] - st.pack.rem[s]
            dist = 0 if st.mode == 2 else abs(s - tight)
            if (
                sm == nsec
                or dist < bdist
                or (dist == bdist and slack < bslack)
                or (dist == bdist and slack == bslack and st.work.cnt[s] < bcnt)
                or (dist == bdist and slack == bslack and st.work.cnt[s] == bcnt and s < sm)
            ):
                bdist = dist
                sm = s
                bslack = slack
                bcnt = st.work.cnt[s]
                e = st.work.eff[s]
    for i in range(nl):
        s = st.work.lst[i]
        st.work.cnt[s] = 0
        st.work.bad[s] = 0
        st.work.inl[s] = 0
    return e, sm


@_inline
def _lowest(st, sl, sh, un):
    """Mode 0: the lowest-leftmost point: E the lowest candidate, s* the first section where
    some buffer can start at E and no buffer that can sit at E covers it from the left."""
    e = st.cap
    for u in range(un):
        j = st.work.ulist[u]
        if st.part.lo[j] >= sl and st.part.lo[j] <= sh:
            c = _up(st.pack.cand[j], st.align)
            if c < e:
                e = c
    nl = 0
    for u in range(un):
        j = st.work.ulist[u]
        s0 = st.part.lo[j]
        if s0 >= sl and s0 <= sh and _up(st.pack.cand[j], st.align) == e:
            t = st.part.twin[j]
            if t < 0 or st.pack.placed[t] != 0:
                if st.work.cnt[s0] == 0:
                    st.work.lst[nl] = s0
                    nl += 1
                st.work.cnt[s0] += 1
    nsec = st.work.effc.shape[0]
    sm = nsec
    for i in range(nl):
        s = st.work.lst[i]
        if st.work.effc[s] != e and s < sm:
            sm = s
        st.work.cnt[s] = 0
    if sm == nsec:
        # every candidate is a later twin or covered: fall back to the leftmost start
        for u in range(un):
            j = st.work.ulist[u]
            if st.part.lo[j] < sm and st.part.lo[j] >= sl and st.part.lo[j] <= sh:
                c = _up(st.pack.cand[j], st.align)
                if c == e:
                    sm = st.part.lo[j]
    return e, sm


@_inline
def _coupled(st, a, b, obc):
    """Whether an open obligation can be met both by buffers starting in sections a..b and by
    others."""
    for o in range(obc):
        if _obligation(st, st.trails.ob_j[o], st.trails.ob_e[o], a, b) == INSIDE | OUTSIDE:
            return True
    return False


@_inline
def _split(st, d, obc):
    """If the unplaced buffers of node d's scope form several parts (runs of sections they
    join), node d and its descendants work in the part holding the point (cross and occ count
    only the scope's own buffers inside it); an open dominance obligation (see `_skip`) that
    buffers of this part and of another could both meet couples the parts: no split then."""
    sm = st.stack.sstar[d]
    sl = st.stack.wl[d]
    sh = st.stack.wh[d]
    a = sm
    while a > sl and st.work.cross[a - 1] > 0:
        a -= 1
    b = sm
    while b < sh and st.work.cross[b] > 0:
        b += 1
    other = _occupied(st, sl, a - 1) or _occupied(st, b + 1, sh)
    if other and not _coupled(st, a, b, obc):
        st.stack.pl[d] = sl
        st.stack.ph[d] = sh
        st.stack.pb[d] = st.stack.wb[d]
        st.stack.wl[d] = a
        st.stack.wh[d] = b
        st.stack.wb[d] = d


@_inline
def _visit(st, d, un, obc):
    """Node d's first visit: its scope, the point it decides, and a split of its scope."""
    sl, sh = _scope(st, d, un)
    if st.mode >= 2:
        e, sm = _tightest(st, sl, sh, un)
        # the valley: sections from s* on where E is the floor; a child that spans it exactly
        # is tried first (it leaves no sliver)
        t = sm
        while t + 1 <= sh and st.work.eff[t + 1] == e:
            t += 1
        st.stack.vend[d] = t
    else:
        e, sm = _lowest(st, sl, sh, un)
        st.stack.vend[d] = -1
    st.stack.estar[d] = e
    st.stack.sstar[d] = sm
    st.stack.lastj[d] = -1
    st.stack.ckey[d] = -1
    st.stack.nchild[d] = 0
    st.stack.kind[d] = VISITED
    if sm < st.work.eff.shape[0]:
        _split(st, d, obc)


# --- a node's children ----------------------------------------------------------------------------


@_inline
def _next_child(st, d):
    """Node d's next child: a buffer starting in s* at E (key: j for a child spanning the
    valley exactly, n + j otherwise, in key order), then the skip (key 2n): (buffer or -1,
    key, is the skip)."""
    n = st.part.size.shape[0]
    e = st.stack.estar[d]
    sm = st.stack.sstar[d]
    vend = st.stack.vend[d]
    bj = -1
    bk = 2 * n
    last = st.stack.ckey[d]
    if sm >= st.work.eff.shape[0]:
        # no point: no unplaced buffer of the scope has an aligned candidate within the cap
        # (one the section bound did not see rise past it), so the node has no packing below
        # it and neither a child nor the skip (which reads section s*'s list too)
        return -1, 2 * n, False
    if last < 2 * n:
        for q in range(st.work.sptr[sm], st.work.sptr[sm + 1]):
            j = st.work.sidx[q]
            if st.pack.placed[j] != 0:
                continue
            key = j if st.part.hi[j] == vend else n + j
            if key <= last or key >= bk:
                continue
            t = st.part.twin[j]
            if t >= 0 and st.pack.placed[t] == 0:
                continue
            if _up(st.pack.cand[j], st.align) == e:
                bj = j
                bk = key
    return bj, bk, bj < 0 and last < 2 * n


@_inline
def _place(st, k, e, np_, cp):
    """The child placing buffer k at E: off the unplaced list, its neighbours' candidates
    raised to its top (trailed); (placed count, candidate trail length)."""
    n = st.part.size.shape[0]
    st.pack.placed[k] = 1
    if st.memo_on:
        _hash(st, st.part.gid[k], st.pack.cand[k])
    _move(st, k, n - np_ - 1)  # to the end of the unplaced list, then cut
    np_ += 1
    _account(st, k, -1)
    st.pack.off[k] = e
    top = e + st.part.size[k]
    for q in range(st.part.ptr[k], st.part.ptr[k + 1]):
        j = st.part.nbr[q]
        if st.pack.placed[j] == 0 and st.pack.cand[j] < top:
            cp = _raise(st, j, top, cp)
    return np_, cp


@_inline
def _raise(st, j, to, cp):
    """Raise buffer j's candidate to `to`, trailed at cp (and in the state hash, with the
    memory on); the trail's new length."""
    st.trails.ctr_j[cp] = j
    st.trails.ctr_v[cp] = st.pack.cand[j]
    if st.memo_on:
        _hash(st, st.part.gid[j], st.pack.cand[j])
        _hash(st, st.part.gid[j], to)
    st.pack.cand[j] = to
    return cp + 1


@_inline
def _skip(st, e, sm, cp, obc):
    """The skip: every buffer that could have started at (E, s*) is raised to the lowest top
    of an unplaced neighbour, and a dominance obligation recorded for it; (candidate trail
    length, obligations)."""
    for q in range(st.work.sptr[sm], st.work.sptr[sm + 1]):
        j = st.work.sidx[q]
        if st.pack.placed[j] != 0:
            continue
        if _up(st.pack.cand[j], st.align) != e:
            continue
        t = st.part.twin[j]
        if t < 0 or st.pack.placed[t] != 0:
            # a packing where [E, E + size) is free over j's lifetime is dominated (j can drop
            # to E): some neighbour must intrude there
            st.trails.ob_j[obc] = j
            st.trails.ob_e[obc] = e
            st.trails.ob_w[obc] = -1
            st.trails.ob_m[obc] = 0
            if st.memo_on:
                _ob_hash(st, st.part.gid[j], e)
            obc += 1
        # it will rest on an unplaced neighbour: at least that one's lowest top
        least = st.cap + 1
        for r in range(st.part.ptr[j], st.part.ptr[j + 1]):
            i = st.part.nbr[r]
            if st.pack.placed[i] == 0:
                c = _up(st.pack.cand[i], st.align)
                if c < e:
                    c = e
                if c + st.part.size[i] < least:
                    least = c + st.part.size[i]
        cp = _raise(st, j, least, cp)
    return cp, obc


# --- the checks on a new child --------------------------------------------------------------------


@_inline
def _changed(st, d, bj, cp):
    """The sections the child of node d changed (rem and eff change only there): those of the
    buffer placed (bj >= 0) and of those raised; (first, last)."""
    ua = st.pack.rem.shape[0]
    ub = -1
    if bj >= 0:
        ua = st.part.lo[bj]
        ub = st.part.hi[bj]
    for q in range(st.stack.cmark[d], cp):
        j = st.trails.ctr_j[q]
        ua = min(ua, st.part.lo[j])
        ub = max(ub, st.part.hi[j])
    return ua, ub


@_inline
def _obligations_hold(st, d, bj, e, ua, ub, obc, mtl):
    """Every open dominance obligation can still be met (those of buffers near the changed
    sections ua..ub, and those the child recorded); obligations the placed buffer meets leave
    the state hash. (True if all hold, the met-trail length)."""
    omark = st.stack.obmark[d]
    for o in range(obc):
        j = st.trails.ob_j[o]
        if o < omark and (st.part.hi[j] < ua or st.part.lo[j] > ub):
            continue  # no neighbour of j changed: a neighbour overlaps j and the window
        oe = st.trails.ob_e[o]
        if (
            st.memo_on
            and bj >= 0
            and o < omark
            and st.trails.ob_m[o] == 0
            and j != bj
            and st.part.lo[bj] <= st.part.hi[j]
            and st.part.lo[j] <= st.part.hi[bj]
            and e < oe + st.part.size[j]
            and e + st.part.size[bj] > oe
        ):
            # the buffer just placed meets it: out of the state hash (the met trail puts it
            # back on undo)
            st.trails.ob_m[o] = 1
            st.trails.mtr[mtl] = o
            mtl += 1
            _ob_hash(st, st.part.gid[j], oe)
        # the neighbour that kept it open last time usually still does (a placed one that
        # intrudes stays put while placed; an unplaced one's candidate only rises)
        wit = st.trails.ob_w[o]
        top = oe + st.part.size[j]
        if wit >= 0:
            if st.pack.placed[wit] != 0:
                if st.pack.off[wit] < top and st.pack.off[wit] + st.part.size[wit] > oe:
                    continue
            elif _up(st.pack.cand[wit], st.align) < top:
                continue
        wit = _witness(st, j, oe)
        st.trails.ob_w[o] = wit
        if wit < 0:
            st.reg[R_DOM] += 1
            return False, mtl
    return True, mtl


@_inline
def _bound(st, ok, ua, ub, un, et):
    """The section bound over ua..ub: the unplaced buffers of a section stack from the lowest
    candidate among them (eff, effc, cmax recomputed there, their old values trailed; `ok`
    False: only reset). (True if it holds, the eff-trail length)."""
    cap = st.cap
    for s in range(ua, ub + 1):
        st.trails.etr_s[et] = s
        st.trails.etr_v[et] = st.work.eff[s]
        st.trails.etr_c[et] = st.work.effc[s]
        et += 1
        st.work.eff[s] = cap
        st.work.effc[s] = cap
        st.work.cmax[s] = 0
    for u in range(un if ok else 0):
        j = st.work.ulist[u]
        if st.part.hi[j] >= ua and st.part.lo[j] <= ub:
            c = _up(st.pack.cand[j], st.align)
            st.work.cval[j] = c  # read again by the staircase bound
            if c + st.part.size[j] > cap:
                return False, et
            a = max(st.part.lo[j], ua)
            b = min(st.part.hi[j], ub)
            _floors(st, j, c, a, b)
    if not ok:
        return False, et
    for s in range(ua, ub + 1):
        rem = st.pack.rem[s]
        eff = st.work.eff[s]
        if rem > 0 and (eff + rem > cap or eff + st.pack.remr[s] - st.align + 1 > cap):
            return False, et
    return True, et


@_inline
def _staircase(st, ua, ub, un):
    """The staircase bound on sections ua..ub: in a section s, the space [eff[s], y) can only be
    covered by unplaced buffers whose candidate lies below y, each by at most min(size, y - c);
    what they cannot cover is waste, and a section's waste cannot exceed its slack
    cap - eff[s] - rem[s]. False when some section's waste does (the node is pruned). The
    caller's bound pass has left eff over ua..ub and cval[j] (the aligned candidate) of every
    unplaced buffer (the first `un` of `ulist`) live there, and cmax[s], the highest of them."""
    cap = st.cap
    # only sections with (nearly) no slack are looked at: the bound is valid on any section,
    # but on the tight set it pruned the same nodes whether sections up to 1/32 or 1/1024 of
    # the cap of slack were looked at, and looking costs a sort per section; and only those
    # with a candidate above eff + slack (no lower step y can waste more than the slack)
    a = ub + 1
    b = ua - 1
    for s in range(ua, ub + 1):
        st.work.bc[s] = 0
        slack = cap - st.work.eff[s] - st.pack.rem[s]
        if (
            st.pack.rem[s] > 0
            and slack * STAIR_SHARE <= cap
            and st.work.cmax[s] - st.work.eff[s] > slack
        ):
            a = min(a, s)
            b = max(b, s)
    if a > b:
        return True
    _buckets(st, a, b, un)
    return _stairs_fit(st, a, b)


@_inline
def _buckets(st, ua, ub, un):
    """The unplaced buffers live in each section of ua..ub, sorted by candidate (bucket, from
    bstart[s], bc[s] of them)."""
    for u in range(un):
        j = st.work.ulist[u]
        if st.part.hi[j] >= ua and st.part.lo[j] <= ub:
            for s in range(max(st.part.lo[j], ua), min(st.part.hi[j], ub) + 1):
                st.work.bc[s] += 1
    tot = 0
    for s in range(ua, ub + 1):
        st.work.bstart[s] = tot
        tot += st.work.bc[s]
        st.work.bc[s] = 0
    for u in range(un):
        j = st.work.ulist[u]
        if st.part.hi[j] >= ua and st.part.lo[j] <= ub:
            c = st.work.cval[j]
            for s in range(max(st.part.lo[j], ua), min(st.part.hi[j], ub) + 1):
                # insertion into the section's bucket, kept sorted by candidate
                k = st.work.bstart[s] + st.work.bc[s]
                while k > st.work.bstart[s] and st.work.cval[st.work.bucket[k - 1]] > c:
                    st.work.bucket[k] = st.work.bucket[k - 1]
                    k -= 1
                st.work.bucket[k] = j
                st.work.bc[s] += 1


@_inline
def _stairs_fit(st, ua, ub):
    """Whether every section of ua..ub can waste no more than its slack (see `_staircase`)."""
    for s in range(ua, ub + 1):
        if st.pack.rem[s] == 0:
            continue
        base = st.work.eff[s]
        slack = st.cap - base - st.pack.rem[s]
        b0 = st.work.bstart[s]
        for k in range(1, st.work.bc[s]):
            y = st.work.cval[st.work.bucket[b0 + k]]
            if y - base <= slack or y == st.work.cval[st.work.bucket[b0 + k - 1]]:
                continue
            cover = 0
            for i in range(k):
                j = st.work.bucket[b0 + i]
                c = st.work.cval[j]
                size = st.part.size[j]
                cover += size if size < y - c else y - c
            if y - base - cover > slack:
                return False
    return True


@_inline
def _check(st, d, bj, e, nodes, at):
    """Whether node d's new child (placing bj at E, or the skip) passes the checks. The parent
    passed them all, so only what the child changed can fail: obligations of buffers near the
    sections it changed and those it recorded, the section and staircase bounds there, the
    failure memory. `at` as in `_undo`; returns (ok, eff trail, met trail)."""
    np_, cp, obc, et, mtl = at
    un = st.part.size.shape[0] - np_
    ua, ub = _changed(st, d, bj, cp)
    ok, mtl = _obligations_hold(st, d, bj, e, ua, ub, obc, mtl)
    ok, et = _bound(st, ok, ua, ub, un, et)
    if ok and st.stair:
        ok = _staircase(st, ua, ub, un)
        if not ok:
            st.reg[R_STAIR] += 1
    if ok and st.memo_on:
        st.stack.kh[d + 1, 2] = -1  # not remembered (too few buffers left to be worth it)
        if un >= MEMO_LEFT:
            h1 = st.work.hs[0]
            h2 = st.work.hs[1]
            if _recall(st, h1, h2):
                ok = False
                st.reg[R_MEMO] += 1
            else:
                st.stack.kh[d + 1, 0] = h1
                st.stack.kh[d + 1, 1] = h2
                st.stack.kh[d + 1, 2] = st.reg[R_NODES] + nodes
    return ok, et, mtl


# --- leaf kernels: obligations, the failure memory ------------------------------------------------


@_inline
def _obligation(st, j, e, a, b):
    """Who can meet the obligation "a neighbour of j intrudes into [e, e + size_j)": MET (a
    placed one does), else INSIDE / OUTSIDE flags for unplaced ones that still can, starting in
    sections a..b or elsewhere (0: nobody can)."""
    top = e + st.part.size[j]
    flags = 0
    for q in range(st.part.ptr[j], st.part.ptr[j + 1]):
        i = st.part.nbr[q]
        if st.pack.placed[i] != 0:
            if st.pack.off[i] < top and st.pack.off[i] + st.part.size[i] > e:
                return MET
        elif _up(st.pack.cand[i], st.align) < top:
            flags |= INSIDE if a <= st.part.lo[i] <= b else OUTSIDE
            if b < a or flags == INSIDE | OUTSIDE:
                return flags
    return flags


@_inline
def _witness(st, j, e):
    """A neighbour that meets or can still meet the obligation (j, e): placed and intruding
    into [e, e + size_j), or unplaced with its candidate below e + size_j; -1 if none."""
    top = e + st.part.size[j]
    for q in range(st.part.ptr[j], st.part.ptr[j + 1]):
        i = st.part.nbr[q]
        if st.pack.placed[i] != 0:
            if st.pack.off[i] < top and st.pack.off[i] + st.part.size[i] > e:
                return i
        elif _up(st.pack.cand[i], st.align) < top:
            return i
    return -1


@_inline
def _recall(st, h1, h2):
    """Whether the memory holds the state (h1, h2) as having no packing under cap or more."""
    rows = st.memo.shape[0]
    if rows == 0:
        return False
    for r in (h1 & (rows - 1), (h1 & (rows - 1)) ^ 1):
        if st.memo[r, 0] == h1 and st.memo[r, 1] == h2 and st.memo[r, 2] >= st.cap:
            return True
    return False


@_inline
def _remember(st, h1, h2, work):
    """Record that the state (h1, h2) has no packing under cap, found in `work` nodes. Two
    slots per hash: the first keeps the costlier of its entry and the new one (a failure near
    the root saves the most when met again), the second takes the other."""
    rows = st.memo.shape[0]
    if rows == 0:
        return
    x = h1 & (rows - 1)
    for r in (x, x ^ 1):
        if st.memo[r, 0] == h1 and st.memo[r, 1] == h2:
            st.memo[r, 2] = max(st.memo[r, 2], st.cap)
            st.memo[r, 3] = max(st.memo[r, 3], work)
            return
    y = x ^ 1
    if work >= st.memo[x, 3]:
        for c in range(4):
            st.memo[y, c] = st.memo[x, c]
        y = x
    st.memo[y, 0] = h1
    st.memo[y, 1] = h2
    st.memo[y, 2] = st.cap
    st.memo[y, 3] = work


# --- backtracking ---------------------------------------------------------------------------------


@_inline
def _undo(st, d, at):
    """Take back node d's last child: the buffer it placed (none for the skip), the candidate
    raises and eff changes trailed since, the obligations met or recorded since (in the state
    hash too, with the memory on). `at` is (placed count, candidate trail, obligations, eff
    trail, met trail), and so is the result."""
    np_, cp, obc, et, mtl = at
    n = st.part.size.shape[0]
    k = st.stack.lastj[d]
    if k < n:
        st.pack.placed[k] = 0
        if st.memo_on:
            _hash(st, st.part.gid[k], st.pack.cand[k])
        _move(st, k, n - np_)  # back into the unplaced list
        _account(st, k, 1)
        np_ -= 1
    mark = st.stack.cmark[d]
    while cp > mark:
        cp -= 1
        j = st.trails.ctr_j[cp]
        if st.memo_on:
            _hash(st, st.part.gid[j], st.pack.cand[j])
            _hash(st, st.part.gid[j], st.trails.ctr_v[cp])
        st.pack.cand[j] = st.trails.ctr_v[cp]
    mark = st.stack.emark[d]
    while et > mark:
        et -= 1
        s = st.trails.etr_s[et]
        st.work.eff[s] = st.trails.etr_v[et]
        st.work.effc[s] = st.trails.etr_c[et]
    mark = st.stack.obmark[d]
    if st.memo_on:
        # obligations met since open again, then those recorded since go
        met = st.stack.mmark[d]
        while mtl > met:
            mtl -= 1
            o = st.trails.mtr[mtl]
            st.trails.ob_m[o] = 0
            _ob_hash(st, st.part.gid[st.trails.ob_j[o]], st.trails.ob_e[o])
        for o in range(mark, obc):
            _ob_hash(st, st.part.gid[st.trails.ob_j[o]], st.trails.ob_e[o])
    return np_, cp, mark, et, mtl


@_inline
def _failed(st, d, nodes):
    """Remember node d as having no packing under cap (if it was looked up on the way down)."""
    if d > 0 and st.memo_on and st.stack.kh[d, 2] >= 0:
        work = st.reg[R_NODES] + nodes - st.stack.kh[d, 2]
        _remember(st, st.stack.kh[d, 0], st.stack.kh[d, 1], work)


@_inline
def _exhausted(st, d, nodes, at):
    """Node d has no child left. It is remembered (not under a discrepancy limit: a cut is not
    a proof); if it began a later part of a split, so is the node that split (that part cannot
    fit whatever the earlier parts do): unwind to it, and on. (the depth reached, `at`)."""
    while True:
        _failed(st, d, nodes)
        t = st.stack.ft[d]
        if t == d:
            return d, at
        st.reg[R_JUMPS] += 1
        while d > t:
            d -= 1
            at = _undo(st, d, at)


@_inline
def _save(st, d, at, nodes):
    """Store the scalar search state in `reg` before the kernel returns (it resumes from it)."""
    np_, cp, obc, et, mtl = at
    st.reg[R_DEPTH] = d
    st.reg[R_CPTR] = cp
    st.reg[R_OBS] = obc
    st.reg[R_ETR] = et
    st.reg[R_MTR] = mtl
    st.reg[R_NODES] += nodes
    st.reg[R_PLACED] = np_


@_inline
def _full(st, d, at):
    """Whether the depth or trail arrays may overflow at the next node (the caller grows them)."""
    _, cp, obc, et, _ = at
    n = st.part.size.shape[0]
    return (
        d + 2 >= st.stack.kind.shape[0]
        or cp + 2 * n + 2 >= st.trails.ctr_j.shape[0]
        or obc + n + 2 >= st.trails.ob_j.shape[0]
        or et + st.pack.rem.shape[0] + 2 >= st.trails.etr_s.shape[0]
    )


# --- the search -----------------------------------------------------------------------------------


@_kernel
def search(st, max_disc, budget):
    """One resumable run of the search (see the module docstring) of at most `budget` nodes:
    FOUND, EXHAUSTED, BUDGET or GROW. `at` is the placed count and the trail lengths."""
    n = st.part.size.shape[0]
    reg, stack = st.reg, st.stack
    _prepare(st)
    if reg[R_STARTED] == 0:
        out = _start(st)
        if out >= 0:
            return out
    d = reg[R_DEPTH]
    at = (reg[R_PLACED], reg[R_CPTR], reg[R_OBS], reg[R_ETR], reg[R_MTR])
    nodes = 0
    if at[0] == n and d > 0:
        # resumed after FOUND: undo the last placement and go on with the next packing
        d -= 1
        at = _undo(st, d, at)
    _rebuild(st, n - at[0], at[2])
    while True:
        if nodes >= budget:
            _save(st, d, at, nodes)
            return BUDGET
        if _full(st, d, at):
            _save(st, d, at, nodes)
            return GROW
        np_, cp, obc, et, mtl = at
        if stack.kind[d] == NOT_VISITED:
            _visit(st, d, n - np_, obc)
        bj, bk, skip = _next_child(st, d)
        if (bj >= 0 or skip) and max_disc >= 0 and stack.disc[d] + stack.nchild[d] > max_disc:
            reg[R_CUT] = 1  # a discrepancy cut: EXHAUSTED is no proof now
            bj = -1
            skip = False
        if bj < 0 and not skip:
            d, at = _exhausted(st, d, nodes, at)
            if d == 0:
                _save(st, 0, at, nodes)
                return EXHAUSTED
            d -= 1  # and undo its last child, below
        else:
            child_disc = stack.disc[d] + stack.nchild[d]
            stack.nchild[d] += 1
            nodes += 1
            stack.cmark[d] = cp
            stack.emark[d] = et
            stack.obmark[d] = obc
            stack.mmark[d] = mtl
            stack.lastj[d] = bj if bj >= 0 else n
            stack.ckey[d] = bk  # 2n for the skip
            e = stack.estar[d]
            if bj >= 0:
                np_, cp = _place(st, bj, e, np_, cp)
            else:
                cp, obc = _skip(st, e, stack.sstar[d], cp, obc)
            at = (np_, cp, obc, et, mtl)
            if np_ == n:
                _save(st, d + 1, at, nodes)
                return FOUND
            ok, et, mtl = _check(st, d, bj, e, nodes, at)
            at = (np_, cp, obc, et, mtl)
            if ok:
                d += 1
                stack.kind[d] = NOT_VISITED
                stack.disc[d] = child_disc
                continue
        # undo the child just made (it failed a check), or the last child of the node that
        # was found exhausted above
        at = _undo(st, d, at)


def _interpreted(name: str) -> Any:
    """The pure-Python twin of kernel `name`: the same code run by the interpreter, every kernel
    it calls a twin too (numpy's int64 scalars wrap as the kernel's do: see `run`)."""
    space: dict[str, Any] = dict(globals())
    for key, obj in globals().items():
        if isinstance(obj, CPUDispatcher):
            f = obj.py_func
            space[key] = FunctionType(f.__code__, space, f.__name__, f.__defaults__, f.__closure__)
    return space[name]


search_py = _interpreted("search")
"""The search uncompiled (`run(..., compiled=False)`): the tests' reference for the kernel."""


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
                (o + sizes[i] for i, o in enumerate(offs) if o is not None and overl(i, j)),
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
