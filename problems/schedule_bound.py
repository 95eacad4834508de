"""A Lagrangian lower bound for sum-liveness: the positional model, relaxed to a forest.

Sum-liveness is sum over allocs of size x (last use - first use + 1). When an alloc has a
producer (a user every other user descends from), its first use is the producer's position
`pos(p)`, and its last use is at least any convex combination of the positions of its other
users and hull members (`schedule.hulls`: each comes before some user), plus a correction for
their positions being distinct: with weights `lam` sorted in decreasing order,
`max pos >= sum lam_x pos(x) + sum_i lam_(i) * i` (rearrangement). So for any weights
the objective is at least a linear function of the positions, sum_j w_j pos(j) + c.

Minimising a linear function over the topological orders of a DAG is 1|prec, p=1|sum w_j C_j,
hard in general, but exact in O(n log n) over an out-forest (Horn's rule: the group of highest
weight per op follows its parent's group at once). Each op keeps one predecessor as its forest
parent; the other precedence edges `u -> v` are relaxed with multipliers `mu >= 0` on
`pos(u) - pos(v) + 1 <= 0`. Every (lam, mu) then gives a sound bound (the forest allows more
orders, and each relaxed term is <= 0 on a real order); projected subgradient ascent with
Polyak steps (Lagrangian relaxation, as issue 33 asks) improves it. Measured at 1,000 ops
against `shift` at 10 s: the gap on random trees falls from 60 % (hulls) to about 11 %, on
20 x 50 grids from 377 % to 85 % (`benchmarks/schedule.py --gaps`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from tensorplan.problems.core import compiled_within
from tensorplan.problems.schedule_cut import bound_of, cut_order, kahn_order, signature_bounds
from tensorplan.problems.schedule_lpcut import lp_cuts
from tensorplan.problems.schedule_tree import tree_optimum

if TYPE_CHECKING:
    from tensorplan.problems.schedule import ScheduleInstance

ITERATIONS = 3000
"""Subgradient steps per forest at most, when the time allows them (the steps are fixed from
the time share before starting). With `patience` growing with the steps, the bound keeps rising
past 300 steps: at 3,000, layered-20x50 21,146 -> 23,628, tree-1000 10,170 -> 10,252,
tree-5000 55,929 -> 56,837, bifurcating-8 9,703 -> 9,842."""

AIM = 1.5
"""From `AIM_AT` steps on the Polyak steps aim at this multiple of the best known objective,
not at the objective itself: aiming higher keeps the steps long enough to move. At 300 steps:
tree-1000 10,065 -> 10,170, layered-20x50 20,211 -> 21,146, tree-5000 54,744 -> 55,929; the
100-op graphs within 5 either way (1.1-3.0 tried: 1.5 was the best overall; at 3,000 steps 1.0
to 2.0 are within 1 % of each other). With few steps the long ones overshoot (tree-5000 at 50
steps: 52,134 aiming at the objective, 49,946 at 1.5x), so the aim falls linearly to 1 at
`AIM_FROM` steps (`aim`)."""

AIM_FROM, AIM_AT = 100, 300
"""Steps at and below which the Polyak steps aim at the best known objective itself, and from
which they aim at `AIM` times it."""


def aim(iterations: int) -> float:
    """The multiple of the best known objective the Polyak steps aim at, given the steps."""
    share = (iterations - AIM_FROM) / (AIM_AT - AIM_FROM)
    return 1.0 + (AIM - 1.0) * min(max(share, 0.0), 1.0)


PATIENCE = 10
"""Steps without a better bound after which the step length halves, at most `AIM_AT` steps."""


def patience(iterations: int) -> int:
    """`PATIENCE`, or with more steps one in 30 of them: halving after 10 idle steps ends a
    3,000-step run near where 1,000 end (layered-20x50: 21,504 at both; with patience 100,
    23,628; with 300, 20,539)."""
    return max(PATIENCE, iterations // 30)


MIN_ITERATIONS = 30
"""Fewer steps than this in the time given: no bound is computed (too far from converged)."""

UNIT_S = 2e-7
"""Seconds per step per unit of work (2 x ops + weighted entries + relaxed edges), with a 1.5x
margin over what this machine measured (1,000-op tree: 0.5 ms a step; 5,000-op grid: 4 ms):
the steps that fit in a solver's share of its limit, decided before starting (so the bound is
the same on every run)."""

LOAD_S, COMPILE_S = 1.0, 30.0
"""Time left that loading the compiled kernels from numba's cache, or compiling them, needs."""

