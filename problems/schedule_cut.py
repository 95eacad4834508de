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
it returns is exact; `cut_values` then takes lower bounds on each cut(k) from its linear
relaxation (`schedule_lpcut`) instead. The steps run compiled (numba): 0.2 s for a 20 x 50
grid, 3 s for 100 x 50 (the pure-Python loop took 0.4 s and 23 s).

Where it completes, `signature_bound` keeps the cuts of neighbouring sizes consistent: the same
DP also counts the ops of one or more disjoint sets (two chains, `boundary_chains`), whose
numbers in a schedule's prefixes move by one at most a step, one at a time, and a path over
(size, counts) replaces each size's independent minimum (docs/design/schedule_cut.md).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from tensorplan.problems.core import compiled_within
from tensorplan.problems.schedule_lpcut import lp_cuts

if TYPE_CHECKING:
    from tensorplan.problems.schedule import Graph

MAX_STATES = 3_000
"""States per step beyond which `prefix_cuts` gives up: the work per step is states x ops."""

COST_BYTES = 2**28
"""Memory for one set of cost rows at most: the state cap shrinks on large graphs so that the
rows (3 per state at most, n + 1 counts each) stay within it (5,000 ops: 2,236 states)."""

MAX_WIDTH = 500
"""Orders that keep more allocs open at once are not tried: their states would explode (and
setting up their steps alone takes seconds at 5,000 ops)."""

PACE_AFTER = 10
"""From step n / PACE_AFTER on, the DP gives up when its pace so far (seconds per step, which
only grows) says it would not finish in time: the time is then the next bound's."""

MAX_COUNT = 127
"""Ops a counter of `prefix_cuts` may count: its count sits in a state's int8 slot."""

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


