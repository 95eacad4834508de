"""Exact fusion clustering that scales (solver `strong`): a multicut MIP with cut loops on HiGHS.

The seed's ILP (`models/fusion.py`) relies on big-M cluster positions pi for everything: its
relaxation can set every x_ij fractional, and the proven bound stalls beyond ~50 bindings. Here the
same variables (x_ij = 1 when the fusable pair i, j is split; c_i; pi_i) carry the seed's objective,
and the bound comes from the structure of clusterings instead:

Design notes (how and why): docs/design/fusion_strong.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from numba import njit

from tensorplan.models.backends import exact_result, highs_run, solver_gap
from tensorplan.models.fusion_local import repair as local_repair
from tensorplan.problems.core import EXACT, Options, Reporter, Result, Solver, Status, stopwatch
from tensorplan.problems.fusion import (
    FusionInstance,
    Graph,
    check,
    labels_of,
    objective,
    solution_from_labels,
    topo_clusters,
)

EPS = 1e-6
LP_SHARE = 0.35  # of each part's time for the LP cut loop
MAX_CUTS = 4000  # per round
STAR_TRIES = 8  # greedy star separation starts per node
MAX_MIP_ROWS = 35_000  # stage 2's MIP is skipped above: one HiGHS root round can take ~20 s
HEURISTIC_EFFORT = 0.3  # HiGHS default 0.05: the start is often all it has
MIN_ROUND_S = 0.1  # the least time worth a MIP round of a part


def _key(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


@dataclass(frozen=True)
class Reduced:
    """What can still happen after the reduction: pairs that may fuse, arrays that may contract,
    and the objective every clustering pays for the rest (beyond the seed's optimised form)."""

    pairs: frozenset[tuple[int, int]]
    contract: tuple[int, ...]
    constant: int
    reach: tuple[int, ...]  # bitset of nodes reachable from i


def reduce(g: Graph) -> Reduced:
    """Drop pairs that can never fuse: a node between them that cannot join both, or a rate chain
    through a dropped pair; iterate to a fixpoint."""
    n = g.n
    reach = [0] * n
    for i in range(n - 1, -1, -1):
        for j in g.succ[i]:
            reach[i] |= (1 << j) | reach[j]
    reached = [0] * n
    for i in range(n):
        for j in g.pred[i]:
            reached[i] |= (1 << j) | reached[j]
    pairs = set(g.fusable)
    mask = [0] * n
    for i, j in pairs:
        mask[i] |= 1 << j
        mask[j] |= 1 << i
    changed = True
    while changed:
        changed = False
        for i, j in list(pairs):
            a, b = (i, j) if (reach[i] >> j) & 1 else (j, i)
            between = reach[a] & reached[b]
            bad = bool(between & ~(mask[a] & mask[b]))
            bad = bad or any(q not in pairs for q in g.requires.get((i, j), ()))
            if bad:
                pairs.discard((i, j))
                mask[i] &= ~(1 << j)
                mask[j] &= ~(1 << i)
                changed = True
    contract = tuple(i for i in g.contractible if all(_key(i, j) in pairs for j in g.succ[i]))
    constant = sum(g.weight[p] for p in g.fusable if p not in pairs)
    constant += g.n * (len(g.contractible) - len(contract))
    return Reduced(frozenset(pairs), contract, constant, tuple(reach))


def skeleton(g: Graph, red: Reduced) -> frozenset[tuple[int, int]]:
    """The pairs the heavy stage models: weight N^2 pairs, and every pair in a rate chain (with
    what it requires), so that the rate rule holds on the clusters it builds."""
    keep = {p for p in red.pairs if g.weight[p] > 1 or g.requires.get(p)}
    todo = list(keep)
    while todo:
        for q in g.requires.get(todo.pop(), ()):
            if q not in keep:
                keep.add(q)
                todo.append(q)
    return frozenset(keep)


def components(g: Graph, pairs: frozenset[tuple[int, int]]) -> list[list[int]]:
    """Node sets of the connected components of edges plus `pairs` that hold at least one pair."""
    parent = list(range(g.n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in list(g.edges) + list(pairs):
        a, b = find(i), find(j)
        if a != b:
            parent[a] = b
    groups: dict[int, list[int]] = {}
    for i in range(g.n):
        groups.setdefault(find(i), []).append(i)
    has_pair = {find(i) for i, _ in pairs}
    return sorted((v for k, v in groups.items() if k in has_pair), key=len)


# --- separation (compiled) ------------------------------------------------------------------------


@njit(cache=True)
def _shortest(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All-pairs shortest paths under lengths w (inf: no pair), capped at 1; next-hop matrix."""
    n = w.shape[0]
    d = w.copy()
    nxt = np.full((n, n), -1, dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if d[i, j] < np.inf:
                nxt[i, j] = j
    for k in range(n):
        for i in range(n):
            dik = d[i, k]
            if dik >= 1.0:
                continue
            for j in range(n):
                v = dik + d[k, j]
                if v < d[i, j]:
                    d[i, j] = v
                    nxt[i, j] = nxt[i, k]
    return d, nxt


@njit(cache=True)
def _convexity(x: np.ndarray, between: np.ndarray, eps: float) -> np.ndarray:
    """Violated convexity rows x_ak <= x_ab (k between a and b): rows of (a, b, k, side).
    x: a pair's value, inf when it can never fuse, -1 when it is free (not modelled)."""
    n = x.shape[0]
    out = []
    for a in range(n):
        for b in range(n):
            if not 0.0 <= x[a, b] < np.inf or a == b:
                continue
            for k in range(n):
                if between[a, b, k]:
                    if np.inf > x[a, k] > x[a, b] + eps:
                        out.append((a, b, k, 0))
                    if np.inf > x[k, b] > x[a, b] + eps:
                        out.append((a, b, k, 1))
    res = np.empty((len(out), 4), dtype=np.int64)
    for r in range(len(out)):
        for c in range(4):
            res[r, c] = out[r][c]
    return res


@njit(cache=True)
def _two_cycles(
    x: np.ndarray, desc: np.ndarray, pa: np.ndarray, pb: np.ndarray, eps: float, limit: int
) -> np.ndarray:
    """Violated two-cluster cycle rows x_P + x_Q >= x_cross: pairs P = (a, c) and Q = (b, d) where
    {a, c} reaches {b, d} and back, so fusing both pairs needs all four in one cluster (a cross
    pair fused). Rows of (P, Q, cross a, cross b; -1 when no cross pair can fuse)."""
    n_p = pa.shape[0]
    out = []
    for p in range(n_p):
        a, c = pa[p], pb[p]
        xp = x[a, c]
        if xp > 1.0 - eps:
            continue
        for q in range(p + 1, n_p):
            b, d = pa[q], pb[q]
            if b == a or b == c or d == a or d == c:  # noqa: SIM109 (numba)
                continue
            xq = x[b, d]
            if xp + xq > 1.0 - eps:
                continue
            down = desc[a, b] or desc[a, d] or desc[c, b] or desc[c, d]
            up = desc[b, a] or desc[b, c] or desc[d, a] or desc[d, c]
            if not (down and up):
                continue
            best, u, v = -1.0, -1, -1
            free = False
            for s_ in (a, c):
                for t in (b, d):
                    if x[s_, t] == np.inf:  # can never fuse: the four can never share a cluster
                        best, u, v = 1.0, -1, -1
                        break
                    if x[s_, t] < 0.0:
                        free = True
                    elif x[s_, t] > best:
                        best, u, v = x[s_, t], s_, t
                if u < 0 and best == 1.0:
                    break
            if free and u >= 0:
                continue  # a free cross pair: the row is not expressible
            if xp + xq < best - eps:
                out.append((p, q, u, v, int((best - xp - xq) * 1e6)))
                if len(out) >= limit:
                    break
        if len(out) >= limit:
            break
    res = np.empty((len(out), 5), dtype=np.int64)
    for r in range(len(out)):
        for k in range(5):
            res[r, k] = out[r][k]
    return res


@njit(cache=True)
def _stars(y: np.ndarray, free: np.ndarray, eps: float, tries: int) -> np.ndarray:
    """Violated star rows (2-partition inequalities with one side a single node v): v's cluster
    holds k nodes of a set T only if those k are pairwise together, so
    sum_{t in T} y_vt - sum_{t < t' in T} y_tt' <= 1, with y = 1 - x (0 for a pair that can never
    fuse: for T pairwise never this says v joins at most one of them). y[v, s] is 0 when the pair
    is not modelled; `free` pairs (modelled nowhere) never both enter T. Greedy from each of v's
    `tries` most fused partners, adding a node while its marginal term is positive. Returns a flat
    array: v, |T|, T..., v, |T|, T..."""
    n = y.shape[0]
    out = []
    for v in range(n):
        cand = np.argsort(-y[v], kind="mergesort")
        m = 0
        while m < n and y[v, cand[m]] > eps:
            m += 1
        if m < 2:
            continue
        for t in range(min(tries, m)):
            chosen = [cand[t]]
            total = y[v, cand[t]]
            for q in range(m):
                s = cand[q]
                if q == t:
                    continue
                gain = y[v, s]
                for u in chosen:
                    if free[s, u]:
                        gain = -1.0
                        break
                    gain -= y[s, u]
                if gain > eps:
                    chosen.append(s)
                    total += gain
            if total > 1.0 + 1e-4 and len(chosen) >= 2:
                out.append(v)
                out.append(len(chosen))
                for s in chosen:
                    out.append(s)
    res = np.empty(len(out), dtype=np.int64)
    for k in range(len(out)):
        res[k] = out[k]
    return res


# --- one part -------------------------------------------------------------------------------------


class PartMip:
    """The multicut MIP of one independent part, on a live HiGHS instance."""

    def __init__(
        self,
        g: Graph,
        red: Reduced,
        nodes: list[int],
        opts: Options,
        order: bool = True,
        keep: frozenset[tuple[int, int]] | None = None,
        light: bool = True,
    ) -> None:
        """`order=False` leaves out pi and its precedence rows: the LP of the cut loop, whose
        bound they barely move and whose re-solves they slow down. `keep` limits the modelled
        pairs (the others that could fuse are free: neither cost nor constraint)."""
        import highspy

        self.g, self.red, self.nodes, self.light = g, red, nodes, light
        self.local = {v: k for k, v in enumerate(nodes)}
        inside = set(nodes)
        self.pairs = sorted(p for p in red.pairs if p[0] in inside and (keep is None or p in keep))
        self.allowed = frozenset(p for p in red.pairs if p[0] in inside)  # may share a cluster
        self.contract = [i for i in red.contract if i in inside]
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("random_seed", int(opts.seed) % 2**31)
        h.setOptionValue("threads", int(opts.threads))
        h.setOptionValue("mip_rel_gap", solver_gap(opts.gap))
        h.setOptionValue("mip_abs_gap", 1 - EPS)  # integral objective
        h.setOptionValue("mip_heuristic_effort", HEURISTIC_EFFORT)
        self.h = h
        # HiGHS checks its own time limit between root separation rounds, which can take many
        # seconds on these models: a wall-clock check in its interrupt callbacks holds the limit
        self.deadline = math.inf
        h.cbSimplexInterrupt += self._interrupt
        h.cbMipInterrupt += self._interrupt
        nn = len(nodes)
        self.x = {p: k for k, p in enumerate(self.pairs)}
        base = len(self.pairs)
        self.c = {i: base + k for k, i in enumerate(self.contract)}
        base += len(self.contract)
        self.pi = {i: base + k for k, i in enumerate(nodes)} if order else {}
        ncol = base + nn if order else base
        cost = np.zeros(ncol)
        upper = np.ones(ncol)
        for p, k in self.x.items():
            cost[k] = g.weight[p] if light or g.weight[p] > 1 else 0.0
        for k in self.c.values():
            cost[k] = g.n
        for k in self.pi.values():
            upper[k] = max(nn - 1, 0)
        h.addVars(ncol, np.zeros(ncol), upper)
        h.changeColsCost(ncol, np.arange(ncol, dtype=np.int32), cost)
        self.ncol = ncol
        self.rows = 0
        big = float(max(nn, 1))
        lo: list[float] = []
        hi: list[float] = []
        idx: list[list[int]] = []
        val: list[list[float]] = []

        def row(terms: list[tuple[int, float]], lo_: float, hi_: float) -> None:
            idx.append([t for t, _ in terms])
            val.append([v for _, v in terms])
            lo.append(lo_)
            hi.append(hi_)

        inf = math.inf
        for (i, j), k in self.x.items() if order else ():
            if (i, j) in g.edges or (j, i) in g.edges:
                a, b = (i, j) if (i, j) in g.edges else (j, i)
                pa, pb = self.pi[a], self.pi[b]
                row([(pb, 1), (pa, -1), (k, -1)], 0, inf)  # x <= pi_b - pi_a
                row([(pb, 1), (pa, -1), (k, -big)], -inf, 0)  # pi_b - pi_a <= N x
            else:
                pa, pb = self.pi[i], self.pi[j]
                row([(pb, 1), (pa, -1), (k, big)], 0, inf)
                row([(pb, 1), (pa, -1), (k, -big)], -inf, 0)
        for (a, b), _fp in g.edges.items() if order else ():
            if a in inside and _key(a, b) not in self.x:
                row([(self.pi[b], 1), (self.pi[a], -1)], 1, inf)
        for p, k in self.x.items():
            for q in g.requires.get(p, ()):
                row([(k, 1), (self.x[q], -1)], 0, inf)  # x_p >= x_q
        for i, k in self.c.items():
            for j in g.succ[i]:
                row([(k, 1), (self.x[_key(i, j)], -1)], 0, inf)
        self.base_rows: int | None = None
        self._add_rows(lo, hi, idx, val)
        self.base_rows = self.rows  # the model's own rows; every later row is logged
        self.row_log: list[tuple[float, list, list[float]] | None] = []
        # cuts found so far, by pair (i, j) or contractible node i, to hand to another model
        self.cut_rows: list[tuple[float, list[tuple[int, int] | int], list[float]]] = []
        self.key_of = {k: p for p, k in self.x.items()} | {k: i for i, k in self.c.items()}
        # dense views for separation
        self.never = np.ones((nn, nn), dtype=np.bool_)
        self.free = np.zeros((nn, nn), dtype=np.bool_)
        for i, j in red.pairs:
            if i in inside:
                a, b = self.local[i], self.local[j]
                self.never[a, b] = self.never[b, a] = False
                if (i, j) not in self.x:
                    self.free[a, b] = self.free[b, a] = True
        np.fill_diagonal(self.never, False)
        self.heavy = np.zeros((nn, nn), dtype=np.bool_)
        for i, j in self.pairs:
            if g.weight[(i, j)] > 1:
                a, b = self.local[i], self.local[j]
                self.heavy[a, b] = self.heavy[b, a] = True
        self.between = self._between()
        self.desc = np.zeros((nn, nn), dtype=np.bool_)
        for i in nodes:
            r = red.reach[i]
            for j in nodes:
                if (r >> j) & 1:
                    self.desc[self.local[i], self.local[j]] = True
        self.pa = np.asarray([self.local[i] for i, _ in self.pairs], dtype=np.int64)
        self.pb = np.asarray([self.local[j] for _, j in self.pairs], dtype=np.int64)
        self.cuts = 0
        self.seen: set[tuple[int, ...]] = set()
        self.stars = True  # separate star rows too (kept apart in star_rows)
        self.star_rows: list[tuple[float, list[tuple[int, int] | int], list[float]]] = []
        self.overrun = 0.0  # worst time HiGHS ran past its limit (s)
        self.cold_lp_s: float | None = None  # the first LP solve, from scratch (s)

    def _between(self) -> np.ndarray:
        """between[a, b, k]: k lies on a path a -> k -> b, for pairs (a, b) still fusable."""
        nn = len(self.nodes)
        out = np.zeros((nn, nn, nn), dtype=np.bool_) if nn <= 260 else None
        if out is None:
            return np.zeros((0, 0, 0), dtype=np.bool_)
        reach = self.red.reach
        reached = [0] * self.g.n
        for v in range(self.g.n):
            for u in self.g.pred[v]:
                reached[v] |= (1 << u) | reached[u]
        for i, j in self.pairs:
            a, b = (i, j) if (reach[i] >> j) & 1 else (j, i)
            mid = reach[a] & reached[b]
            while mid:
                low = mid & -mid
                k = low.bit_length() - 1
                mid ^= low
                out[self.local[a], self.local[b], self.local[k]] = True
        return out

    def _add_rows(self, lo, hi, idx, val) -> None:
        if not lo:
            return
        starts = np.zeros(len(lo), dtype=np.int32)
        flat_i: list[int] = []
        flat_v: list[float] = []
        for r, (ii, vv) in enumerate(zip(idx, val, strict=True)):
            starts[r] = len(flat_i)
            flat_i += ii
            flat_v += vv
        self.h.addRows(
            len(lo),
            np.asarray(lo, dtype=float),
            np.asarray(hi, dtype=float),
            len(flat_i),
            starts,
            np.asarray(flat_i, dtype=np.int32),
            np.asarray(flat_v, dtype=float),
        )
        self.rows += len(lo)
        if self.base_rows is not None:
            for r_lo, r_hi, ii, vv in zip(lo, hi, idx, val, strict=True):
                keys = [self.key_of.get(c) for c in ii]
                ok = r_hi == math.inf and all(k is not None for k in keys)
                self.row_log.append((float(r_lo), keys, list(vv)) if ok else None)

    def tight_rows(self, tol: float = 1e-6) -> list[tuple[float, list, list[float]]]:
        """The cut rows (lower-bounded rows added after the model's own) that hold with equality
        at the last LP solution: with the others dropped the LP optimum stays the same, and a
        fresh model holding only these solves its root far faster than one with every cut."""
        activity = np.asarray(self.h.getSolution().row_value, dtype=float)
        out = []
        base = self.base_rows or 0  # rows are logged only once it is set
        for r, entry in enumerate(self.row_log):
            if entry is not None and activity[base + r] <= entry[0] + tol:
                out.append(entry)
        return out

    def _xmatrix(self, values: np.ndarray) -> np.ndarray:
        nn = len(self.nodes)
        w = np.full((nn, nn), np.inf)
        np.fill_diagonal(w, 0.0)
        for (i, j), k in self.x.items():
            a, b = self.local[i], self.local[j]
            w[a, b] = w[b, a] = max(0.0, float(values[k]))
        return w

    def separate(self, values: np.ndarray, limit: int = MAX_CUTS, light: bool = True) -> int:
        """Add the most violated cycle and convexity inequalities at `values`; returns how many.
        `light=False` skips cycles closed by a weight-1 pair (they move the bound by < 1 each)."""
        w = self._xmatrix(values)
        d, nxt = _shortest(w)
        nn = len(self.nodes)
        need = np.where(self.never, 1.0, np.where(np.isfinite(w), w, 0.0))
        if not light:
            need = np.where(self.heavy | self.never, need, 0.0)
        viol = need - d
        np.fill_diagonal(viol, 0.0)
        a_idx, b_idx = np.nonzero(np.triu(viol > 1e-4))
        order = np.argsort(-viol[a_idx, b_idx], kind="stable")
        lo: list[float] = []
        hi: list[float] = []
        idx: list[list[int]] = []
        val: list[list[float]] = []
        for t in order[:limit]:
            a, b = int(a_idx[t]), int(b_idx[t])
            path = [a]
            while path[-1] != b and len(path) <= nn:
                path.append(int(nxt[path[-1], b]))
            terms = [self.x[_key(self.nodes[u], self.nodes[v])] for u, v in pairwise(path)]
            if self.never[a, b]:
                sig = (-1, *sorted(terms))
                if sig in self.seen:
                    continue
                idx.append(terms)
                val.append([1.0] * len(terms))
                lo.append(1.0)
            else:
                k = self.x[_key(self.nodes[a], self.nodes[b])]
                sig = (k, *sorted(terms))
                if sig in self.seen:
                    continue
                idx.append([*terms, k])
                val.append([1.0] * len(terms) + [-1.0])
                lo.append(0.0)
            self.seen.add(sig)
            hi.append(math.inf)
        xs = np.where(self.never, np.inf, np.where(self.free, -1.0, np.minimum(w, 1.0)))
        if self.between.size:
            for a, b, k, side in _convexity(xs, self.between, 1e-4)[: max(0, limit - len(lo))]:
                u, v = (a, k) if side == 0 else (k, b)
                ku = self.x[_key(self.nodes[u], self.nodes[v])]
                kab = self.x[_key(self.nodes[a], self.nodes[b])]
                sig = (-2, ku, kab)
                if sig in self.seen:
                    continue
                self.seen.add(sig)
                idx.append([kab, ku])
                val.append([1.0, -1.0])
                lo.append(0.0)
                hi.append(math.inf)
        if limit > 0:
            found = _two_cycles(xs, self.desc, self.pa, self.pb, 1e-4, 50 * limit)
            found = found[np.argsort(-found[:, 4], kind="stable")[: limit // 2]]
            for p, q, u, v, _ in found:
                kp, kq = self.x[self.pairs[p]], self.x[self.pairs[q]]
                if u < 0:
                    idx.append([kp, kq])
                    val.append([1.0, 1.0])
                    lo.append(1.0)
                else:
                    ku = self.x[_key(self.nodes[u], self.nodes[v])]
                    idx.append([kp, kq, ku])
                    val.append([1.0, 1.0, -1.0])
                    lo.append(0.0)
                hi.append(math.inf)
        star_lo: list[float] = []
        star_idx: list[list[int]] = []
        star_val: list[list[float]] = []
        if self.stars:
            y = np.where(np.isfinite(w) & ~self.free, 1.0 - np.minimum(w, 1.0), 0.0)
            np.fill_diagonal(y, 0.0)
            flat = _stars(y, self.free, 1e-6, STAR_TRIES)
            pos = 0
            while pos < len(flat):
                v, size = int(flat[pos]), int(flat[pos + 1])
                members = [int(s_) for s_ in flat[pos + 2 : pos + 2 + size]]
                pos += 2 + size
                # sum x_vt - sum x_tt' (modelled pairs in T) >= |T| - (their number) - 1
                terms = [self.x[_key(self.nodes[v], self.nodes[t])] for t in members]
                inner = [
                    self.x[_key(self.nodes[t], self.nodes[u])]
                    for k, t in enumerate(members)
                    for u in members[k + 1 :]
                    if not self.never[t, u]
                ]
                sig = (-3, *sorted(terms), -4, *sorted(inner))
                if sig in self.seen:
                    continue
                self.seen.add(sig)
                star_lo.append(float(len(terms) - len(inner) - 1))
                star_idx.append(terms + inner)
                star_val.append([1.0] * len(terms) + [-1.0] * len(inner))
            hi_s = [math.inf] * len(star_lo)
            self._add_rows(star_lo, hi_s, star_idx, star_val)
            self.star_rows += [
                (r_lo, [self.key_of[k] for k in r_idx], r_val)
                for r_lo, r_idx, r_val in zip(star_lo, star_idx, star_val, strict=True)
            ]
            self.cuts += len(star_lo)
        self._add_rows(lo, hi, idx, val)
        self.cut_rows += [
            (r_lo, [self.key_of[k] for k in r_idx], r_val)
            for r_lo, r_idx, r_val in zip(lo, idx, val, strict=True)
        ]
        self.cuts += len(lo)
        return len(lo) + len(star_lo)

    def add_cuts(self, rows: list[tuple[float, list[tuple[int, int] | int], list[float]]]) -> None:
        """Rows found by another model of the same part, mapped onto this model's columns; a row
        naming a pair this model leaves free is dropped (it would not be valid here)."""
        kept = []
        for r_lo, keys, r_val in rows:
            cols = [self.x.get(key) if isinstance(key, tuple) else self.c.get(key) for key in keys]
            if all(col is not None for col in cols):
                kept.append((r_lo, cols, r_val))
        self._add_rows(
            [r[0] for r in kept], [math.inf] * len(kept), [r[1] for r in kept], [r[2] for r in kept]
        )
        self.cut_rows += rows
        self.cuts += len(rows)

    def _interrupt(self, event) -> None:
        """HiGHS callback: stop the solve once the wall clock passes the deadline."""
        if time.perf_counter() > self.deadline:
            event.interrupt()

    def run(
        self, time_limit: float, integral: bool, start: np.ndarray | None = None
    ) -> tuple[Status, np.ndarray | None, float | None, float | None]:
        """Solve the LP (integral=False) or the MIP; returns (status, values, objective, bound)."""
        import highspy

        h = self.h
        kinds = highspy.HighsVarType
        cols = np.arange(len(self.x) + len(self.c), dtype=np.int32)
        kind = kinds.kInteger if integral else kinds.kContinuous
        h.changeColsIntegrality(len(cols), cols, np.full(len(cols), int(kind), dtype=np.uint8))
        h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
        self.deadline = time.perf_counter() + max(time_limit, 0.01)
        with stopwatch() as took:
            highs_run(h, start if integral else None)
        self.deadline = math.inf
        self.overrun = max(self.overrun, took() - time_limit)
        if not integral and self.cold_lp_s is None:
            self.cold_lp_s = took()
        info = h.getInfo()
        ms = h.getModelStatus()
        has = info.primal_solution_status == 2
        values = np.asarray(h.getSolution().col_value, dtype=float) if has else None
        obj = float(info.objective_function_value) if has else None
        bound: float | None
        if integral:
            bound = float(info.mip_dual_bound)
        else:
            bound = obj if ms == highspy.HighsModelStatus.kOptimal else None
        if bound is not None and not math.isfinite(bound):
            bound = None
        status = Status.OPTIMAL if ms == highspy.HighsModelStatus.kOptimal else Status.FEASIBLE
        return status, values, obj, bound

    def value(self, lab: Mapping[int, int], light: bool = True) -> float:
        """This part's objective share under cluster labels (weight-1 pairs priced or not)."""
        g = self.g
        total = sum(
            g.weight[p] for p in self.x if lab[p[0]] != lab[p[1]] and (light or g.weight[p] > 1)
        )
        return total + g.n * sum(1 for i in self.c if any(lab[j] != lab[i] for j in g.succ[i]))

    def add_band(self, lo: float, hi: float) -> None:
        """lo <= (heavy pairs + contraction part of the objective) <= hi, in units of N (both
        weights are multiples of N, so the bounds round inward); and the number H of split heavy
        pairs alone: N^2 H <= hi and N^2 H + N (contractible nodes) >= lo. With weight-1 pairs
        and contraction under N^2 in total, this pins H to the stage-1 optimum's."""
        n = self.g.n
        terms = [(k, float(n)) for p, k in self.x.items() if self.g.weight[p] > 1]
        terms += [(k, 1.0) for k in self.c.values()]
        heavy = [k for p, k in self.x.items() if self.g.weight[p] > 1]
        # and the count of split heavy pairs alone: N^2 H <= hi, N^2 H + N |c| >= lo
        self._add_rows(
            [math.ceil(lo / n - 1e-6), math.ceil((lo - n * len(self.c)) / n**2 - 1e-6)],
            [math.floor(hi / n + 1e-6), math.floor(hi / n**2 + 1e-6)],
            [[t for t, _ in terms], heavy],
            [[v for _, v in terms], [1.0] * len(heavy)],
        )

    def start_vector(self, lab: Mapping[int, int] | Sequence[int]) -> np.ndarray:
        """Column values of a legal clustering (cluster rank as pi)."""
        v = np.zeros(self.ncol)
        for (i, j), k in self.x.items():
            v[k] = float(lab[i] != lab[j])
        for i, k in self.c.items():
            v[k] = float(any(lab[j] != lab[i] for j in self.g.succ[i]))
        ranks = {c: r for r, c in enumerate(sorted({lab[i] for i in self.nodes}))}
        for i, k in self.pi.items():
            v[k] = float(ranks[lab[i]])
        return v

    def cycle_cuts(self, labels: Mapping[int, int]) -> int:
        """For a transitive solution whose clusters form a cycle C1 -> C2 -> ... -> C1 (edges
        u_t -> v_t, u_t in C_t, v_t in C_t+1), the cycle needs every v_t fused with u_t+1: add
        sum x(v_t, u_t+1) >= 1 for one cycle per strongly connected group; returns how many."""
        g = self.g
        inside = set(self.nodes)
        out: dict[int, dict[int, tuple[int, int]]] = {}
        for u, v in g.edges:
            if u in inside and v in inside and labels[u] != labels[v]:
                out.setdefault(labels[u], {}).setdefault(labels[v], (u, v))
        rows = 0
        done: set[int] = set()
        for root in list(out):
            if root in done:
                continue
            # DFS for a cycle back to any node on the current path
            path: list[int] = []
            on: dict[int, int] = {}
            stack = [(root, iter(out.get(root, {})))]
            path.append(root)
            on[root] = 0
            found = None
            while stack and found is None:
                c, it = stack[-1]
                d = next(it, None)
                if d is None:
                    stack.pop()
                    done.add(path.pop())
                    on.pop(c, None)
                elif d in on:
                    found = [*path[on[d] :], d]
                elif d not in done:
                    on[d] = len(path)
                    path.append(d)
                    stack.append((d, iter(out.get(d, {}))))
            if found is None:
                continue
            edges = [out[a][b] for a, b in pairwise(found)]
            terms = []
            for (_, v), (u2, _) in zip(edges, edges[1:] + edges[:1], strict=True):
                if v != u2:
                    terms.append(self.x[_key(v, u2)])
            if terms:
                self._add_rows([1.0], [math.inf], [terms], [[1.0] * len(terms)])
                self.cut_rows.append((1.0, [self.key_of[k] for k in terms], [1.0] * len(terms)))
                self.cuts += 1
                rows += 1
            done.update(found)
        return rows

    def clusters(self, values: np.ndarray) -> tuple[dict[int, int], int]:
        """Labels from the components of {x = 0}; adds cycle inequalities for every component that
        is not a clique of fusable pairs at 0 and returns how many were added."""
        parent = {i: i for i in self.nodes}

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        rounded = np.round(values)
        for (i, j), k in self.x.items():
            if rounded[k] == 0:
                parent[find(i)] = find(j)
        labels = {i: find(i) for i in self.nodes}
        added = self.separate(rounded)
        return labels, added


def run_strong(instance: FusionInstance, opts: Options, *, name: str = "strong") -> Result:
    """Reduce, split into parts, and solve each part's multicut MIP with its cut loop."""
    from tensorplan.models.fusion import warm_start

    report = Reporter(opts, name)
    with stopwatch() as elapsed, report.ticking():  # parts tell nothing until all are done
        g = instance.graph  # built on first use: 0.4 s at 400 bindings, part of the budget
        start = warm_start(instance, opts.hint)
        report(objective(instance, start))
        lab = labels_of(instance, start)
        red = reduce(g)
        parts = components(g, red.pairs)
        labels = [-1 - i for i in range(g.n)]  # nodes outside every part stay alone
        bound = float(red.constant)
        status = Status.OPTIMAL
        counts: dict[str, int] = {
            "parts": len(parts),
            "pairs": len(red.pairs),
            "dropped_pairs": len(g.fusable) - len(red.pairs),
            "cuts": 0,
            "variables": 0,
            "constraints": 0,
        }
        message = ""
        reserve = 0.05 * opts.time_limit + 0.1  # HiGHS overruns its limit a little; wrap-up
        for k, nodes in enumerate(parts):
            share = (opts.time_limit - reserve - elapsed()) / (len(parts) - k)
            if share <= 0.05:
                status, message = Status.FEASIBLE, "time limit: later parts keep the warm start"
                for i in nodes:
                    labels[i] = lab[i]
                bound = -math.inf
                continue
            part_lab, part_status, part_bound = solve_part(g, red, nodes, opts, lab, share, counts)
            for i in nodes:
                labels[i] = (k + 1) * (g.n + 1) * 2 + part_lab[i]
            if part_status is not Status.OPTIMAL:
                status = Status.FEASIBLE
            bound = bound + part_bound if part_bound is not None else -math.inf
        sol = solution_from_labels(instance, _relabel(labels))
        if check(instance, sol):  # cannot happen for a transitive solution: keep the warm start
            sol, status, message = start, Status.FEASIBLE, "model solution failed the checker"
        stats = {"form": "multicut", **counts, "model_objective": objective(instance, sol)}
        runtime = elapsed()
    final_bound = math.ceil(bound - 1e-6) if math.isfinite(bound) else None
    return exact_result(
        name,
        "min",
        status,
        sol,
        final_bound,
        runtime,
        objective=lambda x: objective(instance, x),
        warm=start,
        message=message,
        stats=stats,
        report=report,
    )


def _relabel(labels: Sequence[int]) -> list[int]:
    ids: dict[int, int] = {}
    return [ids.setdefault(v, len(ids)) for v in labels]


def ranked(g: Graph, nodes: Sequence[int], labels: Mapping[int, int]) -> dict[int, int]:
    """Cluster labels of a part renumbered in topological order (a feasible pi)."""
    groups: dict[int, list[int]] = {}
    for i in nodes:
        groups.setdefault(labels[i], []).append(i)
    others = [[i] for i in range(g.n) if i not in labels]
    order = topo_clusters(g, list(groups.values()) + others)
    if order is None:
        raise ValueError("cyclic clustering")
    rank = {}
    for r, members in enumerate(order):
        for i in members:
            rank[i] = r
    return {i: rank[i] for i in nodes}


def solve_part(
    g: Graph,
    red: Reduced,
    nodes: list[int],
    opts: Options,
    lab: Sequence[int],
    budget: float,
    stats: dict[str, int],
) -> tuple[dict[int, int], Status, float | None]:
    """Two stages on one part; returns (labels, status, bound), labels falling back to `lab`.

    The weights are N^2 (heavy pairs), N (contraction) and 1 (the other pairs), and the weight-1
    pairs are most of the variables while adding less than one N^2 in total. Stage 1 therefore
    prices only heavy pairs and contraction (the weight-1 pairs stay as variables for the
    constraints): the LP cut loop, then MIP rounds until the integer solution is transitive. Its
    optimum V* is a lower bound, and its clustering an incumbent of value T. Stage 2 prices every
    pair, keeps all cuts, and confines the priced heavy/contraction part to [V*, T]: any better
    clustering lies there. Each stage gets MIP rounds until its solution is transitive."""
    with stopwatch() as elapsed:
        end = time.perf_counter() + budget
        keep = skeleton(g, red)
        with stopwatch() as built:
            lp = PartMip(g, red, nodes, opts, order=False, keep=keep)
            # the heavy MIP (with pi rows) and the pricing model take about three times this
            # model's set-up together: the stage-1 MIP needs that, and two cold LP solves
            setup = 3 * built()
        until = elapsed() + (budget - elapsed()) * LP_SHARE  # of what its set-up left
        lp_bound, values = _cut_loop(lp, elapsed, until, False, stats, "stage1_lp")
        best = {i: lab[i] for i in nodes}
        # LP rounding first, with all the time left: on a large part it is most of what the
        # budget buys (the MIP's set-up and rounds do not fit), on a small one it takes
        # milliseconds and the MIP follows
        rounded = repair(lp, values, end) if values is not None else None
        if time.perf_counter() + setup + 2 * (lp.cold_lp_s or 0.0) + MIN_ROUND_S > end:
            stats["stage1_lp_ms"] = stats.get("stage1_lp_ms", 0) + round(1000 * elapsed())
            if rounded is not None and part_value(g, red, nodes, rounded) < part_value(
                g, red, nodes, best
            ):
                best = rounded
            stats["cuts"] += lp.cuts
            stats["constraints"] += lp.rows
            stats["variables"] += lp.ncol
            return best, Status.FEASIBLE, None if lp_bound is None else lp_bound - 1e-6
        heavy = PartMip(g, red, nodes, opts, keep=keep, light=False)
        heavy.stars = False
        heavy.add_cuts(lp.cut_rows)  # not the star rows: they only bloat the heavy MIP
        full = PartMip(g, red, nodes, opts, order=False)  # prices clusterings; solved in stage 2
        best_value = full.value(best)
        if rounded is not None and full.value(rounded) < best_value:
            best, best_value = rounded, full.value(rounded)
        stats["stage1_lp_ms"] = stats.get("stage1_lp_ms", 0) + round(1000 * elapsed())
        margin = lp.cold_lp_s or 0.0
        st1, found, bound, repaired = _rounds(heavy, best, end, margin)
        heavy_lo = bound or 0.0  # stage 1 prices heavy pairs and contraction only: their bound
        if lp_bound is not None:
            bound = max(bound, lp_bound - 1e-6) if bound is not None else lp_bound - 1e-6
        stats["stage1_ms"] = stats.get("stage1_ms", 0) + round(1000 * elapsed())
        for cand in (found, repaired):
            if cand is not None and full.value(cand) < best_value:
                best, best_value = cand, full.value(cand)
        status = Status.FEASIBLE
        if st1 is Status.OPTIMAL and found is not None:
            if bound is not None and (best_value - bound) <= opts.gap * bound + 0.5:
                status = Status.OPTIMAL  # the heavy optimum is also the full one (or within gap)
            elif elapsed() < budget:
                band = (heavy_lo, best_value)
                lp2 = full  # the pricing model doubles as stage 2's LP
                lp2.add_cuts(heavy.cut_rows)
                lp2.add_band(*band)
                lp2.add_cuts(lp.star_rows)
                until = elapsed() + (budget - elapsed()) * LP_SHARE
                lp2_bound, values2 = _cut_loop(lp2, elapsed, until, True, stats, "stage2_lp")
                stats["stage2_lp_ms"] = stats.get("stage2_lp_ms", 0) + round(1000 * elapsed())
                if lp2_bound is not None:  # a relaxation of every clustering better than best
                    bound = max(bound or 0.0, min(lp2_bound - 1e-6, best_value))
                if values2 is not None:  # LP rounding: often the optimum once the stars are in
                    rounded = repair(lp2, values2, end - setup / 3 - MIN_ROUND_S)
                    if full.value(rounded) < best_value:
                        best, best_value = rounded, full.value(rounded)
                found2: dict[int, int] | None
                if bound is not None and best_value <= math.ceil(bound - 1e-6) + 0.5:
                    st2, found2, bound2, repaired2 = Status.OPTIMAL, best, None, None
                elif time.perf_counter() + setup / 3 > end:  # no time to build stage 2's MIP
                    st2, found2, bound2, repaired2 = Status.FEASIBLE, None, None, None
                else:
                    # the MIP on a fresh model with the band and only the LP's tight rows (the
                    # others come back lazily if an integer solution violates them); acyclicity
                    # lazily too, by cycle cuts, instead of pi's big-M rows
                    full = PartMip(g, red, nodes, opts, order=False)
                    full.add_band(*band)
                    full.add_cuts(lp2.tight_rows() if values2 is not None else lp2.cut_rows)
                    stats["stage2_rows"] = full.rows
                    margin = lp2.cold_lp_s or 0.0
                    if full.rows > MAX_MIP_ROWS:  # its root separation would overrun the budget
                        margin = math.inf
                    st2, found2, bound2, repaired2 = _rounds(full, best, end, margin)
                    full.overrun = max(full.overrun, lp2.overrun)
                for cand in (found2, repaired2):
                    if cand is not None and full.value(cand) < best_value:
                        best, best_value = cand, full.value(cand)
                if bound2 is not None:
                    bound = max(bound, bound2) if bound is not None else bound2
                if st2 is Status.OPTIMAL and found2 is not None:
                    status = Status.OPTIMAL
                stats["cuts"] += full.cuts
        stats["cuts"] += heavy.cuts
        over = max(lp.overrun, heavy.overrun, full.overrun)
        stats["highs_overrun_ms"] = max(stats.get("highs_overrun_ms", 0), round(1000 * over))
        stats["variables"] += heavy.ncol
        stats["constraints"] += heavy.rows
    if bound is not None and bound > best_value:
        bound = best_value  # stage 2's bound may overshoot by the rounding of the band
    if status is Status.OPTIMAL and bound is not None and bound < best_value - 0.5:
        status = Status.FEASIBLE  # stopped within the gap
    return best, status, bound


def _cut_loop(
    pm: PartMip,
    elapsed,
    until: float,
    light: bool,
    stats: dict[str, int],
    key: str,
) -> tuple[float | None, np.ndarray | None]:
    """Solve the LP and add violated rows until none is found or `elapsed()` reaches `until`;
    returns (last LP value: a bound for the model, its values). `key` names the stat."""
    bound, values = None, None
    separating = 0.0  # the last separation's time: no round starts one it cannot finish
    while elapsed() < until:
        st, found, lp_value, _ = pm.run(until - elapsed(), integral=False)
        if found is None or st is not Status.OPTIMAL:
            break
        bound, values = lp_value, found
        if key:
            stats[key] = math.floor((lp_value or 0) + 1e-6)
        if elapsed() + separating > until:
            break
        with stopwatch() as took:
            added = pm.separate(found, light=light)
        separating = took()
        if added == 0:
            break
    return bound, values


def _rounds(
    pm: PartMip, start: Mapping[int, int], end: float, margin: float = 0.0
) -> tuple[Status, dict[int, int] | None, float | None, dict[int, int] | None]:
    """MIP rounds until the integer solution is transitive (a legal clustering) or time is up:
    (MIP status of the last round, its clustering if transitive, best bound seen, a legal
    clustering repaired from the last intransitive solution). A round whose repaired clustering
    meets the round's proven bound ends the rounds: that clustering is optimal for this model
    (the bound of a round, with fewer rows than the next, is a relaxation).

    HiGHS cannot be interrupted inside a root separation round, which can take about as long as
    a cold LP solve of the model; each MIP run therefore stops `margin` seconds before `end` (a
    `time.perf_counter()` value; the caller passes a cold LP solve time of the part), and none
    starts without twice that left (an infinite margin skips the MIP)."""
    best, best_value = dict(start), pm.value(start, pm.light)
    bound: float | None = None
    repaired = None
    while end - time.perf_counter() > 2 * margin:
        vector = pm.start_vector(ranked(pm.g, pm.nodes, best))
        left = end - time.perf_counter() - margin
        st, values, _, b = pm.run(left, integral=True, start=vector)
        if b is not None:
            bound = b if bound is None else max(bound, b)
        if values is None:
            return st, None, bound, repaired
        labels, added = pm.clusters(values)
        if added == 0 and not pm.pi:  # no pi rows: acyclicity is checked here
            added = pm.cycle_cuts(labels)
        if added == 0:
            return st, labels, bound, repaired
        repaired = repair(pm, values, end)
        rep_value = pm.value(repaired, pm.light)
        if rep_value < best_value:
            best, best_value = repaired, rep_value
        if st is Status.OPTIMAL and bound is not None and best_value <= bound + 0.5:
            return Status.OPTIMAL, best, bound, repaired
    return Status.FEASIBLE, None, bound, repaired


def repair(pm: PartMip, values: np.ndarray, deadline: float = math.inf) -> dict[int, int]:
    """A legal clustering near a (possibly fractional, intransitive or cyclic) solution: its fused
    pairs (x < 1/2), most surely fused first, then heaviest, merged by `fusion_local.repair`
    (which stops merging at `deadline`, a `time.perf_counter()` value)."""
    fused = [(round(float(values[k]), 3), -pm.g.weight[p], p) for p, k in pm.x.items()]
    order = [p for v, _, p in sorted(fused) if v < 0.5]
    return local_repair(pm.g, pm.nodes, pm.allowed, order, deadline)


def part_value(g: Graph, red: Reduced, nodes: Sequence[int], lab: Mapping[int, int]) -> int:
    """A part's share of the objective under cluster labels: what `PartMip.value` prices on the
    part's full model (every pair that may fuse, every array that may contract), without one."""
    inside = set(nodes)
    split = sum(g.weight[p] for p in red.pairs if p[0] in inside and lab[p[0]] != lab[p[1]])
    contracted = (i for i in red.contract if i in inside)
    return split + g.n * sum(1 for i in contracted if any(lab[j] != lab[i] for j in g.succ[i]))


SOLVERS = [
    Solver(
        "strong",
        "exact",
        run_strong,
        "multicut MIP: reduction, independent parts, lazy cycle cuts, HiGHS, heuristic start",
        EXACT,
    )
]
