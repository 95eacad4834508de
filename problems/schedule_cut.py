"""Cut bounds for both schedule objectives: the lightest prefix cut of every size.

Let D_k be the first k ops of an order and cross(I) the total size of the allocs with users both
in I and outside it. An alloc live from position f to l crosses D_k exactly for k in f+1..l, so
sum-liveness = (sizes of the used allocs) + sum over k = 1..n-1 of cross(D_k), and the op at
position k runs while the allocs crossing D_k are live, so peak >= cross(D_k). Every prefix is an
ideal of the DAG (closed under predecessors) and every ideal is some order's prefix, so with
cut(k) = min cross(I) over the ideals I of k ops both objectives are bounded from below: the sum
of the cuts (plus the sizes) and their maximum. On 20 x 50 grids this is within 6 % of `shift`
where the Lagrangian bound (`schedule_bound`) is 85 % below it.

`prefix_cuts` computes cut(k) for every k at once and exactly, by dynamic programming over the
ops in a fixed topological order (a frontier DP, as in a decision diagram). A state holds what
the rest of the order needs to know of the ops decided so far: which open ops are outside I
(their successors must stay out) and, for each open alloc, whether its decided users are all in
or all out (the alloc is charged when the other side appears, then forgotten). Each state keeps
the least charge per number of ops in I. The states multiply with the antichains the frontier
cuts through: a depth-first order keeps a 20 x 50 grid at ~120 states, while random layered
DAGs explode; past `MAX_STATES` or out of time the DP gives up (None) rather than relax, so what
it returns is exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tensorplan.problems.schedule import Graph

MAX_STATES = 3_000
"""States per step beyond which `prefix_cuts` gives up: the work per step is states x ops."""

PACE_AFTER = 10
"""From step n / PACE_AFTER on, the DP gives up when its pace so far (seconds per step, which
only grows) says it would not finish in time: the time is then the next bound's."""

INF = 2**62
"""Charge of an impossible (state, count): sizes add up to at most 2**53 (`ScheduleInstance`),
so the charges added along a path never carry it past 2**63."""

OUT, ALL_IN, ALL_OUT = 1, 1, 2
"""State codes: an open op is OUT (1) or not known to be (0); an open alloc's decided users are
ALL_IN (1), ALL_OUT (2), or 0 (charged already, nothing more to learn)."""


def depth_first(g: Graph, *, last_first: bool) -> list[int]:
    """A topological order that always runs a ready successor of the latest op next (the
    highest-index one if `last_first`, else the lowest): its frontier follows one path through
    the DAG, which keeps the states of grids and trees few."""
    indeg = [len(p) for p in g.preds]
    stack = [v for v in reversed(range(g.n)) if indeg[v] == 0]
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for w in g.succs[v] if last_first else reversed(g.succs[v]):
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    return order


def frontier_width(g: Graph, order: Sequence[int]) -> int:
    """The most allocs open at once along `order` (some users run, some not): a cheap proxy for
    how many states `prefix_cuts` needs with it."""
    pos = [0] * g.n
    for p, v in enumerate(order):
        pos[v] = p
    diff = [0] * (g.n + 1)
    for vs in g.alloc_ops:
        if len(vs) > 1:
            diff[min(pos[u] for u in vs)] += 1
            diff[max(pos[u] for u in vs)] -= 1
    width = best = 0
    for d in diff:
        width += d
        best = max(best, width)
    return best


