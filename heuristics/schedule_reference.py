"""A seed-faithful reference of poprithms' `schedule::shift` (the seed's procedure), for comparison.

`shift` (heuristics/schedule_shift.py) explores the same rotations in its own order; this module
follows the seed's reference implementation step by step instead, so the benchmark and the tests
can hold `shift` to "at least as good as the seed's procedure":

- start: the greedy Kahn order of poprithms' default tie-breaker (`greedy_kahn`): of the ready
  ops, the one whose scheduling changes the live total the least (opens minus closes), ties to
  the one that became ready last;
- a round at level n visits the ops in one fixed random order, the one poprithms draws
  (`cxx_shuffle`: `std::shuffle` of libstdc++ with `std::mt19937`, seed 1, reproduced exactly);
  each visited op's current position starts a block of n ops, and only blocks holding a
  "susceptible" op (one next to a rotation of the previous round, or every op in a round that
  follows a change of level) are looked at;
- a block that can move at least n places in a direction tries every distance in that direction
  (also those below n), and takes the largest decrease: backwards first, the farthest of equal
  costs, then forwards if strictly better, the nearest of equal costs;
- rounds repeat at level n while they change something; a round without changes climbs to n + 1
  when nothing changed since the last return to level 1, else returns to level 1; the search
  ends when, after a climb, no block of the new level can move further than n places.

The costs are the exact incremental deltas of `schedule_kernels` (checked against recomputation
in the tests); only the control (start, visiting order, tie-breaking, ladder) is the seed's.
Sum-liveness only, as in poprithms. With the same visiting order it ends at poprithms' schedule
exactly (50 graphs of 100 and 1,000 ops, five families, `benchmarks/schedule_seed.py`), in
about 0.3-0.5x its time at 1,000 ops, 0.83-1.0x on grids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from tensorplan.heuristics import schedule_kernels as K
from tensorplan.heuristics.schedule_shift import ShiftState, compile_graph, work_budget
from tensorplan.problems.core import stopwatch
from tensorplan.problems.schedule import Graph

# rc[] slots: where a call stopped, so the next one resumes there
LEVEL, INDEX, CHANGES, UNCHANGED = range(4)


@njit(cache=True)
def greedy_kahn(g, n_ops):
    """poprithms' GREEDY Kahn tie-breaker: the ready op with the least (opened - closed) size,
    ties to the latest in the ready list (ops enter it in index order, then as they are freed)."""
    size, op_ptr, op_alloc, alloc_ptr = g.size, g.op_ptr, g.op_alloc, g.alloc_ptr
    indeg = np.zeros(n_ops, dtype=np.int64)
    for v in range(n_ops):
        indeg[v] = g.pred_ptr[v + 1] - g.pred_ptr[v]
    outstanding = np.zeros(size.shape[0], dtype=np.int64)
    for a in range(size.shape[0]):
        outstanding[a] = alloc_ptr[a + 1] - alloc_ptr[a]
    live = np.zeros(size.shape[0], dtype=np.bool_)
    ready = np.empty(n_ops, dtype=np.int64)
    m = 0
    for v in range(n_ops):
        if indeg[v] == 0:
            ready[m] = v
            m += 1
    order = np.empty(n_ops, dtype=np.int64)
    for t in range(n_ops):
        best = 0
        best_delta = 0
        for r in range(m):
            v = ready[r]
            delta = 0
            for i in range(op_ptr[v], op_ptr[v + 1]):
                a = op_alloc[i]
                if outstanding[a] == 1:
                    delta -= size[a]
                if not live[a]:
                    delta += size[a]
            if r == 0 or delta <= best_delta:
                best = r
                best_delta = delta
        v = ready[best]
        for r in range(best, m - 1):  # erase, keeping the list's order
            ready[r] = ready[r + 1]
        m -= 1
        order[t] = v
        for i in range(op_ptr[v], op_ptr[v + 1]):
            live[op_alloc[i]] = True
            outstanding[op_alloc[i]] -= 1
        m = K.release(g, v, indeg, ready, m)
    return order


@njit(cache=True)
def _uniform(mt, mti, r):  # pragma: no cover - compiled
    """libstdc++'s `uniform_int_distribution` on [0, r), r < 2**32, from a 32-bit engine
    (Lemire's multiply-and-reject)."""
    r64 = np.uint64(r)
    prod = np.uint64(K._mt_next(mt, mti)) * r64
    low = prod & np.uint64(0xFFFFFFFF)
    if low < r64:
        threshold = (np.uint64(1 << 32) - r64) % r64
        while low < threshold:
            prod = np.uint64(K._mt_next(mt, mti)) * r64
            low = prod & np.uint64(0xFFFFFFFF)
    return np.int64(prod >> np.uint64(32))


@njit(cache=True)
def cxx_shuffle(n, seed):  # pragma: no cover - compiled
    """0..n-1 as poprithms shuffles them: `std::shuffle` (libstdc++, GCC 12) with
    `std::mt19937(seed)`, which draws two swap positions per number while n * n < 2**32."""
    mt = np.empty(K.MT_N, dtype=np.int64)
    mt[0] = seed & 0xFFFFFFFF
    for i in range(1, K.MT_N):
        mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & 0xFFFFFFFF
    mti = np.array([K.MT_N], dtype=np.int64)
    v = np.arange(n)
    if n < 2:
        return v
    if (0xFFFFFFFF // n) >= n:
        i = 1
        if n % 2 == 0:
            j = _uniform(mt, mti, 2)
            v[1], v[j] = v[j], v[1]
            i = 2
        while i < n:
            r = i + 1
            x = _uniform(mt, mti, r * (r + 1))
            a, b = x // (r + 1), x % (r + 1)
            v[i], v[a] = v[a], v[i]
            v[i + 1], v[b] = v[b], v[i + 1]
            i += 2
        return v
    for i in range(1, n):
        j = _uniform(mt, mti, i + 1)
        v[i], v[j] = v[j], v[i]
    return v


@njit(cache=True)
def _best_shift(g, st, w, s, n):
    """poprithms' best rotation of block [s, s+n): (signed distance, cost, work); cost 0 if none."""
    dl = K.left_range(g, st, s, n)
    dr = K.right_range(g, st, s, n)
    best_dist = 0
    best_cost = 0
    work = n
    if dl < n and dr < n:
        return best_dist, best_cost, work
    k, kt = K.collect(g, st, w, s, n)
    work += kt
    delta = w.delta
    if dl >= n:  # backwards: proposed starts from the farthest to the nearest
        K.left_deltas(g, st, w, s, n, dl, k, 1)
        work += dl
        for d in range(dl, 0, -1):
            if delta[d - 1] < best_cost:
                best_cost = delta[d - 1]
                best_dist = -d
    if dr >= n:  # forwards: from the nearest, only a strictly better one replaces the best
        K.right_deltas(g, st, w, s, n, dr, k, 1)
        work += dr
        for d in range(1, dr + 1):
            if delta[d - 1] < best_cost:
                best_cost = delta[d - 1]
                best_dist = d
    return best_dist, best_cost, work


@njit(cache=True)
def _mark(g, st, sus, a, b):
    """poprithms' updateSusceptible(a, b): ops in [a, b) with a producer before a or a consumer
    at or after b, and those producers / consumers, become susceptible."""
    order, pos = st.order, st.pos
    for p in range(a, b):
        v = order[p]
        for i in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
            u = g.pred_idx[i]
            if pos[u] < a:
                sus[u] = 1
                sus[v] = 1
        for i in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            u = g.succ_idx[i]
            if pos[u] >= b:
                sus[u] = 1
                sus[v] = 1


@njit(cache=True)
def _can_go_beyond(g, st, w, n):
    """Whether some block of n ops can move more than n places (poprithms' end test)."""
    pos, edge_u, edge_v, diff = st.pos, g.edge_u, g.edge_v, w.diff
    n_ops = st.order.shape[0]
    m = n_ops - n + 1  # block starts 0 .. n_ops - n
    if m <= 0:
        return False
    for i in range(m + 1):
        diff[i] = 0
        w.buf[i] = 0
    for j in range(edge_u.shape[0]):
        pu = pos[edge_u[j]]
        pv = pos[edge_v[j]]
        # right by > n is blocked for starts i with i <= pu < i + n <= pv <= i + 2n
        lo = max(max(pu - n + 1, pv - 2 * n), 0)
        hi = min(min(pu, pv - n), m - 1)
        if lo <= hi:
            diff[lo] += 1
            diff[hi + 1] -= 1
        # left by > n is blocked for starts i with i - n - 1 <= pu < i <= pv < i + n
        lo = max(max(pv - n + 1, pu + 1), 0)
        hi = min(min(pv, pu + n + 1), m - 1)
        if lo <= hi:
            w.buf[lo] += 1
            w.buf[hi + 1] -= 1
    right = 0
    left = 0
    for i in range(m):
        right += diff[i]
        left += w.buf[i]
        if right == 0 and i + 2 * n + 1 <= n_ops:
            return True
        if left == 0 and i - n - 1 >= 0:
            return True
    return False


@njit(cache=True)
def seed_ladder(g, st, w, perm, sus, sus_now, rc, budget):
    """Run the seed's ladder from the saved cursor `rc` for about `budget` work; True once done."""
    meta, pos = st.meta, st.pos
    n_ops = st.order.shape[0]
    level, idx, changes, unchanged = rc[LEVEL], rc[INDEX], rc[CHANGES], rc[UNCHANGED]
    work = 0
    done = False
    while not done:
        while idx < n_ops and work < budget:
            s = pos[perm[idx]]
            idx += 1
            if s > n_ops - level:
                continue
            hit = False
            for p in range(s, s + level):
                if sus_now[st.order[p]]:
                    hit = True
                    break
            work += level
            if not hit:
                continue
            dist, cost, wk = _best_shift(g, st, w, s, level)
            work += wk
            meta[K.PROPOSALS] += 1
            if cost < 0:
                x0 = s if dist > 0 else s + dist  # the rotated window [x0, o1), cut at o0
                o0 = s + level if dist > 0 else s
                o1 = s + level + dist if dist > 0 else s + level
                _mark(g, st, sus, x0, o0)
                _mark(g, st, sus, o0, o1)
                K.move(g, st, w, s, level, dist)
                meta[K.SUM] += cost
                meta[K.MOVES] += 1
                changes += 1
                work += 2 * (o1 - x0)
        if idx < n_ops:
            break
        unchanged = unchanged and changes == 0
        if unchanged:
            level += 1
            sus[:] = 1
        elif changes == 0:
            level = 1
            unchanged = 1
            sus[:] = 1
        sus_now[:] = sus  # the next round looks at what this one marked (or at everything)
        sus[:] = 0
        idx = 0
        changes = 0
        work += n_ops
        if unchanged:
            work += g.edge_u.shape[0]
            done = not _can_go_beyond(g, st, w, level)
    rc[LEVEL], rc[INDEX], rc[CHANGES], rc[UNCHANGED] = level, idx, changes, unchanged
    return done


def seed_start(g: Graph) -> list[int]:
    """The seed's start order: poprithms' greedy Kahn (its default tie-breaker)."""
    return greedy_kahn(compile_graph(g), g.n).tolist()


class SeedDescent:
    """The seed's procedure from `order` (default: `seed_start`) as a descent that can be run in
    pieces (`step`), so `shift` can interleave it with its own search."""

    def __init__(self, g: Graph, order: Sequence[int] | None = None, *, seed: int = 1) -> None:
        self.state = ShiftState(g, seed_start(g) if order is None else order, "sum_liveness")
        self.args = (
            self.state.csr,
            self.state.arrays,
            self.state.work,
            cxx_shuffle(g.n, seed),
            np.zeros(g.n, dtype=np.int64),  # susceptible in the next round
            np.ones(g.n, dtype=np.int64),  # ... in this one
            np.array([1, 0, 0, 1], dtype=np.int64),  # the cursor (`rc`)
        )
        self.done = False

    def step(self, budget: int) -> bool:
        """Run the ladder for about `budget` work units; True once it has converged."""
        if not self.done:
            self.done = bool(seed_ladder(*self.args, budget))
        return self.done


def seed_shift(
    g: Graph,
    order: Sequence[int] | None = None,
    *,
    seed: int = 1,
    time_limit: float = 3600.0,
) -> tuple[ShiftState, bool]:
    """The seed's procedure from `order` (default: `seed_start`); (state, converged)."""
    descent = SeedDescent(g, order, seed=seed)
    with stopwatch() as clock:
        while not descent.step(work_budget(time_limit - clock())):
            if clock() > time_limit:
                return descent.state, False
    return descent.state, True
