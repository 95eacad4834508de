"""Layout's solver pre-processing: classes of identical components of sink elements.

Shared by `local` (heuristics/layout.py) and the exact models (models/layout.py). Through the view
ops the objective is a sum of unary terms (a sink element against a fixed label) and binary terms
(two sink elements) -- `problems.layout.terms`. Sink elements without binary terms are isolated
(each takes its best unary label in closed form); the others split into connected components of
the binary terms, which are independent sub-problems. Components with the same canonical
signature (size, unary terms with labels renamed by first appearance, links, weights) form one
`ElementClass`: solved once on a canonical copy, its labelling copied to every member.
Everything is vectorised (numpy); `reduce_terms` checks a deadline between its heavy steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tensorplan.problems.layout import Graph, Terms, barriers

BAN_VARS = 100_000
"""Components with more (element, candidate label) pairs than this get no bans (see `_bans`)."""


class OutOfTime(Exception):
    """Raised by a deadline check inside long vectorised work (caught by the solvers)."""


def linked_components(n: int, e: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Connected-component id (the smallest member) of each of n nodes under edges (e, f)."""
    parent = np.arange(n, dtype=np.int64)
    if e.size == 0:
        return parent
    while True:
        pe, pf = parent[e], parent[f]
        if np.array_equal(pe, pf):
            return parent
        lo, hi = np.minimum(pe, pf), np.maximum(pe, pf)
        np.minimum.at(parent, hi, lo)
        while True:
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt


@dataclass(frozen=True, eq=False)
class ElementClass:
    """A class of identical components: one canonical sub-problem and every component it covers.

    Canonical elements 0..size-1 (each component's elements in index order) and canonical labels
    0..num_labels-1 (the labels reaching the component, renamed by first appearance).
    `elements[i, j]` is the sink element playing canonical element j in the i-th component and
    `labels[i, c]` the label id playing canonical label c there. Terms: unary (j, label, weight)
    and links (j < k, weight), weights per component (not multiplied by the multiplicity).
    Bans (ban_j, ban_c): canonical element ban_j may not take canonical label ban_c (the barrier
    rule); a class with bans, or without labels, has one more option, index `num_labels`: a new
    label of each member's own (shared by the elements of that member that take it).
    """

    size: int
    num_labels: int
    unary_j: np.ndarray
    unary_l: np.ndarray
    unary_w: np.ndarray
    link_j: np.ndarray
    link_k: np.ndarray
    link_w: np.ndarray
    elements: np.ndarray
    labels: np.ndarray
    ban_j: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    ban_c: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @property
    def options(self) -> int:
        """Labels an element may take in the model: the candidates, plus a new one when the
        class has bans (or has no candidate at all)."""
        return self.num_labels + 1 if self.ban_j.size else max(self.num_labels, 1)

    @property
    def has_fresh(self) -> bool:
        """Whether option `num_labels` (a member's own new label) exists."""
        return self.options > self.num_labels

    @property
    def multiplicity(self) -> int:
        return int(self.elements.shape[0])

    def value(self, y: np.ndarray) -> float:
        """Value of one component under canonical labelling y (length size)."""
        return float(
            self.unary_w[y[self.unary_j] == self.unary_l].sum()
            + self.link_w[y[self.link_j] == y[self.link_k]].sum()
        )

    def bound(self) -> float:
        """Cheap upper bound of one component: every element its best unary, every link agrees."""
        best = np.zeros(self.size)
        np.maximum.at(best, self.unary_j, self.unary_w)
        return float(best.sum() + self.link_w.sum())

    def member_values(self, x: np.ndarray) -> np.ndarray:
        """Value of every member component under sink labels x."""
        xs = x[self.elements]
        out = np.zeros(self.multiplicity)
        if self.unary_j.size:
            out += ((xs[:, self.unary_j] == self.labels[:, self.unary_l]) * self.unary_w).sum(1)
        if self.link_j.size:
            out += ((xs[:, self.link_j] == xs[:, self.link_k]) * self.link_w).sum(1)
        return out

    def canonical(self, x: np.ndarray, member: int) -> np.ndarray:
        """Canonical labelling of component `member` under sink labels x; labels that are not
        candidates become canonical label 0 (never lowers the value: weights are >= 0)."""
        got = x[self.elements[member]]
        out = np.zeros(self.size, dtype=np.int64)
        if self.num_labels:  # a member's candidate labels are distinct: look them up sorted
            labs = self.labels[member]
            order = np.argsort(labs, kind="stable")
            pos = np.minimum(np.searchsorted(labs[order], got), labs.size - 1)
            has = labs[order][pos] == got
            out[has] = order[pos[has]]
            if self.ban_j.size:  # not a candidate, or a banned one: the member's new label
                out[~has] = self.num_labels
                out[self.ban_j[out[self.ban_j] == self.ban_c]] = self.num_labels
        return out