def prefix_cuts(
    g: Graph,
    order: Sequence[int],
    *,
    seconds: float = float("inf"),
    max_states: int = MAX_STATES,
) -> np.ndarray | None:
    """cut(k) for k = 0..n (int64; see the module's docstring), by the frontier DP over the
    topological `order`; None when a step holds more than `max_states` states, or `seconds` run
    out first (or, a tenth of the way in, its pace so far says they would)."""
    deadline = time.perf_counter() + seconds
    n = g.n
    pos = [0] * n
    for p, v in enumerate(order):
        pos[v] = p
    op_last = [max((pos[w] for w in g.succs[v]), default=-1) for v in range(n)]
    users = [sorted(pos[u] for u in vs) for vs in g.alloc_ops]
    frontier: list[int] = []  # keys: op v, or n + alloc a
    states: dict[tuple[int, ...], np.ndarray] = {(): np.zeros(1, dtype=np.int64)}
    started = time.perf_counter()
    for t, v in enumerate(order):
        now = time.perf_counter()
        if now > deadline or (t >= max(n // PACE_AFTER, 1) and (now - started) * n / t > seconds):
            return None  # out of time, or at this pace it would be
        slot = {key: i for i, key in enumerate(frontier)}
        out_preds = [slot[u] for u in g.preds[v] if u in slot]
        touched: list[tuple[int, int]] = []  # (slot, size) of the open allocs v uses
        opened: list[int] = []  # allocs v opens (first user, more to come)
        closing = {u for u in g.preds[v] if op_last[u] == t}
        for a in g.op_allocs[v]:
            if n + a in slot:
                touched.append((slot[n + a], g.sizes[a]))
            elif users[a][-1] > t:
                opened.append(n + a)
            if users[a][-1] == t:
                closing.add(n + a)
        kept = [key for key in frontier if key not in closing]
        keep = [slot[key] for key in kept]
        frontier = kept + opened + ([v] if op_last[v] > t else [])
        has_succ = op_last[v] > t
        tail_in = (ALL_IN,) * len(opened) + ((0,) if has_succ else ())
        tail_out = (ALL_OUT,) * len(opened) + ((OUT,) if has_succ else ())
        nxt: dict[tuple[int, ...], np.ndarray] = {}
        for st, vec in states.items():
            for inside in (True, False):
                if inside and any(st[i] == OUT for i in out_preds):
                    continue  # a predecessor is outside I: v must be too
                s = list(st)
                charge = 0
                crossing = ALL_OUT if inside else ALL_IN  # charged when met
                for i, size in touched:
                    if s[i] == crossing:
                        charge += size
                        s[i] = 0
                key = tuple([s[i] for i in keep]) + (tail_in if inside else tail_out)
                new = np.empty(len(vec) + 1, dtype=np.int64)
                if inside:
                    new[0] = INF
                    np.add(vec, charge, out=new[1:])
                else:
                    new[-1] = INF
                    np.add(vec, charge, out=new[:-1])
                old = nxt.get(key)
                if old is None:
                    nxt[key] = new
                else:
                    np.minimum(old, new, out=old)
        if len(nxt) > max_states:
            return None
        states = nxt
    best = np.full(n + 1, INF, dtype=np.int64)
    for vec in states.values():
        np.minimum(best, vec, out=best)
    return best


def best_cuts(g: Graph, seconds: float) -> np.ndarray | None:
    """cut(k) for k = 0..n from the first of three orders (depth first either way, Kahn's least
    index first; narrowest `frontier_width` first) whose DP completes within `seconds`; None if
    none does."""
    from tensorplan.problems.schedule_bound import kahn_order

    deadline = time.perf_counter() + seconds
    orders = [
        depth_first(g, last_first=True),
        depth_first(g, last_first=False),
        kahn_order(g.preds),
    ]
    for order in sorted(orders, key=lambda o: frontier_width(g, o)):
        cuts = prefix_cuts(g, order, seconds=deadline - time.perf_counter())
        if cuts is not None:
            return cuts
    return None


def used_size(g: Graph) -> int:
    """Total size of the allocs some op uses (each is live at one position at least)."""
    return sum(s for s, vs in zip(g.sizes, g.alloc_ops, strict=True) if vs)


def cut_bound(g: Graph, objective: str, seconds: float) -> int | None:
    """The cut bound of `objective` (see the module's docstring) from `best_cuts`; None if no
    order's DP completes within `seconds`."""
    cuts = best_cuts(g, seconds)
    if cuts is None:
        return None
    if objective == "peak":
        return int(cuts.max(initial=0))
    return used_size(g) + int(cuts[1:-1].sum(dtype=object))