SUPPORT_PER_OP = 32
"""Hull members join an alloc's weighted set while the sets hold at most this many entries per
op on average (else users only): dense DAGs have hulls of many ops."""


@njit(cache=True)
def _horn(parent, w, pos, key, item, stamp):  # pragma: no cover - compiled
    """`pos` (1..n): an order of the out-forest `parent` (-1: a root) minimising sum w_j pos(j)
    (Horn 1972, unit times: repeatedly append the group of highest mean weight to its parent's
    group). `key`, `item`, `stamp`: scratch of 2n entries (a max-heap of groups with lazy
    deletion: an entry is current while its stamp matches the group's)."""
    n = len(parent)
    root = n
    weight = np.zeros(n + 1)
    count = np.ones(n + 1, dtype=np.int64)
    head = np.arange(n + 1)
    tail = np.arange(n + 1)
    nxt = np.full(n + 1, -1, dtype=np.int64)
    group = np.arange(n + 1)
    version = np.zeros(n + 1, dtype=np.int64)
    for j in range(n):
        weight[j] = w[j]
        key[j] = w[j]
        item[j] = j
        stamp[j] = 0
    size = n
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(key, item, stamp, size, i)
    while size > 0:
        j = item[0]
        ver = stamp[0]
        size -= 1
        key[0], item[0], stamp[0] = key[size], item[size], stamp[size]
        _sift_down(key, item, stamp, size, 0)
        if group[j] != j or ver != version[j]:
            continue
        g = root if parent[j] < 0 else parent[j]
        while group[g] != g:  # find, halving the path
            group[g] = group[group[g]]
            g = group[g]
        nxt[tail[g]] = head[j]
        tail[g] = tail[j]
        weight[g] += weight[j]
        count[g] += count[j]
        group[j] = g
        if g != root:
            version[g] += 1
            i = size
            size += 1
            key[i], item[i], stamp[i] = weight[g] / count[g], g, version[g]
            while i > 0:  # sift up
                up = (i - 1) // 2
                if key[i] > key[up] or (key[i] == key[up] and item[i] < item[up]):
                    key[i], key[up] = key[up], key[i]
                    item[i], item[up] = item[up], item[i]
                    stamp[i], stamp[up] = stamp[up], stamp[i]
                    i = up
                else:
                    break
    x = nxt[head[root]]
    k = 1
    while x != -1:
        pos[x] = k
        k += 1
        x = nxt[x]


@njit(cache=True)
def _sift_down(key, item, stamp, size, i):  # pragma: no cover - compiled
    """Restore the max-heap (on `key`, ties to the lower `item`; `stamp` moves with its entry)
    below slot i."""
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        top = left
        right = left + 1
        if right < size and (
            key[right] > key[left] or (key[right] == key[left] and item[right] < item[left])
        ):
            top = right
        if key[top] > key[i] or (key[top] == key[i] and item[top] < item[i]):
            key[i], key[top] = key[top], key[i]
            item[i], item[top] = item[top], item[i]
            stamp[i], stamp[top] = stamp[top], stamp[i]
            i = top
        else:
            return


@njit(cache=True)
def _ranked(lam, lo, hi, idx):  # pragma: no cover - compiled
    """idx[:hi - lo]: the offsets of lam[lo:hi] by decreasing value, ties by offset."""
    k = hi - lo
    if k > 16:
        idx[:k] = np.argsort(-lam[lo:hi], kind="mergesort")
        return
    for i in range(k):
        j = i
        while j > 0 and lam[lo + idx[j - 1]] < lam[lo + i]:
            idx[j] = idx[j - 1]
            j -= 1
        idx[j] = i


