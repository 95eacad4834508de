"""The compiled hot loop of `bb` on concurrent lifetimes (a conflict graph), resumable.

Canonical packings. List a packing's buffers by offset (ties by index) and place them again in
that order, each at the lowest aligned gap its conflicting predecessors leave: no buffer rises.
Repeating this ends at a *canonical* packing, no higher, where each buffer sits on top of its
conflicting predecessors (at align(max of their tops), or 0). So the search builds the list: a
node is a prefix, its children the buffers that can come next, a buffer v at q(v) = align(max
top of its placed neighbours), which must be at least the last offset f (equal to it only for a
larger index). Children are tried by (q, rank). Symmetries: twins (same size, same neighbours,
conflicting or not) come in index order; within a stack class (`Part.tc`) a larger buffer never
sits right on a smaller one (swapping the two keeps the stack, and lowers sum(offset x size^2),
so some canonical packing at least as good has no such pair).

Bound of a node, everything unplaced sits at or above f: a buffer w at max(f, q(w)) plus its size;
one whose q(w) is below f (or at f, but it may not come after the last) must rest on a neighbour
still to come: at f + the smallest unplaced size at least, and with no unplaced neighbour the
node is dead; each clique of the family, its unplaced members stacked from those lowest offsets
above f and above its placed members' tops (one machine with release dates: in order of them).
A pruned node's bound is a lower bound of its subtree, so a search that runs out of nodes to
visit proves the smallest pruned bound (`R_MINP`) a lower bound.

Failure memory: what a node's future depends on is the placed set, f, the last buffer and the
placed buffers reaching f or above (with their tops), hashed (`key`); a node found to have no
packing under a cap is remembered (`remember`), and a node of the same state under a cap no
larger is pruned (`recall`), across every search of the part. Not under a discrepancy limit.

The kernels take one `Args` tuple (see `allocation_bb_kernels` for why: numba prunes reference
counts of a single tuple argument) and keep all state in caller-owned arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from tensorplan.models.allocation_bb_kernels import JIT, _mix, _up

FOUND, EXHAUSTED, BUDGET = 1, 0, 2
"""Kernel outcomes: a packing within the cap (the best so far in `best`); none below the cap
(a proof unless `R_CUT`); node budget spent."""

R_DEPTH, R_NODES, R_STARTED, R_CUT, R_MINP, R_LEAF, R_ULEN, R_CAP, R_BEST, R_H1, R_H2 = range(11)
R_HITS = 11
REG_SLOTS = 12
INF = np.int64(2**62)


class Part(NamedTuple):
    """One connected part, renumbered: the index is the tie-break of equal offsets.

    `ptr`/`nbr`: conflict graph (CSR); `twin[v]`: the previous buffer of the same size and
    neighbourhood, or -1; `rank[v]`: the order children are tried in at equal q (lower first);
    `cptr`/`cmem`: the clique family (CSR), `vptr`/`vcl`: the cliques of each buffer, `corr[c]`:
    the largest rounding of a member (the top one of a stack needs no rounding); `tc[v]`: the
    class of buffers of v's closed neighbourhood (all conflicting, the same others) and sizes
    that are not all equal, or -1, its members `tmem[tptr[c]:tptr[c + 1]]`: within a class a
    smaller one never sits right on a larger one (swapping two such neighbours in a stack keeps
    the stack; each swap lowers the sum of offsets, so some packing at least as good has none)."""

    size: np.ndarray
    rsz: np.ndarray
    ptr: np.ndarray
    nbr: np.ndarray
    twin: np.ndarray
    rank: np.ndarray
    cptr: np.ndarray
    cmem: np.ndarray
    vptr: np.ndarray
    vcl: np.ndarray
    corr: np.ndarray
    tc: np.ndarray
    tptr: np.ndarray
    tmem: np.ndarray


class State(NamedTuple):
    """The resumable search: per buffer placed / offset / top of its placed neighbours /
    unplaced neighbours; per depth the buffer placed there, the key (q, rank) of the last child
    tried, children tried, discrepancies, peak, where it left the unplaced list and the trail
    marks; the trails (top and clique-top raises), per clique the unplaced rounded size and the
    placed top; the unplaced buffers first in `ulist`; the best packing; scalars in `reg`."""

    placed: np.ndarray
    pos: np.ndarray
    top: np.ndarray
    unp: np.ndarray
    seq: np.ndarray
    kq: np.ndarray
    kr: np.ndarray
    cnt: np.ndarray
    disc: np.ndarray
    pk: np.ndarray
    ui: np.ndarray
    tp: np.ndarray
    ctp: np.ndarray
    tv: np.ndarray
    to: np.ndarray
    chv: np.ndarray
    cho: np.ndarray
    remr: np.ndarray
    hi: np.ndarray
    ulist: np.ndarray
    upos: np.ndarray
    kh: np.ndarray
    low: np.ndarray
    need: np.ndarray
    corder: np.ndarray
    cpos: np.ndarray
    rel: np.ndarray
    dur: np.ndarray
    best: np.ndarray
    reg: np.ndarray


class Args(NamedTuple):
    part: Part
    s: State
    memo: np.ndarray  # the failure memory (`new_memo`), shared by every search of the part
    align: int
    max_disc: int  # < 0: no limit (and with a limit no failure memory: a cut is no failure)


def new_state(p: Part, cap: int) -> State:
    """A fresh search for "fits under `cap`?" (the cap is `reg[R_CAP]`, lowered in between
    calls to go on below a packing found)."""
    n, k = len(p.size), len(p.corr)
    z = np.zeros
    unp = np.diff(p.ptr).astype(np.int64)
    remr = z(k, np.int64)
    np.add.at(remr, p.vcl, np.repeat(p.rsz, np.diff(p.vptr)))
    reg = z(REG_SLOTS, np.int64)
    reg[R_MINP] = INF
    reg[R_CAP] = cap
    reg[R_ULEN] = n
    reg[R_BEST] = INF
    d = n + 1
    return State(
        placed=z(n, np.uint8),
        pos=z(n, np.int64),
        top=z(n, np.int64),
        unp=unp,
        seq=z(d, np.int64),
        kq=z(d, np.int64),
        kr=z(d, np.int64),
        cnt=z(d, np.int64),
        disc=z(d, np.int64),
        pk=z(d, np.int64),
        ui=z(d, np.int64),
        tp=z(d + 1, np.int64),
        ctp=z(d + 1, np.int64),
        tv=z(len(p.nbr) + 1, np.int64),
        to=z(len(p.nbr) + 1, np.int64),
        chv=z(len(p.vcl) + 1, np.int64),
        cho=z(len(p.vcl) + 1, np.int64),
        remr=remr,
        hi=z(k, np.int64),
        ulist=np.arange(n, dtype=np.int64),
        upos=np.arange(n, dtype=np.int64),
        kh=z((d, 2), np.int64),
        low=z(n, np.int64),
        need=z(d, np.int64),
        corder=np.arange(k, dtype=np.int64),
        cpos=np.arange(k, dtype=np.int64),
        rel=z(n + 1, np.int64),
        dur=z(n + 1, np.int64),
        best=z(n, np.int64),
        reg=reg,
    )


def new_memo(rows: int) -> np.ndarray:
    """A failure memory of `rows` entries (a power of two; 0: none): the two hashes of a state
    and the largest cap it was found to have no packing under (-1: empty)."""
    assert rows & (rows - 1) == 0, rows
    return np.full((rows, 3), -1, dtype=np.int64)


def run(
    p: Part,
    st: State,
    budget: int,
    align: int,
    max_disc: int = -1,
    memo: np.ndarray | None = None,
) -> int:
    """Advance the search by at most `budget` nodes: FOUND, EXHAUSTED or BUDGET."""
    memo = new_memo(0) if memo is None or max_disc >= 0 else memo
    with np.errstate(over="ignore"):
        return int(search(Args(p, st, memo, int(align), int(max_disc)), int(budget)))


_kernel = njit(**JIT)
_inline = njit(**JIT, inline="always")


@_kernel
def key(st, d, f, last):
    """The node's state as two hashes: what its future depends on is the placed set, f, the
    last buffer and the placed buffers reaching f or above (with their tops); how the rest
    below f is packed does not matter. Kept in kh[d]."""
    p, s = st.part, st.s
    a = st.align
    h1 = s.reg[R_H1] ^ _mix(f * 0x369DEA0F31A53F85 + last * 7 + 3)
    h2 = s.reg[R_H2] ^ _mix(f * 0x27BB2EE687B0B0FD + last * 11 + 5)
    n = p.size.shape[0]
    for i in range(s.reg[R_ULEN], n):
        u = s.ulist[i]
        t = s.pos[u] + p.size[u]
        if _up(t, a) >= f:
            h1 ^= _mix(u * 0x61C8864680B583EB + t * 13 + 7)
            h2 ^= _mix(u * 0x4CF5AD432745937F + t * 17 + 9)
    s.kh[d, 0], s.kh[d, 1] = h1, h2


@_kernel
def recall(st, d):
    """The largest cap the node at depth d was found to have no packing under (-1: none)."""
    m = st.memo
    rows = m.shape[0]
    if rows == 0:
        return -1
    h1, h2 = st.s.kh[d, 0], st.s.kh[d, 1]
    for k in range(4):
        r = (h1 + k) & (rows - 1)
        if m[r, 0] == h1 and m[r, 1] == h2:
            return m[r, 2]
    return -1


@_kernel
def remember(st, d, cap):
    """The node at depth d has no packing under cap (in one of four slots: its own, an empty
    one, else the one with the smallest cap)."""
    m = st.memo
    rows = m.shape[0]
    if rows == 0:
        return
    h1, h2 = st.s.kh[d, 0], st.s.kh[d, 1]
    pick = -1
    for k in range(4):
        r = (h1 + k) & (rows - 1)
        if m[r, 0] == h1 and m[r, 1] == h2:
            m[r, 2] = max(m[r, 2], cap)
            return
        if pick < 0 or m[r, 2] < m[pick, 2]:
            pick = r
    m[pick, 0], m[pick, 1], m[pick, 2] = h1, h2, cap


@_inline
def _place(st, v, q, d):
    """Put v at offset q as the buffer of depth d (trails from the marks of depth d)."""
    p, s = st.part, st.s
    t = q + p.size[v]
    s.placed[v] = 1
    s.pos[v] = q
    s.seq[d] = v
    s.reg[R_H1] ^= _mix(v * 0x2545F4914F6CDD1D + 1)
    s.reg[R_H2] ^= _mix(v * 0x5851F42D4C957F2D + 2)
    s.pk[d + 1] = max(s.pk[d], t)
    last = s.reg[R_ULEN] - 1
    i = s.upos[v]
    w = s.ulist[last]
    s.ulist[i] = w
    s.upos[w] = i
    s.ulist[last] = v
    s.upos[v] = last
    s.ui[d] = i
    s.reg[R_ULEN] = last
    k = s.tp[d]
    for e in range(p.ptr[v], p.ptr[v + 1]):
        w = p.nbr[e]
        s.unp[w] -= 1
        if s.top[w] < t:
            s.tv[k] = w
            s.to[k] = s.top[w]
            s.top[w] = t
            k += 1
    s.tp[d + 1] = k
    c = s.ctp[d]
    for e in range(p.vptr[v], p.vptr[v + 1]):
        cl = p.vcl[e]
        s.remr[cl] -= p.rsz[v]
        if s.hi[cl] < t:
            s.chv[c] = cl
            s.cho[c] = s.hi[cl]
            s.hi[cl] = t
            c += 1
    s.ctp[d + 1] = c


@_inline
def _undo(st, v, d):
    """Take back `_place(st, v, q, d)`."""
    p, s = st.part, st.s
    for k in range(s.tp[d + 1] - 1, s.tp[d] - 1, -1):
        s.top[s.tv[k]] = s.to[k]
    for c in range(s.ctp[d + 1] - 1, s.ctp[d] - 1, -1):
        s.hi[s.chv[c]] = s.cho[c]
    for e in range(p.ptr[v], p.ptr[v + 1]):
        s.unp[p.nbr[e]] += 1
    for e in range(p.vptr[v], p.vptr[v + 1]):
        s.remr[p.vcl[e]] += p.rsz[v]
    last = s.reg[R_ULEN]
    i = s.ui[d]
    w = s.ulist[i]
    s.ulist[i] = v
    s.upos[v] = i
    s.ulist[last] = w
    s.upos[w] = last
    s.reg[R_ULEN] = last + 1
    s.placed[v] = 0
    s.reg[R_H1] ^= _mix(v * 0x2545F4914F6CDD1D + 1)
    s.reg[R_H2] ^= _mix(v * 0x5851F42D4C957F2D + 2)


@_kernel
def bound(st, d, f, last, cap):
    """The node's lower bound on the peak (INF: dead), `d` buffers placed, the last one `last`
    at offset f (see the module docstring); it stops at the first term above `cap`. When all
    pass, `need[d]` keeps what some clique still holds (`next_child`'s cutoff). Cliques are
    tried in `corder`, each one found above the cap moved to the front (the next sibling
    likely fails on it too: most children fail, and then after a few cliques)."""
    p, s = st.part, st.s
    a = st.align
    b = s.pk[d]
    n_un = s.reg[R_ULEN]
    small = INF
    for i in range(n_un):
        small = min(small, p.size[s.ulist[i]])
    for i in range(n_un):
        w = s.ulist[i]
        t = _up(s.top[w], a)
        if t < f or (t == f and w < last):
            if s.unp[w] == 0:
                return INF
            t = _up(f + small, a)
        s.low[w] = t
        b = max(b, t + p.size[w])
        if b > cap:
            return b
    need = 0
    for k in range(len(p.corr)):
        c = s.corder[k]
        if s.remr[c] > 0:
            end = _column(st, c, f)
            if end > cap:
                j = s.cpos[c]
                other = s.corder[0]
                s.corder[0], s.corder[j] = c, other
                s.cpos[c], s.cpos[other] = 0, j
                return end
            b = max(b, end)
            need = max(need, s.remr[c] - p.corr[c])
    s.need[d] = need
    return b


@_inline
def _column(st, c, f):
    """Clique c's unplaced members stacked from the lowest offset each can take (`low`), in
    order of it (one machine, release dates: that order finishes first), above f and above
    its placed members. Those that can start at the base go first, unsorted."""
    p, s = st.part, st.s
    a = st.align
    base = _up(max(f, s.hi[c]), a)
    k = 0
    end = base
    for e in range(p.cptr[c], p.cptr[c + 1]):
        w = p.cmem[e]
        if s.placed[w] == 0:
            t = s.low[w]
            if t <= base:
                end += p.rsz[w]
                continue
            j = k
            while j > 0 and s.rel[j - 1] > t:  # insertion sort by release
                s.rel[j] = s.rel[j - 1]
                s.dur[j] = s.dur[j - 1]
                j -= 1
            s.rel[j] = t
            s.dur[j] = p.rsz[w]
            k += 1
    for j in range(k):
        end = max(end, s.rel[j]) + s.dur[j]
    return end - p.corr[c]


@_inline
def _on_larger(st, v, q):
    """v at q would sit right on a larger buffer of its class (`Part.tc`)."""
    p, s = st.part, st.s
    c = p.tc[v]
    for e in range(p.tptr[c], p.tptr[c + 1]):
        u = p.tmem[e]
        if s.placed[u] == 1 and s.pos[u] + p.size[u] == q and p.size[u] < p.size[v]:
            return True
    return False


@_kernel
def next_child(st, d, cap):
    """The next child of the node at depth d after the last one tried (key kq, kr): (buffer,
    offset), or (-1, 0) when none is left. Records the bound of what it rules out."""
    p, s = st.part, st.s
    a = st.align
    f = s.pos[s.seq[d - 1]] if d > 0 else 0
    last = s.seq[d - 1] if d > 0 else -1
    kq, kr = s.kq[d], s.kr[d]
    n_un = s.reg[R_ULEN]
    while True:
        bq, br, bv = INF, INF, -1
        m1, m2 = 0, 0
        for i in range(n_un):
            w = s.ulist[i]
            sz = p.size[w]
            if sz > m1:
                m2 = m1
                m1 = sz
            elif sz > m2:
                m2 = sz
            tw = p.twin[w]
            if tw >= 0 and s.placed[tw] == 0:
                continue
            q = _up(s.top[w], a)
            if q < f or (q == f and w < last):
                continue
            r = p.rank[w]
            if q < kq or (q == kq and r <= kr):
                continue
            if q < bq or (q == bq and r < br):
                bq, br, bv = q, r, w
        if bv < 0:
            return -1, 0
        # every child left ends above the cap, with one more buffer above it, or with what a
        # clique still holds above it (`need`: see `bound`)
        over = bq + max(m2, s.need[d])
        if over > cap:
            s.reg[R_MINP] = min(s.reg[R_MINP], over)
            return -1, 0
        kq, kr = bq, br
        s.kq[d], s.kr[d] = kq, kr
        if bq + p.size[bv] > cap:
            s.reg[R_MINP] = min(s.reg[R_MINP], bq + p.size[bv])
            continue
        if p.tc[bv] >= 0 and _on_larger(st, bv, bq):
            continue
        return bv, bq


@_kernel
def search(st, budget):
    """One resumable run of at most `budget` nodes: FOUND, EXHAUSTED or BUDGET."""
    p, s = st.part, st.s
    reg = s.reg
    n = p.size.shape[0]
    cap = reg[R_CAP]
    if reg[R_STARTED] == 0:
        reg[R_STARTED] = 1
        reg[R_DEPTH] = 0
        s.kq[0], s.kr[0], s.cnt[0], s.disc[0] = -1, -1, 0, 0
        b = bound(st, 0, 0, -1, cap)
        if b > cap:
            reg[R_MINP] = min(reg[R_MINP], b)
            return EXHAUSTED
        if n == 0:
            reg[R_BEST] = 0
            return FOUND
        key(st, 0, 0, -1)
    d = reg[R_DEPTH]
    if reg[R_LEAF] == 1:  # resumed after FOUND: take the last buffer back, go on
        reg[R_LEAF] = 0
        d -= 1
        v = s.seq[d]
        s.kq[d], s.kr[d] = s.pos[v], p.rank[v]
        _undo(st, v, d)
    nodes = 0
    while True:
        if nodes >= budget:
            reg[R_DEPTH] = d
            return BUDGET
        v, q = next_child(st, d, cap)
        if v >= 0 and st.max_disc >= 0 and s.disc[d] + s.cnt[d] > st.max_disc:
            reg[R_CUT] = 1  # a discrepancy cut: EXHAUSTED is no proof now
            v = -1
        if v < 0:
            if st.max_disc < 0:
                remember(st, d, cap)
            if d == 0:
                reg[R_DEPTH] = 0
                return EXHAUSTED
            d -= 1
            u = s.seq[d]
            _undo(st, u, d)
            continue
        child_disc = s.disc[d] + s.cnt[d]
        s.cnt[d] += 1
        nodes += 1
        reg[R_NODES] += 1
        _place(st, v, q, d)
        if d + 1 == n:
            reg[R_BEST] = s.pk[n]
            for i in range(n):
                s.best[i] = s.pos[i]
            reg[R_LEAF] = 1
            reg[R_DEPTH] = n
            return FOUND
        b = bound(st, d + 1, q, v, cap)
        if b <= cap and st.memo.shape[0] > 0:
            key(st, d + 1, q, v)
            failed = recall(st, d + 1)
            if failed >= cap:
                b = failed + 1
                reg[R_HITS] += 1
        if b > cap:
            if b < INF:
                reg[R_MINP] = min(reg[R_MINP], b)
            _undo(st, v, d)
            continue
        d += 1
        s.kq[d], s.kr[d], s.cnt[d], s.disc[d] = -1, -1, 0, child_disc


@njit(cache=True)
def greedy_cliques(ptr, nbr, weight, seeds, budget):
    """For each seed, a maximal clique grown greedily by weight (CSR: ptr, members); the seeds
    after the one at which the work (candidates scanned, neighbours marked) passes `budget`
    get none (the CSR then ends there)."""
    n = len(weight)
    stamp = np.zeros(n, np.int64)
    cand = np.empty(n, np.int64)
    out_ptr = np.zeros(len(seeds) + 1, np.int64)
    room = 0
    for k in range(len(seeds)):
        room += ptr[seeds[k] + 1] - ptr[seeds[k]] + 1  # a clique of v: v and neighbours
    out = np.empty(room, np.int64)
    tick = 0
    at = 0
    work = 0
    for k in range(len(seeds)):
        if work > budget:
            return out_ptr[: k + 1], out[:at]
        v = seeds[k]
        out[at] = v
        m = 1
        nc = 0
        for e in range(ptr[v], ptr[v + 1]):
            cand[nc] = nbr[e]
            nc += 1
        while nc > 0:
            best = 0
            for j in range(1, nc):
                if weight[cand[j]] > weight[cand[best]]:
                    best = j
            u = cand[best]
            out[at + m] = u
            m += 1
            tick += 1
            work += 2 * nc + ptr[u + 1] - ptr[u]
            for e in range(ptr[u], ptr[u + 1]):
                stamp[nbr[e]] = tick
            keep = 0
            for j in range(nc):
                if stamp[cand[j]] == tick:
                    cand[keep] = cand[j]
                    keep += 1
            nc = keep
        out[at : at + m] = np.sort(out[at : at + m])
        at += m
        out_ptr[k + 1] = at
    return out_ptr, out[:at]


@njit(cache=True)
def components(ptr, nbr, alive):
    """Connected components of the vertices with `alive[v]` (edges to others ignored): a label
    per vertex (-1 for the others), labels 0.. in order of their smallest vertex."""
    n = len(alive)
    label = np.full(n, -1, np.int64)
    queue = np.empty(n, np.int64)
    count = 0
    for s in range(n):
        if not alive[s] or label[s] >= 0:
            continue
        label[s] = count
        head, tail = 0, 1
        queue[0] = s
        while head < tail:
            v = queue[head]
            head += 1
            for e in range(ptr[v], ptr[v + 1]):
                w = nbr[e]
                if alive[w] and label[w] < 0:
                    label[w] = count
                    queue[tail] = w
                    tail += 1
        count += 1
    return label