@dataclass(frozen=True, eq=False)
class Reduction:
    """The objective split into a constant, closed-form isolated elements and classes."""

    terms: Terms
    isolated_value: float  # best total of the isolated elements
    isolated_x: np.ndarray  # best label of every isolated element (-1 elsewhere / no unary)
    classes: tuple[ElementClass, ...]

    @property
    def components(self) -> int:
        return sum(k.multiplicity for k in self.classes)


def _starts(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def lexsort(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """`np.lexsort(keys)` (last key primary, stable) for non-negative integer keys, as one
    stable argsort of a combined int64 key when the keys' ranges fit (several times faster);
    the same permutation either way."""
    spans = [int(k.max()) + 1 if k.size else 1 for k in keys]
    total = 1
    for sp in spans:
        total *= sp
    if total >= 2**62 or any(k.size and int(k.min()) < 0 for k in keys):
        return np.lexsort(keys)
    combined = np.zeros(keys[0].shape, dtype=np.int64)
    for k, sp in zip(reversed(keys), reversed(spans), strict=True):
        combined *= sp
        combined += k
    return np.argsort(combined, kind="stable")


def _row_groups(rows: np.ndarray) -> np.ndarray:
    """Group id of every row of an int64 matrix (equal rows, equal ids), fast and exact.

    Rows are hashed with a fixed random linear map (wrapping uint64 arithmetic); the hash groups
    are checked row by row and a collision falls back to a lexicographic sort.
    """
    m, w = rows.shape
    if w == 0 or m <= 1:
        return np.zeros(m, dtype=np.int64)
    mult = np.random.default_rng(12345).integers(1, 2**63, size=w, dtype=np.uint64) | np.uint64(1)
    h = (rows.view(np.uint64) * mult).sum(axis=1, dtype=np.uint64)
    h ^= h >> np.uint64(29)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if np.array_equal(rows, rows[first[inv]]):
        return inv
    o = np.lexsort(rows.T[::-1])
    r = rows[o]
    new = np.ones(m, dtype=bool)
    new[1:] = (r[1:] != r[:-1]).any(axis=1)
    out = np.empty(m, dtype=np.int64)
    out[o] = np.cumsum(new) - 1
    return out


def reduce_terms(
    tm: Terms, out_of_time: Callable[[], None] = lambda: None, graph: Graph | None = None
) -> Reduction:
    """Group the linked sink elements into classes of identical components, vectorised.

    Components with the same canonical signature (size, unary terms in (element, -weight, label)
    order with labels renamed by first appearance, links, weights) form one class.
    `out_of_time()` is called between the heavy steps and may raise `OutOfTime`. With the
    instance's `graph`, the barrier rule's bans (an element, a candidate label it may never take)
    are part of the signature and of each class.
    """
    n = tm.n
    linked = np.zeros(n, dtype=bool)
    linked[tm.bin_e] = True
    linked[tm.bin_f] = True
    iso_x = np.full(n, -1, dtype=np.int64)
    iso_value = 0.0
    if tm.unary_e.size:
        us = np.searchsorted(tm.unary_e, np.arange(n + 1))
        has = us[1:] > us[:-1]
        best = np.zeros(n)
        best[has] = np.maximum.reduceat(tm.unary_w, us[:-1][has])
        is_max = tm.unary_w >= best[tm.unary_e] - 1e-12
        idx = np.flatnonzero(is_max)[::-1]  # the first maximal term of each element wins
        iso_x[tm.unary_e[idx]] = tm.unary_l[idx]
        iso_x[linked] = -1
        iso_value = float(best[~linked].sum())
    if tm.bin_e.size == 0:
        return Reduction(tm, iso_value, iso_x, ())
    out_of_time()
    comp = linked_components(n, tm.bin_e, tm.bin_f)
    out_of_time()
    nodes = np.flatnonzero(linked)
    order = nodes[np.argsort(comp[nodes], kind="stable")]  # by component, then element
    out_of_time()
    new = np.ones(order.size, dtype=bool)
    new[1:] = comp[order[1:]] != comp[order[:-1]]
    cstart = np.flatnonzero(new)
    ncomp = cstart.size
    cid_o = np.cumsum(new) - 1
    cid = np.full(n, -1, dtype=np.int64)
    cid[order] = cid_o
    pos = np.zeros(n, dtype=np.int64)
    pos[order] = np.arange(order.size) - cstart[cid_o]
    csize = np.diff(np.append(cstart, order.size))
    # unary terms of linked elements, per component in (element, -weight, label) order
    sel = linked[tm.unary_e]
    ue, ul, uw = tm.unary_e[sel], tm.unary_l[sel], tm.unary_w[sel]
    uc, uj = cid[ue], pos[ue]
    wrank = np.unique(-uw, return_inverse=True)[1].reshape(-1)  # same order as -uw
    out_of_time()
    o = lexsort((ul, wrank, uj, uc))
    uc, uj, ul, uw = uc[o], uj[o], ul[o], uw[o]
    out_of_time()
    # canonical label: rank of the label's first appearance within its component
    big = int(ul.max()) + 1 if ul.size else 1
    uniq, first, inv = np.unique(uc * big + ul, return_index=True, return_inverse=True)
    out_of_time()
    pc = uniq // big
    o2 = lexsort((first, pc))
    nlab = np.bincount(pc, minlength=ncomp)
    lstart = _starts(nlab)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[o2] = np.arange(uniq.size) - lstart[pc[o2]]
    ucanon = rank[inv.reshape(-1)]
    comp_labels = (uniq % big)[o2]  # per component, in canonical order
    ustart = _starts(np.bincount(uc, minlength=ncomp))
    unum = np.diff(ustart)
    out_of_time()
    bj, bc, bstart = _bans(
        graph, comp_labels, nlab, lstart, order, cstart, csize, cid, pos, out_of_time
    )
    bnum = np.diff(bstart)
    out_of_time()
    # links, per component in (j, k) order
    lc, lj, lk, lw = cid[tm.bin_e], pos[tm.bin_e], pos[tm.bin_f], tm.bin_w
    o3 = lexsort((lk, lj, lc))
    lj, lk, lw = lj[o3], lk[o3], lw[o3]
    lnstart = _starts(np.bincount(lc, minlength=ncomp))
    lnum = np.diff(lnstart)
    uwb, lwb = uw.view(np.int64), lw.view(np.int64)  # exact equality of the weights
    # group by shape (size, unary count, link count), then by content within a shape
    shape_rows = np.stack([csize, unum, lnum, bnum], axis=1).astype(np.int64)
    out_of_time()
    sinv = _row_groups(shape_rows)
    by_shape = np.argsort(sinv, kind="stable")
    sbound = _starts(np.bincount(sinv))
    found: list[tuple[int, ElementClass]] = []
    for s in range(sbound.size - 1):
        out_of_time()
        group = by_shape[sbound[s] : sbound[s + 1]]  # components, ascending
        size, nu, nl, nb = (int(v) for v in shape_rows[group[0]])
        ui = ustart[group][:, None] + np.arange(nu)
        li = lnstart[group][:, None] + np.arange(nl)
        bi = bstart[group][:, None] + np.arange(nb)
        rows = np.concatenate(
            [uj[ui], ucanon[ui], uwb[ui], lj[li], lk[li], lwb[li], bj[bi], bc[bi]], axis=1
        )
        ginv = _row_groups(rows)
        by_class = np.argsort(ginv, kind="stable")
        gb = _starts(np.bincount(ginv))
        for q in range(gb.size - 1):
            if q % 256 == 255:
                out_of_time()
            members = group[by_class[gb[q] : gb[q + 1]]]
            rep = int(members[0])
            nl_rep = int(nlab[rep])
            u0, u1 = ustart[rep], ustart[rep + 1]
            l0, l1 = lnstart[rep], lnstart[rep + 1]
            b0, b1 = bstart[rep], bstart[rep + 1]
            k = ElementClass(
                size,
                nl_rep,
                uj[u0:u1],
                ucanon[u0:u1],
                uw[u0:u1],
                lj[l0:l1],
                lk[l0:l1],
                lw[l0:l1],
                order[cstart[members][:, None] + np.arange(size)],
                comp_labels[lstart[members][:, None] + np.arange(nl_rep)],
                bj[b0:b1],
                bc[b0:b1],
            )
            found.append((rep, k))
    found.sort(key=lambda t: t[0])
    return Reduction(tm, iso_value, iso_x, tuple(k for _, k in found))


def _bans(
    graph: Graph | None,
    comp_labels: np.ndarray,
    nlab: np.ndarray,
    lstart: np.ndarray,
    order: np.ndarray,
    cstart: np.ndarray,
    csize: np.ndarray,
    cid: np.ndarray,
    pos: np.ndarray,
    out_of_time: Callable[[], None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The barrier rule's bans per component, in (element, label) order: canonical element j may
    never take the component's canonical label c (a barrier's label, the barrier depending on
    the element). Returns (j, c, start offsets per component).

    Only components of at most `BAN_VARS` (element, label) pairs get bans: a larger one is never
    modelled exactly in practice (it keeps its warm start), and its labelling is repaired after
    the search instead (`problems.layout.repair_barriers`)."""
    ncomp = nlab.size
    empty = np.empty(0, dtype=np.int64)
    if graph is None or comp_labels.size == 0 or not barriers(graph).ids:
        return empty, empty.copy(), np.zeros(ncomp + 1, dtype=np.int64)
    bs = barriers(graph)
    entry_comp = np.repeat(np.arange(ncomp), nlab)  # component of each candidate label entry
    owner = bs.owner(comp_labels)
    small = (csize * nlab <= BAN_VARS)[entry_comp]
    entries = np.flatnonzero((owner >= 0) & small)
    js, cs, comps_out = [empty], [empty], [empty]
    for b in np.unique(owner[entries]).tolist():
        out_of_time()
        sel = entries[owner[entries] == b]  # b's label entries, by component
        comps = np.unique(entry_comp[sel])
        sizes = csize[comps]
        within = np.arange(int(sizes.sum())) - np.repeat(_starts(sizes)[:-1], sizes)
        elems = order[np.repeat(cstart[comps], sizes) + within]
        deps = bs.depends_on(b)
        at = np.minimum(np.searchsorted(deps, elems), max(deps.size - 1, 0))
        hit = elems[deps[at] == elems] if deps.size else empty
        if not hit.size:
            continue
        # each banned element against each of b's labels in its component
        per = np.bincount(entry_comp[sel], minlength=ncomp)
        first = _starts(per)
        hc = cid[hit]
        reps = per[hc]
        e = np.repeat(hit, reps)
        k = np.repeat(first[hc], reps) + (
            np.arange(int(reps.sum())) - np.repeat(_starts(reps)[:-1], reps)
        )
        entry = sel[k]
        js.append(pos[e])
        cs.append(entry - lstart[entry_comp[entry]])
        comps_out.append(cid[e])
    j, c, comp = np.concatenate(js), np.concatenate(cs), np.concatenate(comps_out)
    o = lexsort((c, j, comp))
    return j[o], c[o], _starts(np.bincount(comp, minlength=ncomp))