@njit(cache=True)
def _project(v):  # pragma: no cover - compiled
    """Euclidean projection of `v` onto the probability simplex, in place."""
    u = np.sort(v)[::-1]
    css = 0.0
    theta = 0.0
    for i in range(len(u)):
        css += u[i]
        t = (css - 1.0) / (i + 1)
        if u[i] - t > 0:
            theta = t
    for i in range(len(v)):
        v[i] = max(v[i] - theta, 0.0)


@njit(cache=True)
def _ascent(
    parent, prod, ptr, support, size, rel_u, rel_v, const, upper, exact, iterations, target, idle
):  # pragma: no cover - compiled
    """The best bound (a float, before rounding) over `iterations` subgradient steps, and the
    least objective of the forest orders met that were real orders (when `exact`: every alloc
    is in `prod`, so `const` is 0; `upper` if none was). The steps aim at `target` x `upper`
    and halve after `idle` steps without a better bound."""
    n = len(parent)
    m = len(prod)
    lam = np.empty(len(support))
    width = 1
    for a in range(m):
        k = ptr[a + 1] - ptr[a]
        width = max(width, k)
        for e in range(ptr[a], ptr[a + 1]):
            lam[e] = 1.0 / k
    idx = np.empty(width, dtype=np.int64)
    mu = np.zeros(len(rel_u))
    w = np.empty(n)
    pos = np.zeros(n, dtype=np.int64)
    key = np.empty(n + 1)
    item = np.empty(n + 1, dtype=np.int64)
    stamp = np.empty(n + 1, dtype=np.int64)
    rank = np.empty(len(support), dtype=np.int64)  # each entry's place by decreasing lam
    grad = np.empty(len(support))
    gmu = np.empty(len(rel_u))
    total = 0.0
    for a in range(m):
        total += size[a]
    best = -np.inf
    theta = 2.0
    stall = 0
    for _ in range(iterations):
        w[:] = 0.0
        c = const
        for a in range(m):
            lo, hi = ptr[a], ptr[a + 1]
            s = size[a]
            w[prod[a]] -= s
            _ranked(lam, lo, hi, idx)
            corr = 0.0
            for i in range(hi - lo):
                corr += lam[lo + idx[i]] * i
                rank[lo + idx[i]] = i
            c += s * (1.0 + corr)
            for e in range(lo, hi):
                w[support[e]] += s * lam[e]
        for r in range(len(rel_u)):
            w[rel_u[r]] += mu[r]
            w[rel_v[r]] -= mu[r]
            c += mu[r]
        _horn(parent, w, pos, key, item, stamp)
        val = c
        for j in range(n):
            val += w[j] * pos[j]
        if val > best:
            best = val
            stall = 0
        else:
            stall += 1
            if stall >= idle:
                theta /= 2.0
                stall = 0
                if theta < 1e-6:  # the steps no longer move the bound
                    break
        real = True
        for r in range(len(rel_u)):
            if pos[rel_u[r]] >= pos[rel_v[r]]:
                real = False
                break
        if real and exact:  # a real order: its objective bounds the optimum from above
            obj = total
            for a in range(m):
                top = pos[prod[a]]
                for e in range(ptr[a], ptr[a + 1]):
                    top = max(top, pos[support[e]])
                obj += size[a] * (top - pos[prod[a]])
            upper = min(upper, obj)
        norm = 0.0
        for a in range(m):
            lo, hi = ptr[a], ptr[a + 1]
            mean = 0.0
            for e in range(lo, hi):  # lam has not moved since `rank` was taken
                grad[e] = size[a] * (pos[support[e]] + rank[e])
                mean += grad[e]
            mean /= hi - lo
            for e in range(lo, hi):
                grad[e] -= mean
                norm += grad[e] * grad[e] / (size[a] * size[a])
        for r in range(len(rel_u)):
            gmu[r] = pos[rel_u[r]] - pos[rel_v[r]] + 1.0
            if mu[r] <= 0.0 and gmu[r] < 0.0:
                gmu[r] = 0.0
            norm += gmu[r] * gmu[r]
        if norm <= 0.0 or upper <= best:
            break
        step = theta * (target * upper - val) / norm
        for a in range(m):
            lo, hi = ptr[a], ptr[a + 1]
            for e in range(lo, hi):
                lam[e] += step * grad[e] / (size[a] * size[a])
            if hi - lo > 1:
                _project(lam[lo:hi])
            else:
                lam[lo] = 1.0
        for r in range(len(rel_u)):
            mu[r] = max(mu[r] + step * gmu[r], 0.0)
    return best, upper