def kahn_order(preds: tuple[tuple[int, ...], ...]) -> list[int]:
    """Kahn's topological order, the least index first among the ready ops."""
    n = len(preds)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in preds]
    for v, ps in enumerate(preds):
        for u in ps:
            succs[u].append(v)
    ready = [v for v in range(n) if indeg[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for x in succs[v]:
            indeg[x] -= 1
            if indeg[x] == 0:
                heapq.heappush(ready, x)
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
    counters: Sequence[Sequence[int]] = (),
) -> np.ndarray | None:
    """cut(k) for k = 0..n (int64; see the module's docstring), by the frontier DP over the
    topological `order`; None when a step holds more than `max_states` states, or `seconds` run
    out first (or, a tenth of the way in, its pace so far says they would). The steps run in
    a compiled kernel (`_steps`), in chunks between which the clock is read.

    With `counters` (sets of ops, m_1, ..., m_c ops each), the lightest cut of every size k
    holding exactly a_i ops of each set i, at [a_1, ..., a_c, k] (INF where no ideal does): each
    state keeps its counts in its first slots, so a state splits by its counts (the cap on
    states is `max_states` times the counts' combinations, within `COST_BYTES`) while its row
    of costs stays n + 1 long."""
    started = time.perf_counter()
    if not kernel_ready(seconds):
        return None
    sets = [sorted(set(ops)) for ops in counters]
    if any(len(ops) > MAX_COUNT for ops in sets):
        raise ValueError(f"a counter counts {MAX_COUNT} ops at most")
    steps = _Steps.of(g, order, deadline=started + seconds, counters=sets)
    if steps is None:
        return None
    n = g.n
    length = n + 1
    splits = math.prod(len(ops) + 1 for ops in sets)
    max_states = min(max_states * splits, COST_BYTES // (3 * 8 * length))  # rows of int64 costs
    rows = max(min(64, max_states), 1)
    buffers = _buffers(rows, steps.width, length) + _buffers(rows, steps.width, length)
    buffers[1][0, 0] = 0  # one state: nothing decided, no charge, no op in I
    count = 1
    chunk = max(n // CHUNKS, 1)
    for t in range(0, n, chunk):
        elapsed = time.perf_counter() - started
        if elapsed > seconds or (t >= max(n // PACE_AFTER, 1) and elapsed * n / t > seconds):
            return None  # out of time, or at this pace it would be
        result = _steps(steps.arrays, t, min(t + chunk, n), *buffers, count, max_states)
        buffers, count = result[:8], result[8]
        if count < 0:
            return None
    codes, costs, lo, hi = buffers[:4]
    best = np.full((*(len(ops) + 1 for ops in sets), length), INF, dtype=np.int64)
    for i in range(count):
        at = best[tuple(int(x) for x in codes[i, : len(sets)])]
        span = slice(lo[i], hi[i] + 1)
        np.minimum(at[span], costs[i, span], out=at[span])
    return best


Buffers = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""One set of states: codes, costs, and each cost row's finite range (first, last count)."""


def _buffers(rows: int, width: int, length: int) -> Buffers:
    """Room for `rows` states: codes, costs (rows of `length` counts, all infinite), and each
    cost row's range (first and last count it may hold finite)."""
    return (
        np.zeros((rows, max(width, 1)), dtype=np.int8),
        np.full((rows, length), INF, dtype=np.int64),
        np.zeros(rows, dtype=np.int64),
        np.zeros(rows, dtype=np.int64),
    )


LOAD_S, COMPILE_S = 1.0, 10.0
"""Time left that loading the compiled kernel from numba's cache (measured 0.2 s), or compiling
it (4.7 s), needs: with less, `prefix_cuts` goes without (None)."""


def kernel_ready(seconds: float) -> bool:
    """Load or compile the DP's kernel if `seconds` allow it."""
    return compiled_within([_steps], seconds, LOAD_S, COMPILE_S, warm)


def warm() -> None:
    """Compile (or load from numba's cache) the DP's kernel, on a two-op chain."""
    from tensorplan.problems.schedule import Graph

    g = Graph(((), (0,)), ((1,), ()), ((0, 1),), ((0,), (0,)), (1,))
    steps = _Steps.of(g, [0, 1], deadline=math.inf)
    assert steps is not None
    buffers = _buffers(2, steps.width, 3) + _buffers(2, steps.width, 3)
    _steps(steps.arrays, 0, 2, *buffers, 1, MAX_STATES)


CHUNKS = 50
"""`prefix_cuts` runs its steps in this many chunks, reading the clock between them."""


@dataclass(frozen=True)
class _Steps:
    """What each step of the DP does to the frontier (its slots: open ops, open allocs), as
    flat arrays with offsets per step: the slots of the op's predecessors, of the open allocs it
    uses (with their sizes), the slots kept for the next step, how many allocs it opens,
    whether the op itself stays open (it has successors still to come), and which counters
    count it (bit c: counter c, whose count sits in slot c of every state: `prefix_cuts`)."""

    arrays: tuple[np.ndarray, ...]
    width: int  # the most slots at once

    @staticmethod
    def of(
        g: Graph,
        order: Sequence[int],
        *,
        deadline: float,
        counters: Sequence[Sequence[int]] = (),
    ) -> _Steps | None:
        """The steps along `order` with `counters` (sets of ops, each counted in its own slot);
        None if the clock passes `deadline` (perf_counter) first."""
        n = g.n
        counted = np.zeros(n, dtype=np.int64)
        for c, ops in enumerate(counters):
            for v in set(ops):
                counted[v] |= 1 << c
        counted = counted[list(order)]
        pos = [0] * n
        for p, v in enumerate(order):
            pos[v] = p
        op_last = [max((pos[w] for w in g.succs[v]), default=-1) for v in range(n)]
        last_use = [max((pos[u] for u in vs), default=-1) for vs in g.alloc_ops]
        frontier = [-1 - c for c in range(len(counters))]  # keys: counter c (never closed),
        # op v, or n + alloc a
        preds: list[list[int]] = []
        touched: list[list[int]] = []
        sizes: list[list[int]] = []
        keeps: list[list[int]] = []
        opened = np.zeros(n, dtype=np.int64)
        stays = np.zeros(n, dtype=np.int64)
        width = len(frontier)
        for t, v in enumerate(order):
            if t % 256 == 0 and time.perf_counter() > deadline:
                return None
            slot = {key: i for i, key in enumerate(frontier)}
            preds.append([slot[u] for u in g.preds[v] if u in slot])
            closing = {u for u in g.preds[v] if op_last[u] == t}
            fresh = []
            touched.append([])
            sizes.append([])
            for a in g.op_allocs[v]:
                if n + a in slot:
                    touched[-1].append(slot[n + a])
                    sizes[-1].append(g.sizes[a])
                elif last_use[a] > t:
                    fresh.append(n + a)
                if last_use[a] == t:
                    closing.add(n + a)
            kept = [key for key in frontier if key not in closing]
            keeps.append([slot[key] for key in kept])
            opened[t] = len(fresh)
            stays[t] = op_last[v] > t
            frontier = kept + fresh + ([v] if stays[t] else [])
            width = max(width, len(frontier))
        flat = [_flat(rows) for rows in (preds, touched, sizes, keeps)]
        arrays = (*flat[0], *flat[1], flat[2][1], *flat[3], opened, stays, counted)
        return _Steps(arrays, width)


def _flat(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values): row i is values[offsets[i]:offsets[i + 1]]."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    values = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(offsets[-1]))
    return offsets, values


@njit(cache=True)
def _steps(  # pragma: no cover - compiled
    plan,
    t0,
    t1,
    codes,
    costs,
    lo,
    hi,
    new_codes,
    new_costs,
    new_lo,
    new_hi,
    count,
    max_states,
):
    """Steps t0..t1-1 of the DP from the states in the first `count` rows of `codes` (their
    costs: rows of `costs`, finite within lo..hi), the `new_` arrays being the room for the next
    step's. Returns both sets (swapped after each step, grown when short) and the count, or
    count -1 past `max_states`. Each state branches on its step's op: inside I (unless a
    predecessor is out; its costs shift by one) or outside; equal states merge by the least cost
    per count, in an open-addressing table keyed by an FNV hash of the row. `plan`: the arrays
    of `_Steps`. An op inside I adds one to the counters that count it (the first slots)."""
    pred_at, pred_slot, touch_at, touch_slot, touch_size, keep_at, keep_slot = plan[:7]
    opened, stays, counted = plan[7:]
    width = codes.shape[1]
    row = np.zeros(width, dtype=np.int8)
    key = np.zeros(width, dtype=np.int8)
    for t in range(t0, t1):
        if len(new_codes) < 2 * count:  # each state makes two at most
            rows = 3 * count
            new_codes = np.zeros((rows, width), dtype=np.int8)
            new_costs = np.empty((rows, costs.shape[1]), dtype=np.int64)
            new_lo = np.zeros(rows, dtype=np.int64)
            new_hi = np.zeros(rows, dtype=np.int64)
        size = 1
        while size < 4 * count + 4:
            size *= 2
        table = np.full(size, -1, dtype=np.int64)
        made = 0
        n_keep = keep_at[t + 1] - keep_at[t]
        n_key = n_keep + opened[t] + stays[t]
        for i in range(count):
            blocked = False
            for j in range(pred_at[t], pred_at[t + 1]):
                if codes[i, pred_slot[j]] == 1:  # OUT
                    blocked = True
            for inside in range(2):
                if inside == 1 and blocked:
                    continue
                crossing = 2 if inside == 1 else 1  # ALL_OUT met by an op inside, ALL_IN outside
                row[:] = codes[i]
                if inside == 1:
                    c, bits = 0, counted[t]
                    while bits:
                        row[c] += bits & 1
                        c, bits = c + 1, bits >> 1
                charge = 0
                for j in range(touch_at[t], touch_at[t + 1]):
                    if row[touch_slot[j]] == crossing:
                        charge += touch_size[j]
                        row[touch_slot[j]] = 0
                for k in range(n_keep):
                    key[k] = row[keep_slot[keep_at[t] + k]]
                for k in range(opened[t]):
                    key[n_keep + k] = 1 if inside == 1 else 2  # ALL_IN / ALL_OUT
                if stays[t]:
                    key[n_key - 1] = 0 if inside == 1 else 1  # not OUT / OUT
                h = np.uint64(14695981039346656037)
                for k in range(n_key):
                    h = (h ^ np.uint64(key[k])) * np.uint64(1099511628211)
                b = np.int64(h & np.uint64(size - 1))
                while True:
                    j = table[b]
                    if j < 0:
                        break
                    same = True
                    for k in range(n_key):
                        if new_codes[j, k] != key[k]:
                            same = False
                            break
                    if same:
                        break
                    b = (b + 1) & (size - 1)
                move = inside
                a, z = lo[i] + move, hi[i] + move
                if j < 0:
                    j = made
                    made += 1
                    table[b] = j
                    new_codes[j, :n_key] = key[:n_key]
                    new_codes[j, n_key:] = 0
                    new_lo[j], new_hi[j] = a, z
                    for c in range(a, z + 1):
                        value = costs[i, c - move]
                        new_costs[j, c] = value + charge if value < INF else INF
                    continue
                for c in range(a, new_lo[j]):
                    new_costs[j, c] = INF
                for c in range(new_hi[j] + 1, z + 1):
                    new_costs[j, c] = INF
                new_lo[j] = min(new_lo[j], a)
                new_hi[j] = max(new_hi[j], z)
                for c in range(a, z + 1):
                    value = costs[i, c - move]
                    if value < INF and value + charge < new_costs[j, c]:
                        new_costs[j, c] = value + charge
        if made > max_states:
            return codes, costs, lo, hi, new_codes, new_costs, new_lo, new_hi, -1
        codes, costs, lo, hi, new_codes, new_costs, new_lo, new_hi = (
            new_codes,
            new_costs,
            new_lo,
            new_hi,
            codes,
            costs,
            lo,
            hi,
        )
        count = made
    return codes, costs, lo, hi, new_codes, new_costs, new_lo, new_hi, count


def best_cuts(g: Graph, seconds: float) -> np.ndarray | None:
    """cut(k) for k = 0..n from the first of three orders (depth first either way, Kahn's least
    index first; narrowest `frontier_width` first, none wider than `MAX_WIDTH`) whose DP
    completes within `seconds`; None if none does."""
    found = cut_order(g, seconds)
    return None if found is None else found[1]


def cut_order(g: Graph, seconds: float) -> tuple[list[int], np.ndarray] | None:
    """`best_cuts` with the order whose DP completed (`signature_bounds` runs along it)."""
    deadline = time.perf_counter() + seconds
    orders = [
        depth_first(g, last_first=True),
        depth_first(g, last_first=False),
        kahn_order(g.preds),
    ]
    widths = [(frontier_width(g, order), order) for order in orders]
    for width, order in sorted(widths, key=lambda pair: pair[0]):
        if width > MAX_WIDTH:
            break
        cuts = prefix_cuts(g, order, seconds=deadline - time.perf_counter())
        if cuts is not None:
            return order, cuts
    return None


def used_size(g: Graph) -> int:
    """Total size of the allocs some op uses (each is live at one position at least)."""
    return sum(s for s, vs in zip(g.sizes, g.alloc_ops, strict=True) if vs)


def cut_values(g: Graph, seconds: float) -> np.ndarray | None:
    """cut(k) for k = 0..n from `best_cuts`, or when no order's DP completes, lower bounds on
    them from their linear relaxation (`schedule_lpcut.lp_cuts`) with the time left; None if
    neither gives any within `seconds`."""
    return _exact_or_relaxed(g, seconds)[1]


def rest_tables(
    g: Graph, objective: str, seconds: float
) -> tuple[np.ndarray | None, Signature | None]:
    """What `dp` prunes with: `cut_values` and, where the exact DP completes, the best
    `signature_bounds` with the time left (None each where they do not fit in `seconds`)."""
    started = time.perf_counter()
    order, cuts = _exact_or_relaxed(g, seconds)
    if order is None:
        return cuts, None
    return cuts, signature_bounds(g, order, objective, seconds - (time.perf_counter() - started))


def _exact_or_relaxed(g: Graph, seconds: float) -> tuple[list[int] | None, np.ndarray | None]:
    """`cut_order`'s order and exact cuts, or (None, the relaxation's lower bounds or None)."""
    started = time.perf_counter()
    found = cut_order(g, seconds)
    if found is not None:
        return found
    return None, lp_cuts(g, seconds - (time.perf_counter() - started))


def cut_bound(g: Graph, objective: str, seconds: float) -> int | None:
    """The cut bound of `objective` (see the module's docstring) from `cut_values`; None if
    they do not fit in `seconds`."""
    cuts = cut_values(g, seconds)
    return None if cuts is None else bound_of(g, cuts, objective)


def bound_of(g: Graph, cuts: np.ndarray, objective: str) -> int:
    """The bound of `objective` that cut values (or lower bounds on them) give: their largest
    for peak, their sum plus the used allocs' sizes for sum-liveness."""
    if objective == "peak":
        return int(cuts.max(initial=0))
    return used_size(g) + int(cuts[1:-1].sum(dtype=object))


MARKED = 100
"""Ops a signature's chain counts at most (`boundary_chains`; `MAX_COUNT` is the hard limit):
the DP's states split by the counts (a 1,000-op grid: 0.04 s without, 0.06-0.9 s with one of
its chains, 1.7 s with both)."""

JOINT_SHARE = 0.6
"""Of `signature_bounds`' time, what the DP counting both chains may take before each alone
gets the rest."""


def boundary_chains(g: Graph, length: int = MARKED) -> list[list[int]]:
    """Two chains of ops to count (`signature_bound`), both from the op with the most
    descendants, each step to the successor with the fewest ancestors (the first to become
    ready), ties to the lowest index in one and the highest in the other; `length` ops each
    at most. On a grid they run along its two boundaries (first row then last column, first
    column then last row): a schedule reaches them steadily, while the lightest cuts of
    neighbouring sizes take unrelated shapes. Counted together they gave a 20 x 50 grid with
    sizes 1-19 125,577 (each alone 123,677 and 124,326; the cut bound 122,466)."""
    from tensorplan.problems.schedule import closure_counts

    if g.n == 0:
        return []
    ancestors, descendants = closure_counts(g)
    start = max(range(g.n), key=lambda v: (descendants[v], -v))
    chains: list[list[int]] = []
    for sign in (1, -1):
        chain = [start]
        while g.succs[chain[-1]] and len(chain) < length:
            chain.append(min(g.succs[chain[-1]], key=lambda u: (ancestors[u], sign * u)))
        if len(chain) > 1 and chain not in chains:
            chains.append(chain)
    return chains


@dataclass(frozen=True)
class Signature:
    """What prefixes after a downset still cut, by its size and counted ops (`signature_rest`):
    `rest[k, a_1, ..., a_c]` bounds the cut terms of positions k + 1..n - 1 (their sum, or for
    peak their maximum) after a downset of k ops holding a_i of the ops in `masks[i]` (bit v:
    op v)."""

    masks: tuple[int, ...]
    rest: np.ndarray

    def bound(self, g: Graph, objective: str) -> int:
        """The signature bound of `objective`: the rest after the empty downset."""
        first = int(self.rest.flat[0])
        return first if objective == "peak" else used_size(g) + first


def signature_bounds(
    g: Graph, order: Sequence[int], objective: str, seconds: float
) -> Signature | None:
    """The highest `signature_rest` that completes within `seconds` along `order` (which the
    plain cut DP completed on), or None: the `boundary_chains` counted together first (it bounds
    at least as high as either alone), then, if that DP does not complete, each chain alone
    with an equal share of the time left."""
    deadline = time.perf_counter() + seconds
    chains = boundary_chains(g)
    if len(chains) > 1:
        joint = signature_rest(g, order, chains, objective, JOINT_SHARE * seconds)
        if joint is not None:
            return joint
    best: Signature | None = None
    for i, chain in enumerate(chains):
        share = (deadline - time.perf_counter()) / (len(chains) - i)
        found = signature_rest(g, order, [chain], objective, share)
        if found is not None and (best is None or found.rest.flat[0] > best.rest.flat[0]):
            best = found
    return best


def signature_bound(
    g: Graph,
    order: Sequence[int],
    counters: Sequence[Sequence[int]],
    objective: str,
    seconds: float,
) -> int | None:
    """The cut bound with the cuts kept consistent along a schedule, through a signature: with
    a(k) the number of ops of a set (a counter) among the first k of some order, a moves by 0
    or 1 from one k to the next, from 0 to all of them, and only one counter moves a step
    (one op comes at a time), so the objective is at least the least sum (peak: maximum) over
    such paths of the lightest cut of size k holding a(k) ops of each set (the cut bound takes
    each size's lightest cut on its own, unrelated to its neighbours'). With no counter this
    is the cut bound; None if the DP (`prefix_cuts`) does not complete."""
    found = signature_rest(g, order, counters, objective, seconds)
    return None if found is None else found.bound(g, objective)


def signature_rest(
    g: Graph,
    order: Sequence[int],
    counters: Sequence[Sequence[int]],
    objective: str,
    seconds: float,
) -> Signature | None:
    """The `Signature` of `counters` (sets of ops): the lightest cuts of every size and counts
    inside (`prefix_cuts`), then the best paths from every (size, counts) to (n, all), one count
    at most moving by one a step; None if the DP does not complete in `seconds`. An op is
    counted by the first set that holds it only (a path moves one count a step)."""
    sets = _disjoint(counters)
    table = prefix_cuts(g, order, seconds=seconds, counters=sets)
    if table is None:
        return None
    n = g.n
    cuts = np.moveaxis(table, -1, 0)  # cuts[k, a_1, ..., a_c]
    rest = np.full(cuts.shape, INF, dtype=np.int64)
    rest[(n, *(len(ops) for ops in sets))] = 0
    for k in range(n - 1, -1, -1):
        # at (k + 1, a'): its cut (none at n) joined with what follows it
        col = cuts[k + 1] if k + 1 < n else np.zeros(cuts.shape[1:], dtype=np.int64)
        after = rest[k + 1]
        joined = np.maximum(after, col) if objective == "peak" else after + col
        at = np.where((after >= INF) | (col >= INF), INF, joined)
        rest[k] = at  # the counts unchanged ...
        for axis in range(len(sets)):  # ... or one more op of one set
            low = [slice(None)] * len(sets)
            high = [slice(None)] * len(sets)
            low[axis], high[axis] = slice(None, -1), slice(1, None)
            np.minimum(rest[k][tuple(low)], at[tuple(high)], out=rest[k][tuple(low)])
    return Signature(tuple(sum(1 << v for v in ops) for ops in sets), rest)


def _disjoint(counters: Sequence[Sequence[int]]) -> list[list[int]]:
    """The sets of `counters`, sorted, each without the ops of the sets before it."""
    seen: set[int] = set()
    sets = []
    for ops in counters:
        sets.append(sorted(set(ops) - seen))
        seen.update(ops)
    return sets
