"""Schedule heuristics: Kahn orders, a greedy list scheduler, and the seed's `shift` local search.

`shift` (poprithms schedule::shift) moves a block of n consecutive ops past a run of neighbours,
i.e. rotates two adjacent sub-schedules, accepting a move only when it keeps precedence and lowers
the objective; it climbs the "n-shift ladder" (blocks of 1 op, then 2, ... up to n_ops/2, which
covers every rotation) until no rotation of any size improves (`max_shift` optionally caps it).

What makes it fast (all checked against full recomputation in the tests):
- how far a block can move is read off its ops' nearest successor (right) / predecessor (left)
  positions, so no candidate ever needs a precedence check;
- the change in sum-liveness for *every* distance d a block can move is computed at once. The ops
  passed over all shift by -n (n = block length), keeping their relative order, so an alloc that
  the block does not use changes only when its first or last op is passed: by +n*size or -n*size.
  Those per-position weights (`_flpos`) are kept for the whole schedule, so the moves of a block
  cost one cumulative sum over the passed positions, plus an exact O(1)-per-d formula for the few
  allocs the block itself uses;
- after a move only the allocs whose first or last position lay in the rotated window are
  recomputed;
- at level n only blocks that can move at least n places are looked at: one difference array
  over the precedence edges finds them (`movable`), so the high levels, where almost no block
  can move, cost a few numpy calls each and the complete ladder stays cheap.

With `objective == "peak"` the same moves are proposed; a move is accepted when it lowers
(peak, positions at the peak, sum_liveness) lexicographically, evaluated exactly for every
distance from the rotated window's new live profile (`_passed_profile`, `_block_profiles`), so a
move that clears one peak position is taken even when it raises sum-liveness.

`shift-anneal` (`anneal_order`) runs seeded simulated annealing over random block moves and
ends with a `shift` descent from the best state found; `run_anneal` repeats it with further seeds
while the time limit allows and keeps the best.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

import numpy as np

from tensorplan.problems.core import Options, Result, Solver, heuristic_result, stopwatch
from tensorplan.problems.schedule import (
    Graph,
    ScheduleInstance,
    order_objective,
    to_order,
    to_solution,
)

TieBreak = Literal["fifo", "filo", "random"]
Ladder = Literal["restart", "continue"]


# --- starting orders ------------------------------------------------------------------------------


def kahn(g: Graph, tie: TieBreak = "fifo", seed: int = 0) -> list[int]:
    """A topological order; ready ops leave in arrival order (fifo), reverse (filo) or at random."""
    indeg = [len(p) for p in g.preds]
    ready: deque[int] = deque(v for v in range(g.n) if indeg[v] == 0)
    rng = random.Random(seed)
    order: list[int] = []
    while ready:
        if tie == "fifo":
            v = ready.popleft()
        elif tie == "filo":
            v = ready.pop()
        else:
            k = rng.randrange(len(ready))
            ready[k], ready[-1] = ready[-1], ready[k]
            v = ready.pop()
        order.append(v)
        for u in g.succs[v]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    return order


def greedy_order(g: Graph) -> list[int]:
    """List scheduling: next, the ready op that starts the least new memory (ties: frees the most).

    The memory live at the next position is open(S) + new(v) whatever v is chosen, so the ready op
    with the smallest new(v) is the one with the least immediate growth of either objective. The
    values change only when an alloc starts or is down to its last user, so a lazy heap keeps
    the whole pass at O(sum of alloc users * log n).
    """
    n = g.n
    indeg = [len(p) for p in g.preds]
    new = [sum(g.sizes[a] for a in g.op_allocs[v]) for v in range(n)]
    close = [sum(g.sizes[a] for a in g.op_allocs[v] if len(g.alloc_ops[a]) == 1) for v in range(n)]
    started = [False] * len(g.sizes)
    remaining = [len(vs) for vs in g.alloc_ops]
    done = [False] * n
    version = [0] * n
    stamp = [0] * n  # when an op became ready: later first (depth-first, closes allocs sooner)
    heap = [(new[v] - close[v], new[v], 0, v, 0) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order: list[int] = []

    def touch(u: int) -> None:
        version[u] += 1
        if indeg[u] == 0 and not done[u]:
            heapq.heappush(heap, (new[u] - close[u], new[u], stamp[u], u, version[u]))

    while heap:
        _, _, _, v, ver = heapq.heappop(heap)
        if done[v] or ver != version[v]:
            continue
        done[v] = True
        order.append(v)
        for a in g.op_allocs[v]:
            size = g.sizes[a]
            if not started[a]:
                started[a] = True
                for u in g.alloc_ops[a]:
                    if not done[u]:
                        new[u] -= size
                        touch(u)
            remaining[a] -= 1
            if remaining[a] == 1:
                u = next(u for u in g.alloc_ops[a] if not done[u])
                close[u] += size
                touch(u)
        for u in g.succs[v]:
            indeg[u] -= 1
            if indeg[u] == 0:
                stamp[u] = -len(order)
                touch(u)
    return order


# --- shift ----------------------------------------------------------------------------------------


class ShiftSearch:
    """Mutable schedule with incremental sum-liveness deltas for block moves (see module doc)."""

    def __init__(self, g: Graph, order: Sequence[int], objective: str = "sum_liveness") -> None:
        self.g = g
        self.n_ops = g.n
        self.objective = objective
        self.order = list(order)
        self.pos = [0] * g.n
        for p, v in enumerate(self.order):
            self.pos[v] = p
        self.pos_np = np.array(self.pos, dtype=np.int64)
        self.sizes = np.asarray(g.sizes, dtype=np.int64)
        self.users = [np.asarray(vs, dtype=np.int64) for vs in g.alloc_ops]
        self.multi = np.array([len(vs) >= 2 for vs in g.alloc_ops], dtype=bool)
        self.first = np.full(len(g.sizes), -1, dtype=np.int64)  # -1: alloc without users
        self.last = np.full(len(g.sizes), -1, dtype=np.int64)
        for a, us in enumerate(self.users):
            if us.size:
                p = self.pos_np[us]
                self.first[a], self.last[a] = p.min(), p.max()
        self.ar = np.arange(1, g.n + 1, dtype=np.int64)
        self._refresh_flpos()
        self.sum_liveness = int(
            np.sum(self.sizes[self.multi] * (self.last - self.first + 1)[self.multi])
        )
        self.sum_liveness += int(
            sum(g.sizes[a] for a, vs in enumerate(g.alloc_ops) if len(vs) == 1)
        )
        self.edge_u = np.array([u for v in range(g.n) for u in g.preds[v]], dtype=np.int64)
        self.edge_v = np.array([v for v in range(g.n) for _ in g.preds[v]], dtype=np.int64)
        self.floor = max((sum(g.sizes[a] for a in g.op_allocs[v]) for v in range(g.n)), default=0)
        self.peak = 0
        self.excess = 0
        self._refresh_profile()
        self.moves = 0
        self.proposals = 0

    def _refresh_flpos(self) -> None:
        m = self.multi
        w = self.sizes[m].astype(float)
        n = self.n_ops
        self.flpos = (
            np.bincount(self.first[m], weights=w, minlength=n)
            - np.bincount(self.last[m], weights=w, minlength=n)
        ).astype(np.int64)
        self.flsum = np.concatenate(([0], np.cumsum(self.flpos)))  # flsum[p] = sum flpos[:p]

    def _refresh_profile(self) -> None:
        """Live profile, peak and the peak-mode secondary key (excess over the threshold)."""
        used = self.first >= 0
        diff = np.zeros(self.n_ops + 1, dtype=np.int64)
        np.add.at(diff, self.first[used], self.sizes[used])
        np.add.at(diff, self.last[used] + 1, -self.sizes[used])
        self.prof = np.cumsum(diff)[:-1]
        self.peak = int(self.prof.max(initial=0))
        if self.objective != "peak":
            return
        over = np.maximum(self.prof - self.threshold(), 0)
        self.excess = int(over.sum())
        self.exsum = np.concatenate(([0], np.cumsum(over)))
        zero = np.zeros(1, dtype=np.int64)
        self.pre_max = np.maximum.accumulate(np.concatenate((zero, self.prof)))  # max prof[:p]
        self.suf_max = np.maximum.accumulate(np.concatenate((self.prof, zero))[::-1])[::-1]

    def threshold(self) -> int:
        """Positions above this count in the peak-mode secondary key: those at the peak."""
        return self.peak - 1

    def key(self) -> tuple[int, int, int]:
        """What the search lowers lexicographically: (sum_liveness,) or (peak, excess, sum).

        In peak mode `excess` = sum over positions of max(0, live - (peak - 1)), i.e. the
        number of positions at the peak, so a move that keeps the peak but clears one of
        its positions is progress towards a lower peak.
        """
        if self.objective == "peak":
            return (self.peak, self.excess, self.sum_liveness)
        return (self.sum_liveness, 0, 0)

    def movable(self, n: int) -> np.ndarray:
        """Block starts s where block [s, s+n) can move by at least n places left or right.

        Moving right by >= n needs the rotation of [s, s+n) with [s+n, s+2n) to be valid: no
        precedence edge from the first half to the second. Each edge (pu -> pv) forbids the
        interval of s with s <= pu < s+n <= pv < s+2n, so all s are marked with one
        difference array over the edges (O(edges) numpy, no Python loop per block).
        """
        n_ops = self.n_ops
        m = n_ops - 2 * n + 1  # pair rotations (n, n) start at 0 .. m-1
        if m <= 0:
            return np.zeros(0, dtype=np.int64)
        pu = self.pos_np[self.edge_u]
        pv = self.pos_np[self.edge_v]
        lo = np.maximum(np.maximum(pu - n + 1, pv - 2 * n + 1), 0)
        hi = np.minimum(np.minimum(pu, pv - n), m - 1)
        keep = lo <= hi
        diff = (
            np.bincount(lo[keep], minlength=m + 1)[: m + 1]
            - np.bincount(hi[keep] + 1, minlength=m + 1)[: m + 1]
        )
        pair_ok = np.cumsum(diff)[:m] == 0
        ok = np.zeros(n_ops - n + 1, dtype=bool)
        ok[:m] |= pair_ok  # right
        ok[n : n + m] |= pair_ok  # left: block at s, passed ops at [s-n, s)
        return np.nonzero(ok)[0]

    # -- proposals

    def block_allocs(self, s: int, n: int) -> list[int]:
        """Allocs with users both inside and outside the block [s, s+n)."""
        seen: set[int] = set()
        out = []
        first, last = self.first, self.last
        for v in self.order[s : s + n]:
            for a in self.g.op_allocs[v]:
                if a not in seen:
                    seen.add(a)
                    if self.multi[a] and (first[a] < s or last[a] >= s + n):
                        out.append(a)
        return out

    def right_range(self, s: int, n: int) -> int:
        e = s + n
        limit = self.n_ops
        pos = self.pos
        for v in self.order[s:e]:
            for u in self.g.succs[v]:
                p = pos[u]
                if e <= p < limit:
                    limit = p
        return limit - e

    def left_range(self, s: int, n: int) -> int:
        limit = -1
        pos = self.pos
        for v in self.order[s : s + n]:
            for u in self.g.preds[v]:
                p = pos[u]
                if limit < p < s:
                    limit = p
        return s - 1 - limit

    def _extents(self, a: int, s: int, e: int) -> tuple[int, int, int, int]:
        """(first offset in block, last offset in block, nearest user before s or -1,
        nearest user at or after e or -1) of alloc a's users, block [s, e)."""
        o_min, o_max, q1, p1 = e, -1, -1, -1
        pos = self.pos
        for u in self.g.alloc_ops[a]:
            p = pos[u]
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

    @staticmethod
    def _piece(
        dc: dict[int, tuple[int, int]], dmax: int, lo: int, hi: int, const: int, slope: int
    ) -> None:
        """Add const + slope * d for d in [lo, hi] (clipped to 1..dmax) as sparse differences."""
        if lo < 1:
            lo = 1
        if hi > dmax:
            hi = dmax
        if lo <= hi:
            c, sl = dc.get(lo - 1, (0, 0))
            dc[lo - 1] = (c + const, sl + slope)
            if hi < dmax:
                c, sl = dc.get(hi, (0, 0))
                dc[hi] = (c - const, sl - slope)

    def _total(self, base: np.ndarray, dc: dict[int, tuple[int, int]]) -> np.ndarray:
        k = len(base)
        idx = list(dc)
        c = np.zeros(k, dtype=np.int64)
        sl = np.zeros(k, dtype=np.int64)
        c[idx] = [v[0] for v in dc.values()]
        sl[idx] = [v[1] for v in dc.values()]
        return base + np.cumsum(c) + np.cumsum(sl) * self.ar[:k]

    def right_deltas(self, s: int, n: int, dmax: int, allocs: list[int]) -> np.ndarray:
        """Change in sum-liveness when block [s, s+n) moves right by d = 1..dmax.

        Allocs the block does not use change by +-n*size as their first/last user is passed
        (cumulative sum of `flpos`); each alloc the block uses is a piecewise-linear function of
        d with at most one breakpoint in first and one in last, added as difference arrays.
        """
        e = s + n
        fl = self.flsum
        base = n * (fl[e + 1 : e + dmax + 1] - fl[e])
        if not allocs:
            return base
        dc: dict[int, tuple[int, int]] = {}
        piece = self._piece
        for a in allocs:
            size = self.g.sizes[a]
            f0, l0 = int(self.first[a]), int(self.last[a])
            if e <= l0 < e + dmax:  # its last user is handled exactly below, not in flpos
                piece(dc, dmax, l0 - e + 1, dmax, n * size, 0)
            o_min, o_max, _, p1 = self._extents(a, s, e)
            piece(dc, dmax, 1, dmax, -size * (l0 - f0), 0)
            # first user: -f(d)
            if f0 < s:
                piece(dc, dmax, 1, dmax, -size * f0, 0)
            elif p1 >= 0:
                piece(dc, dmax, 1, p1 - e, -size * (s + o_min), -size)
                piece(dc, dmax, p1 - e + 1, dmax, -size * (p1 - n), 0)
            else:
                piece(dc, dmax, 1, dmax, -size * (s + o_min), -size)
            # last user: +l(d)
            if p1 >= 0:
                piece(dc, dmax, 1, l0 - e, size * l0, 0)
                piece(dc, dmax, l0 - e + 1, dmax, size * (s + o_max), size)
            else:
                piece(dc, dmax, 1, dmax, size * (s + o_max), size)
        return self._total(base, dc)

    def left_deltas(self, s: int, n: int, dmax: int, allocs: list[int]) -> np.ndarray:
        """Change in sum-liveness when block [s, s+n) moves left by d = 1..dmax (mirror image)."""
        e = s + n
        fl = self.flsum
        base = -n * (fl[s] - fl[s - dmax : s][::-1])  # k-th entry: ops at s-1-k .. s-1
        if not allocs:
            return base
        dc: dict[int, tuple[int, int]] = {}
        piece = self._piece
        for a in allocs:
            size = self.g.sizes[a]
            f0, l0 = int(self.first[a]), int(self.last[a])
            if s - dmax <= f0 < s:  # its first user is handled exactly below, not in flpos
                piece(dc, dmax, s - f0, dmax, n * size, 0)
            o_min, o_max, q1, _ = self._extents(a, s, e)
            piece(dc, dmax, 1, dmax, -size * (l0 - f0), 0)
            # last user: +l(d)
            if l0 >= e:
                piece(dc, dmax, 1, dmax, size * l0, 0)
            elif q1 >= 0:
                piece(dc, dmax, 1, s - q1 - 1, size * (s + o_max), -size)
                piece(dc, dmax, s - q1, dmax, size * (q1 + n), 0)
            else:
                piece(dc, dmax, 1, dmax, size * (s + o_max), -size)
            # first user: -f(d)
            if q1 >= 0:
                piece(dc, dmax, 1, s - f0 - 1, -size * f0, 0)
                piece(dc, dmax, s - f0, dmax, -size * (s + o_min), size)
            else:
                piece(dc, dmax, 1, dmax, -size * (s + o_min), size)
        return self._total(base, dc)

    # -- moves

    def rotate(self, s: int, k0: int, k1: int) -> None:
        """Swap the adjacent sub-schedules [s, s+k0) and [s+k0, s+k0+k1)."""
        e = s + k0 + k1
        window = self.order[s + k0 : e] + self.order[s : s + k0]
        self.order[s:e] = window
        for p in range(s, e):
            self.pos[window[p - s]] = p
        self.pos_np[np.asarray(window, dtype=np.int64)] = np.arange(s, e)
        first, last = self.first, self.last
        hit = np.nonzero(((first >= s) & (first < e)) | ((last >= s) & (last < e)))[0]
        for a in hit.tolist():
            p = self.pos_np[self.users[a]]
            first[a], last[a] = p.min(), p.max()
        self._refresh_flpos()
        if self.objective == "peak":
            self._refresh_profile()

    def move(self, s: int, n: int, d: int) -> None:
        """Move block [s, s+n) by d (positive: right, negative: left)."""
        if d > 0:
            self.rotate(s, n, d)
        else:
            self.rotate(s + d, -d, n)

    def apply(self, s: int, n: int, dist: int, delta: int) -> bool:
        """Make the chosen improving move (its sum-liveness change `delta` known) and count it."""
        self.move(s, n, dist)
        self.sum_liveness += delta
        self.moves += 1
        return True

    def try_block(self, s: int, n: int, min_dist: int = 1) -> bool:
        """Apply the best improving move of block [s, s+n), if any; True when one was applied."""
        dr = self.right_range(s, n)
        dl = self.left_range(s, n)
        if dr < min_dist and dl < min_dist:
            return False
        allocs = self.block_allocs(s, n)
        if self.objective == "peak":
            return self._try_block_peak(s, n, min_dist, dr, dl, allocs)
        best: tuple[int, int] | None = None  # (delta, signed distance)
        for sign, dmax, fn in ((1, dr, self.right_deltas), (-1, dl, self.left_deltas)):
            if dmax < min_dist:
                continue
            deltas = fn(s, n, dmax, allocs)
            self.proposals += dmax - min_dist + 1
            k = int(np.argmin(deltas[min_dist - 1 :])) + min_dist - 1
            if deltas[k] < 0 and (best is None or deltas[k] < best[0]):
                best = (int(deltas[k]), sign * (k + 1))
        if best is None:
            return False
        return self.apply(s, n, best[1], best[0])

    # -- peak mode: exact (peak, excess, sum) of every move of a block

    def _try_block_peak(
        self, s: int, n: int, min_dist: int, dr: int, dl: int, allocs: list[int]
    ) -> bool:
        """Apply the move of block [s, s+n) that lowers (peak, excess, sum) the most, if any.

        Only the rotated window's profile changes. The ops a block passes over have, after the
        move, a live total that does not depend on how far the block goes (`_passed_profile`),
        so one pass gives them for every distance; the block's own n positions are computed for
        all distances at once from its allocs (`_block_profiles`). Distances whose window holds
        no position above the threshold and whose sum-liveness change is >= 0 cannot improve
        the key and are skipped.
        """
        e = s + n
        hot = np.concatenate(([0], np.cumsum(self.prof > self.threshold())))
        info = self._block_info(
            s, n, sorted({a for v in self.order[s:e] for a in self.g.op_allocs[v]})
        )
        best_key = (self.peak, self.excess, 0)
        best: tuple[int, int] | None = None  # (signed distance, sum delta)
        for sign, dmax, fn in ((1, dr, self.right_deltas), (-1, dl, self.left_deltas)):
            if dmax < min_dist:
                continue
            deltas = fn(s, n, dmax, allocs)
            ds = np.arange(1, dmax + 1)
            lo, hi = (np.full(dmax, s), e + ds) if sign > 0 else (s - ds, np.full(dmax, e))
            worth = ((hot[hi] - hot[lo]) > 0) | (deltas < 0)
            worth[: min_dist - 1] = False
            cand = np.nonzero(worth)[0]
            if cand.size == 0:
                continue
            self.proposals += int(cand.size)
            passed = self._passed_profile(s, n, dmax, sign, allocs)
            pmax = np.maximum.accumulate(passed)
            T = self.threshold()
            pex = np.cumsum(np.maximum(passed - T, 0))
            for chunk in np.array_split(cand, 1 + cand.size * n // 1_000_000):
                block = self._block_profiles(s, n, chunk + 1, sign, info)
                ws, we = lo[chunk], hi[chunk]
                peak = np.maximum(
                    np.maximum(self.pre_max[ws], self.suf_max[we]),
                    np.maximum(pmax[chunk], block.max(axis=1)),
                )
                inside = pex[chunk] + np.maximum(block - T, 0).sum(axis=1)
                excess = np.where(
                    peak < self.peak, 0, self.excess - (self.exsum[we] - self.exsum[ws]) + inside
                )
                j = int(np.lexsort((deltas[chunk], excess, peak))[0])
                key = (int(peak[j]), int(excess[j]), int(deltas[chunk[j]]))
                if key < best_key:
                    best_key, best = key, (sign * (int(chunk[j]) + 1), key[2])
        if best is None:
            return False
        return self.apply(s, n, *best)

    def _passed_profile(
        self, s: int, n: int, dmax: int, sign: int, allocs: list[int]
    ) -> np.ndarray:
        """Live total at each op the block passes (k-th: the (k+1)-th op passed), after the move.

        Allocs the block does not use keep their liveness at a passed op. An alloc a the block
        uses (and that has users outside it) is live at passed op q (moving right) before the
        move iff last(a) >= q, and after it iff a has a user before s or one in [e, q];
        mirrored for moving left.
        """
        e = s + n
        q = np.arange(e, e + dmax) if sign > 0 else np.arange(s - 1, s - 1 - dmax, -1)
        out = self.prof[q].copy()
        diff = np.zeros(dmax + 1, dtype=np.int64)
        for a in allocs:
            size = self.g.sizes[a]
            f0, l0 = int(self.first[a]), int(self.last[a])
            _, _, q1, p1 = self._extents(a, s, e)
            if sign > 0:
                was = min(max(l0 - e + 1, 0), dmax)  # live at passed k < was
                now = 0 if f0 < s else (min(p1 - e, dmax) if p1 >= 0 else dmax)  # live k >= now
            else:
                was = min(max(s - f0, 0), dmax)
                now = 0 if l0 >= e else (min(s - 1 - q1, dmax) if q1 >= 0 else dmax)
            diff[0] -= size
            diff[was] += size
            diff[now] += size
        return out + np.cumsum(diff)[:dmax]

    def _block_info(
        self, s: int, n: int, touched: list[int]
    ) -> list[tuple[int, int, int, int, int, int, int]]:
        """Per alloc the block uses: (size, first/last offset in the block, first/last user
        position outside it (n_ops / -1 if none), first, last) -- what `_block_profile` needs."""
        e = s + n
        pos = self.pos
        out = []
        for a in touched:
            o_min, o_max, out_min, out_max = n, -1, self.n_ops, -1
            for u in self.g.alloc_ops[a]:
                p = pos[u]
                if s <= p < e:
                    o_min = min(o_min, p - s)
                    o_max = max(o_max, p - s)
                else:
                    out_min = min(out_min, p)
                    out_max = max(out_max, p)
            out.append(
                (
                    self.g.sizes[a],
                    o_min,
                    o_max,
                    out_min,
                    out_max,
                    int(self.first[a]),
                    int(self.last[a]),
                )
            )
        return out

    def _block_profiles(
        self,
        s: int,
        n: int,
        ds: np.ndarray,
        sign: int,
        info: list[tuple[int, int, int, int, int, int, int]],
    ) -> np.ndarray:
        """Live totals at the block's n positions after moving it by each d in ds (one row each).

        Ops left of the cut end up before the block, the others after it. An alloc the block
        does not use is live there iff it crosses the cut (`flsum`); one it uses is live from
        the block's start (or its first user in the block) to the block's end (or last user).
        """
        cut = s + n + ds if sign > 0 else s - ds
        k = len(ds)
        cross = self.flsum[cut].copy()
        diff = np.zeros((k, n + 1), dtype=np.int64)
        if info:
            size, o_min, o_max, out_min, out_max, f0, l0 = (
                np.array(c, dtype=np.int64) for c in zip(*info, strict=True)
            )
            c = cut[:, None]
            cross -= ((f0 < c) & (c <= l0)) @ size  # counted in flsum (never single users)
            lo = np.where(out_min < c, 0, o_min)
            hi = np.where(out_max >= c, n - 1, o_max) + 1
            rows = np.arange(k)[:, None] * (n + 1)
            flat = diff.reshape(-1)
            w = np.broadcast_to(size, lo.shape)
            np.add.at(flat, (rows + lo).ravel(), w.ravel())
            np.add.at(flat, (rows + hi).ravel(), -w.ravel())
        return cross[:, None] + np.cumsum(diff[:, :n], axis=1)

    def sweep(self, n: int, deadline: float, clock) -> bool:
        """Offer every block of length n that can move by >= n places its best move once.

        Blocks that cannot move that far are skipped without being looked at (`movable`);
        after an applied move the movable set is recomputed for the blocks still to come.
        True when any move was applied.
        """
        improved = False
        min_dist = n if n > 1 else 1
        starts = self.movable(n)
        i = 0
        while i < len(starts):
            s = int(starts[i])
            i += 1
            if self.try_block(s, n, min_dist):
                improved = True
                starts = self.movable(n)
                i = int(np.searchsorted(starts, s, side="right"))
            if clock() > deadline:
                break
        return improved


def shift_order(
    g: Graph,
    order: Sequence[int],
    objective: str,
    *,
    ladder: Ladder = "continue",
    max_shift: int | None = None,
    time_limit: float = 10.0,
) -> tuple[ShiftSearch, bool]:
    """Run the n-shift ladder from `order`; returns the search state and whether it converged.

    At level n, blocks of n ops move by at least n places (shorter moves are the mirror image of
    a lower level), so levels 1 .. n_ops/2 cover every rotation of two adjacent sub-schedules.
    `ladder="restart"` drops back to 1-shifts after any improvement at a higher level
    (poprithms' default); `"continue"` climbs on and restarts only after a full climb.
    By default the ladder is complete: `converged` means no rotation of any size improves.
    `max_shift` caps the levels (then `converged` is relative to that cap). On time-out the
    state holds the best order so far (every applied move improves).
    """
    state = ShiftSearch(g, order, objective)
    full = max(g.n // 2, 1)
    top = full if max_shift is None else min(max_shift, full)
    with stopwatch() as clock:
        while True:
            climbed = False
            level = 1
            while level <= top:
                improved = False
                while state.sweep(level, time_limit, clock):
                    improved = True
                    if clock() > time_limit or (ladder == "restart" and level > 1):
                        break
                if clock() > time_limit:
                    return state, False
                climbed |= improved
                level = 1 if improved and ladder == "restart" and level > 1 else level + 1
            if ladder == "restart" or not climbed:
                return state, True


def anneal_order(
    g: Graph,
    order: Sequence[int],
    objective: str,
    *,
    seed: int = 0,
    steps: int | None = None,
    time_limit: float = 10.0,
) -> tuple[ShiftSearch, bool, dict[str, int]]:
    """Simulated annealing over random block moves, then a T=0 `shift` descent from the best.

    A move is a random block (1 op half of the time, else 2..8) moved left or right by a
    log-uniform distance within its precedence range; its sum-liveness change comes from the
    same incremental deltas as `shift`. Uphill moves are taken with probability exp(-delta/T),
    T cooling geometrically from the median uphill change of 200 sampled moves to 1/1000 of it
    over `steps` proposals (default 20,000 + 100 per op). The energy is sum-liveness in both
    modes; in peak mode the best state is kept by (peak, excess, sum) and the final descent
    is the peak-mode `shift`. Deterministic for a seed unless the annealing phase (at most
    half of `time_limit`) runs out of time. Returns (descent state, converged, stats).
    """
    state = ShiftSearch(g, order, objective)
    rng = random.Random(seed)
    n_ops = g.n
    steps = 20_000 + 100 * n_ops if steps is None else steps
    best_key, best_order = state.key(), list(state.order)
    accepted = 0

    def propose() -> tuple[int, int, int, int] | None:
        """(block start, length, signed distance, sum-liveness change) of a random move."""
        s = rng.randrange(n_ops)
        n = 1 if rng.random() < 0.5 else rng.randint(2, 8)
        n = min(n, n_ops - s)
        sign = 1 if rng.random() < 0.5 else -1
        dmax = state.right_range(s, n) if sign > 0 else state.left_range(s, n)
        if dmax < 1:
            return None
        d = max(1, min(dmax, int(dmax ** rng.random())))
        fn = state.right_deltas if sign > 0 else state.left_deltas
        delta = int(fn(s, n, d, state.block_allocs(s, n))[-1])
        return s, n, sign * d, delta

    with stopwatch() as clock:
        ups = []
        for _ in range(200 if n_ops > 1 else 0):
            move = propose()
            if move is not None and move[3] > 0:
                ups.append(move[3])
        t0 = float(np.median(ups)) if ups else 0.0
        cool = 1e-3 ** (1 / max(steps, 1))
        temp = t0
        for i in range(steps if t0 > 0 else 0):
            if i % 256 == 0 and clock() > 0.5 * time_limit:
                break
            temp *= cool
            move = propose()
            if move is None:
                continue
            s, n, dist, delta = move
            if delta > 0 and rng.random() >= math.exp(-delta / temp):
                continue
            state.move(s, n, dist)
            state.sum_liveness += delta
            accepted += 1
            if delta < 0 or objective == "peak":
                key = state.key()
                if key < best_key:
                    best_key, best_order = key, list(state.order)
        final, converged = shift_order(
            g, best_order, objective, time_limit=max(time_limit - clock(), 0.0)
        )
    return final, converged, {"anneal_steps": steps, "anneal_accepted": accepted}


# --- solvers --------------------------------------------------------------------------------------


def best_start(inst: ScheduleInstance) -> list[int]:
    """The best of the greedy order and the Kahn fifo/filo orders; filo (depth-first) often wins."""
    g = inst.graph
    orders = [greedy_order(g), kahn(g, "fifo"), kahn(g, "filo")]
    return min(orders, key=lambda o: order_objective(g, o, inst.objective))


def _start(inst: ScheduleInstance, start: str, seed: int, initial_solution) -> list[int]:
    if initial_solution is not None:
        return to_order(inst, initial_solution)
    if start == "best":
        return best_start(inst)
    if start == "greedy":
        return greedy_order(inst.graph)
    return kahn(inst.graph, start, seed)  # type: ignore[arg-type]


def run_kahn(
    inst: ScheduleInstance,
    opts: Options,
    *,
    tie: TieBreak = "fifo",
    name: str = "kahn",
) -> Result:
    seed = opts.seed
    with stopwatch() as clock:
        order = kahn(inst.graph, tie, seed)
        value = order_objective(inst.graph, order, inst.objective)
    return heuristic_result(name, value, to_solution(inst, order), clock())


def run_greedy(
    inst: ScheduleInstance,
    opts: Options,
) -> Result:
    with stopwatch() as clock:
        order = greedy_order(inst.graph)
        value = order_objective(inst.graph, order, inst.objective)
    return heuristic_result("greedy", value, to_solution(inst, order), clock())


def _search_result(
    name: str,
    inst: ScheduleInstance,
    state: ShiftSearch,
    converged: bool,
    start_value: int,
    runtime_s: float,
    **stats: Any,
) -> Result:
    """Result of a shift-style search; its message says when time ran out before a local
    minimum."""
    value = order_objective(inst.graph, state.order, inst.objective)
    message = "" if converged else "time limit reached before a local minimum"
    return heuristic_result(
        name,
        value,
        to_solution(inst, state.order),
        runtime_s,
        message=message,
        start_objective=start_value,
        moves=state.moves,
        converged=converged,
        **stats,
    )


def run_shift(
    inst: ScheduleInstance,
    opts: Options,
    *,
    start: str = "best",
    ladder: Ladder = "continue",
    max_shift: int | None = None,
    name: str = "shift",
) -> Result:
    """Shift from a start order: best of greedy/fifo/filo, greedy, or Kahn fifo/filo/random."""
    time_limit, seed, initial_solution = opts.time_limit, opts.seed, opts.hint
    with stopwatch() as clock:
        if inst.graph.n == 0:
            return heuristic_result(name, 0, to_solution(inst, []), clock())
        order = _start(inst, start, seed, initial_solution)
        start_value = order_objective(inst.graph, order, inst.objective)
        state, converged = shift_order(
            inst.graph,
            order,
            inst.objective,
            ladder=ladder,
            max_shift=max_shift,
            time_limit=max(time_limit - clock(), 0),
        )
        return _search_result(
            name, inst, state, converged, start_value, clock(), proposals=state.proposals
        )


def run_anneal(
    inst: ScheduleInstance,
    opts: Options,
    *,
    start: str = "best",
    steps: int | None = None,
    rounds: int = 4,
    name: str = "shift-anneal",
) -> Result:
    """Annealed shift (`anneal_order`) from the same start orders as `run_shift`.

    The anneals start from `shift`'s local minimum, so the result is never worse than `shift`
    from the same start. Up to `rounds` independent anneals (seeds seed, seed + 1, ...) run,
    each begun only while the time left still fits an average round; the best order wins, so
    extra rounds never make the result worse. They pay off most in peak mode, where the
    annealing energy (sum-liveness) is only a proxy.
    """
    time_limit, seed, initial_solution = opts.time_limit, opts.seed, opts.hint
    with stopwatch() as clock:
        if inst.graph.n == 0:
            return heuristic_result(name, 0, to_solution(inst, []), clock())
        order = _start(inst, start, seed, initial_solution)
        start_value = order_objective(inst.graph, order, inst.objective)
        descent, _ = shift_order(inst.graph, order, inst.objective, time_limit=0.5 * time_limit)
        order = descent.order  # anneal from shift's local minimum: never worse than `shift`
        best: tuple[ShiftSearch, bool, dict[str, int]] | None = None
        rounds_start = clock()
        done = 0
        for r in range(max(rounds, 1)):
            left = time_limit - clock()
            if r and left < (clock() - rounds_start) / r:
                break
            state, converged, stats = anneal_order(
                inst.graph,
                order,
                inst.objective,
                seed=seed + r,
                steps=steps,
                time_limit=max(left, 0.0),
            )
            done += 1
            if best is None or state.key() < best[0].key():
                best = (state, converged, stats)
        assert best is not None
        state, converged, stats = best
        return _search_result(
            name, inst, state, converged, start_value, clock(), anneal_rounds=done, **stats
        )


SHIFT = frozenset({"time_limit", "hint"})

SOLVERS = [
    Solver(
        "greedy", "heuristic", run_greedy, "list scheduler: ready op starting the least new memory"
    ),
    Solver(
        "kahn",
        "heuristic",
        partial(run_kahn, tie="fifo", name="kahn"),
        "Kahn topological order, fifo ties (baseline)",
    ),
    Solver(
        "shift",
        "heuristic",
        partial(run_shift, start="best", name="shift"),
        "n-shift ladder local search from the best of greedy / Kahn fifo / Kahn filo",
        SHIFT,
    ),
    Solver(
        "shift-restart",
        "heuristic",
        partial(run_shift, start="best", ladder="restart", name="shift-restart"),
        "shift, dropping back to 1-shifts after every higher-level improvement",
        SHIFT,
    ),
    Solver(
        "shift-fifo",
        "heuristic",
        partial(run_shift, start="fifo", name="shift-fifo"),
        "shift from a Kahn fifo order",
        SHIFT,
    ),
    Solver(
        "shift-filo",
        "heuristic",
        partial(run_shift, start="filo", name="shift-filo"),
        "shift from a Kahn filo order",
        SHIFT,
    ),
    Solver(
        "shift-random",
        "heuristic",
        partial(run_shift, start="random", name="shift-random"),
        "shift from a seeded random Kahn order",
        SHIFT | {"seed"},
    ),
    Solver(
        "shift-anneal",
        "heuristic",
        partial(run_anneal, start="best", name="shift-anneal"),
        "simulated annealing over block moves (seeded), then a shift descent",
        SHIFT | {"seed"},
    ),
]