def positional_bound(
    preds: tuple[tuple[int, ...], ...],
    alloc_ops: tuple[tuple[int, ...], ...],
    sizes: tuple[int, ...],
    hull: list[int],
    descendants: list[int],
    upper: int,
    *,
    seconds: float = math.inf,
    iterations: int | None = None,
) -> int:
    """The Lagrangian bound (module docstring) of a sum-liveness instance given as its graph's
    parts, the allocs' hulls and the ops' descendants as bit sets (`schedule.hulls`,
    `schedule.reachability`), or 0 when too few steps fit in `seconds`. `upper` is the
    objective of some real order (it sets the step sizes); `iterations`: steps per forest
    (default: `ITERATIONS`, fewer if `seconds` asks). Allocs without a producer count their
    hull only. Two forests are tried, each op keeping its latest or its earliest predecessor
    in Kahn's order: which one binds depends on the graph (a grid's rows or its columns), and
    the bound is the better of the two."""
    n = len(preds)
    if n == 0:
        return 0
    const = 0
    prod: list[int] = []
    ptr = [0]
    support: list[int] = []
    weights: list[int] = []
    budget = SUPPORT_PER_OP * n
    total_hull = sum(h.bit_count() for h in hull)
    rank = np.empty(n, dtype=np.int64)
    rank[kahn_order(preds)] = np.arange(n)
    for vs, s, h in zip(alloc_ops, sizes, hull, strict=True):
        # a producer comes first in every order, so in Kahn's: only that user can be one
        p = min(vs, key=lambda u: rank[u]) if vs else -1
        users = sum(1 << u for u in vs)
        if len(vs) <= 1 or users & ~descendants[p] != 1 << p:
            const += s * max(h.bit_count(), 1)
            continue
        members = (h if total_hull <= budget else users) & ~(1 << p)
        support += _bits(members)
        ptr.append(len(support))
        prod.append(p)
        weights.append(s)
    if not prod:
        return const
    relaxed = sum(max(len(ps) - 1, 0) for ps in preds)
    forests = 2 if relaxed else 1
    if iterations is None:
        fit = seconds / (forests * UNIT_S * (2 * n + len(support) + relaxed))
        iterations = int(min(ITERATIONS, fit))
        if iterations < MIN_ITERATIONS:
            return 0
    best = -math.inf
    for sign in (1, -1):  # keep the latest predecessor, then the earliest
        parent = np.full(n, -1, dtype=np.int64)
        rel_u: list[int] = []
        rel_v: list[int] = []
        for v, ps in enumerate(preds):
            if ps:
                keep = max(ps, key=lambda u: sign * rank[u])
                parent[v] = keep
                rel_u += [u for u in ps if u != keep]
                rel_v += [v] * (len(ps) - 1)
        value, _ = _ascent(
            parent,
            np.asarray(prod, dtype=np.int64),
            np.asarray(ptr, dtype=np.int64),
            np.asarray(support, dtype=np.int64),
            np.asarray(weights, dtype=np.float64),
            np.asarray(rel_u, dtype=np.int64),
            np.asarray(rel_v, dtype=np.int64),
            float(const),
            float(upper),
            const == 0,
            iterations,
            aim(iterations),
            patience(iterations),
        )
        best = max(best, value)
        if not rel_u:  # a forest already: the other choice is the same
            break
    # floats: keep clear of rounding (values below 2**53, errors far below this margin)
    return max(0, math.ceil(best - 1e-9 * abs(best) - 1.0))


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def lagrangian_bound(inst: ScheduleInstance, upper: int, seconds: float) -> int:
    """The sum-liveness bound a solver reports: the hull bound (`schedule.lower_bound`) or the
    Lagrangian one (`positional_bound`, as many steps as fit in `seconds`), whichever is
    higher; `upper`: the objective of some order (the solver's). The hull bound alone for peak
    instances, beyond `schedule.HULL_MAX_OPS` ops, or when the compiled kernels cannot be
    loaded in the time."""
    from tensorplan.problems import schedule

    base = schedule.lower_bound(inst)
    g = inst.graph
    if inst.objective != "sum_liveness" or g.n > schedule.HULL_MAX_OPS or upper <= base:
        return base
    started = time.perf_counter()
    if not kernels_ready(seconds):
        return base
    reach = schedule.reachability(g)
    hull = schedule.hulls(g, reach)
    left = seconds - (time.perf_counter() - started)
    found = positional_bound(g.preds, g.alloc_ops, g.sizes, hull, reach[1], upper, seconds=left)
    return max(base, found)


TREE_SHARE = 0.5
"""Of a solver's bound time, what `search_bound` offers the exact out-tree optimum
(`schedule_tree.tree_optimum`, sum-liveness) first: it returns at once on other graphs, and
takes 0.3 s on a 1,000-op tree, 1.1 s on a 5,000-op one; when it does not finish, the other
bounds get the rest."""

TREE_S_PER_OP = 2.5e-4
"""Seconds an op below which `search_bound` does not try the tree optimum (it needed 2.2-3e-4
on random trees): at 10 s a 5,000-op tree's half of the 1 s share cut it off, and the
Lagrangian bound, left 0.5 s, fell from 54,168 to 53,563."""

CUT_SHARE = 0.7
"""Of a solver's bound time (after loading the Lagrangian kernels), what `search_bound` offers
the exact cut DP (`schedule_cut.best_cuts`) first. It takes what it needs: on a 1,000-op grid
it completes in ~0.2 s; elsewhere it may give up early (its states explode, or its pace says it
would not finish)."""

SIGNATURE_SHARE = 0.8
"""When the cut DP completes, the share of the time left that the signature bounds get
(`schedule_cut.signature_bounds`, the same DP counting the ops of two chains too; the
Lagrangian bound gets the rest). Where the DP completes (grids, recompute graphs, small graphs)
the Lagrangian bound is far below it: 1,000-op grid 31,634 in 6 s against the cut bound's
46,779 and the signature's 47,621 (both chains, 1.7 s)."""

SIGNATURE_LIFT = 0.1
"""The signature bounds run only when the cut bound, lifted by this share, would pass the best
bound so far: they lift it by 2-5 % (20 x 50 grids 47,621 and 125,577 against 46,779 and
122,466; bifurcating-8 14,162 against 13,469), so on trees, whose cut bound is far below the
hull bound (tree-5000: 30,555 in 2.6 s against 34,756), the Lagrangian bound keeps their time."""

LAGRANGIAN_SHARE = 0.5
"""When the cut DP gives up, the share of the time left that the Lagrangian bound gets first
(sum-liveness); the cuts' linear relaxation (`schedule_lpcut`) gets the rest. Each is far the
better on some graphs (bifurcating-11 at 10 s: 84,559 from the Lagrangian, nothing above the
hull bound from the relaxation; layered-20x50: 35,510 from the relaxation, 23,628 from the
Lagrangian), and the relaxation taking the whole share left the Lagrangian too few steps."""


RELAX_S = 1e-7
"""Seconds per op squared below which the cuts' relaxation is skipped (its time goes to the
Lagrangian bound): its programs grow with the ops and it needs a number of them that grows too.
Measured (`lp_cuts` alone, to pass the hull bound): 0.1 s at 1,000 ops, 0.5 s at 2,000 and
2-3 s at 5,000 (adversary-5000 at 1 s: 2,363,760 against the hull's 18,604,145)."""


def search_bound(inst: ScheduleInstance, upper: int, seconds: float) -> int | None:
    """The bound a search solver reports within `seconds`: on an out-tree (sum-liveness) its
    optimum (`schedule_tree`, with `TREE_SHARE` of the time), else the highest of the hull bound
    (`schedule.lower_bound`), the cut bound (`schedule_cut`, both objectives; the exact DP
    first, with `CUT_SHARE` of the time; where it completes, the signature bounds with
    `SIGNATURE_SHARE` of the rest, unless `SIGNATURE_LIFT` says they cannot help), the
    Lagrangian one (`lagrangian_bound`, sum-liveness; its kernels are loaded before the cut DP
    starts) and, when the DP gives up, the bound from
    the cuts' linear relaxation (`schedule_lpcut.lp_cuts`, after the Lagrangian's
    `LAGRANGIAN_SHARE`, if the rest holds `RELAX_S`). `upper`: the objective of some order
    (the solver's); the work stops once a bound reaches it. None when not even the hull bound
    fits (`HULL_S_PER_OP`; once computed, the instance keeps it)."""
    from tensorplan.problems import schedule

    started = time.perf_counter()
    g = inst.graph
    n = g.n

    def left() -> float:
        return seconds - (time.perf_counter() - started)

    if "lower_bound" not in vars(inst) and seconds < HULL_S_PER_OP * n:
        return None
    best = schedule.lower_bound(inst)
    if upper <= best:
        return best
    if inst.objective == "sum_liveness" and TREE_SHARE * left() >= TREE_S_PER_OP * n:
        exact = tree_optimum(g, TREE_SHARE * left())
        if exact is not None:  # an out-tree: its optimum, nothing higher to find
            return max(best, exact[0])
    lagrangian = inst.objective == "sum_liveness" and kernels_ready(seconds)
    cuts = None
    if not too_short(n, CUT_SHARE * left()):
        found = cut_order(g, CUT_SHARE * left())
        if found is not None:
            order, cuts = found
            cut = bound_of(g, cuts, inst.objective)
            best = max(best, cut)
            lifts = cut * (1 + SIGNATURE_LIFT) > best
            if upper > best and lifts and not too_short(n, SIGNATURE_SHARE * left()):
                signed = signature_bounds(g, order, inst.objective, SIGNATURE_SHARE * left())
                if signed is not None:
                    best = max(best, signed.bound(g, inst.objective))
    relax = cuts is None and left() * (1 - LAGRANGIAN_SHARE * lagrangian) >= RELAX_S * n * n
    share = left() * (LAGRANGIAN_SHARE if relax else 1.0)
    if upper > best and lagrangian and not too_short(n, share):
        best = max(best, lagrangian_bound(inst, upper, share))
    if upper > best and relax:
        relaxed = lp_cuts(g, left())
        if relaxed is not None:
            best = max(best, bound_of(g, relaxed, inst.objective))
    return best


SETUP_S_PER_OP = 2e-5
"""Below this many seconds an op, `search_bound` skips the cut and the Lagrangian bounds: given
no time at all, they still took 8.5 and 5.7 ms at 1,000 ops (46 ms Lagrangian at 5,000) and gave
nothing, so `shift` at a 0.142 s limit on adversary-1000 ran to 0.149 s. At 1e-5 (10 ms at 1,000
ops), `shift` at 0.17 s on a 1,000-op grid still gave them 17 ms: 19 ms spent, nothing gained
(the Lagrangian needs 30 steps of about 1 ms there, the grid's cut DP 0.2 s), and the solve ran
to 0.177 s."""


HULL_S_PER_OP = 3e-6
"""Seconds an op that the hull bound (`schedule.lower_bound`) may take the first time (1.5 ms
at 1,000 ops measured; its hulls are bit sets over the graph's reachability)."""


def too_short(n: int, seconds: float) -> bool:
    """Whether `seconds` are too few for the cut or the Lagrangian bound of an `n`-op graph
    (`SETUP_S_PER_OP`): what they take before they can read the clock."""
    return seconds < SETUP_S_PER_OP * n


def kernels_ready(seconds: float) -> bool:
    """Load or compile the kernels if `seconds` allow it (else the caller goes without)."""
    return compiled_within([_ascent], seconds, LOAD_S, COMPILE_S, warm)


def warm() -> None:
    """Compile (or load from numba's cache) the kernels on a three-op graph with a relaxed
    edge."""
    preds: tuple[tuple[int, ...], ...] = ((), (0,), (0, 1))
    alloc_ops = ((0, 1, 2), (1, 2))
    reach = ([0, 1, 3], [6, 4, 0])
    positional_bound(preds, alloc_ops, (2, 1), [7, 6], reach[1], 10, iterations=2)
