"""The seed's `shift` local search (poprithms schedule::shift) and its annealed variant.

`shift` moves a block of n consecutive ops past a run of neighbours, i.e. rotates two adjacent
sub-schedules, accepting a move only when it keeps precedence and lowers the objective; it climbs
the "n-shift ladder" (blocks of 1 op, then 2, ... up to n_ops/2, which covers every rotation)
until no rotation of any size improves (`max_shift` optionally caps it).

Design notes (how and why): docs/design/schedule_shift.md.
"""

from __future__ import annotations

import math
import random
import threading
import weakref
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Literal, Protocol

import numpy as np

from tensorplan.heuristics import schedule_kernels as K
from tensorplan.problems.core import stopwatch
from tensorplan.problems.schedule import Graph

Ladder = Literal["restart", "continue"]

# work units (~ array entries touched) per ladder kernel call between two looks at the clock
LADDER_BUDGET = 200_000
# annealing steps per kernel call between two looks at the clock
ANNEAL_CHUNK = 256
# `iterate_order` leaves this many times its first complete climb's time for its last one
FINAL_CLIMBS = 2
# in the last FINE_S seconds of a climb's time, its kernel calls do an eighth of the work
FINE_S = 0.02


def work_budget(left: float, full: int = LADDER_BUDGET, fine: int = LADDER_BUDGET // 8) -> int:
    """Work units per kernel call with `left` seconds to go (the clock is read between calls):
    `full`, or `fine` in the last `FINE_S`. For a climb, an eighth of `LADDER_BUDGET` near the
    end: one full call takes up to ~1 ms at 1,000 ops and holds a whole climb of a 100-op graph;
    at the seed procedure's own time (8 ms on recompute-1000, 2.8 ms on adversary-100) such a
    call ran the solve 0.5-0.9 ms over."""
    return full if left > FINE_S else fine


def _csr(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    idx = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(ptr[-1]))
    return ptr, idx


_COMPILED: dict[int, tuple[weakref.ref[Graph], K.Csr]] = {}
"""`compile_graph`'s last few results, by the graph's identity (hashing a frozen `Graph` walks
all of it: 70 us at 1,000 ops, and a solve asks some ten times)."""

KEEP_COMPILED = 4
_COMPILED_LOCK = threading.Lock()


def compile_graph(g: Graph) -> K.Csr:
    """The graph as the kernels' CSR arrays (read-only by every kernel). Kept for the last few
    graphs: a solve builds them once, not once per start order and descent (0.5 ms each at
    1,000 ops)."""
    with _COMPILED_LOCK:  # solves may share the process (threads)
        hit = _COMPILED.get(id(g))
        if hit is not None and hit[0]() is g:
            return hit[1]
    csr = _compile(g)
    with _COMPILED_LOCK:
        while len(_COMPILED) >= KEEP_COMPILED:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[id(g)] = (weakref.ref(g), csr)
    return csr


def _compile(g: Graph) -> K.Csr:
    succ_ptr, succ_idx = _csr(g.succs)
    pred_ptr, pred_idx = _csr(g.preds)
    op_ptr, op_alloc = _csr(g.op_allocs)
    alloc_ptr, alloc_op = _csr(g.alloc_ops)
    edge_v = np.repeat(np.arange(g.n, dtype=np.int64), np.diff(pred_ptr))
    return K.Csr(
        succ_ptr,
        succ_idx,
        pred_ptr,
        pred_idx,
        op_ptr,
        op_alloc,
        alloc_ptr,
        alloc_op,
        np.asarray(g.sizes, dtype=np.int64).reshape(-1),
        (np.diff(alloc_ptr) >= 2).astype(np.int64),
        pred_idx.copy(),
        edge_v,
    )


def _mersenne_state(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The state of `random.Random(seed)` (words, position) for the kernels' generator, which
    draws the same numbers, so the annealer follows the same path as it did in pure Python."""
    words = random.Random(seed).getstate()[1]
    return np.array(words[:-1], dtype=np.int64), np.array(words[-1:], dtype=np.int64)


class ShiftState:
    """A schedule under block moves: order, alloc spans, sum-liveness and (peak mode) the live
    profile, kept incrementally by the compiled kernels; the methods are what the ladder, the
    annealer and the tests need."""

    def __init__(self, g: Graph, order: Sequence[int], objective: str = "sum_liveness") -> None:
        self.g = g
        self.objective = objective
        self.csr = compile_graph(g)
        self.arrays = K.new_arrays(g.n, len(g.sizes))
        self.work = K.new_work(g.n, len(g.sizes))
        self.arrays.order[:] = np.asarray(order, dtype=np.int64).reshape(-1)
        K.init_state(self.csr, self.arrays, int(objective == "peak"))

    # -- what the search state is

    @property
    def order(self) -> list[int]:
        return self.arrays.order.tolist()

    @property
    def sum_liveness(self) -> int:
        return int(self.arrays.meta[K.SUM])

    @property
    def peak(self) -> int:
        return int(self.arrays.meta[K.PEAK])

    @property
    def excess(self) -> int:
        """Positions at the peak (peak mode)."""
        return int(self.arrays.meta[K.EXCESS])

    @property
    def moves(self) -> int:
        return int(self.arrays.meta[K.MOVES])

    @property
    def proposals(self) -> int:
        return int(self.arrays.meta[K.PROPOSALS])

    @property
    def value(self) -> int:
        """The objective of the current order: its peak in peak mode, else its sum-liveness."""
        return self.peak if self.objective == "peak" else self.sum_liveness

    def key(self) -> tuple[int, int, int]:
        """What the search lowers lexicographically: (sum_liveness,) or (peak, excess, sum).

        In peak mode `excess` is the number of positions at the peak, so a move that keeps the
        peak but clears one of its positions is progress towards a lower peak.
        """
        if self.objective == "peak":
            return (self.peak, self.excess, self.sum_liveness)
        return (self.sum_liveness, 0, 0)

    # -- one block's moves

    def right_range(self, s: int, n: int) -> int:
        """How many places block [s, s+n) can move right without breaking precedence."""
        return int(K.right_range(self.csr, self.arrays, s, n))

    def left_range(self, s: int, n: int) -> int:
        return int(K.left_range(self.csr, self.arrays, s, n))

    def deltas(self, s: int, n: int, sign: int, dmax: int) -> np.ndarray:
        """Sum-liveness change of moving block [s, s+n) by d = 1..dmax places (sign: direction)."""
        K.block_deltas(self.csr, self.arrays, self.work, s, n, sign, dmax)
        return self.work.delta[:dmax].copy()

    def passed_profile(self, s: int, n: int, sign: int, dmax: int) -> np.ndarray:
        """Peak mode: live total at the i-th op the block passes, after the move (any d > i)."""
        k, _ = K.collect(self.csr, self.arrays, self.work, s, n)
        K.passed_profile(self.csr, self.arrays, self.work, s, n, dmax, sign, k, 1 << 62)
        return self.work.passed[:dmax].copy()

    def peak_keys(self, s: int, n: int, sign: int, dmax: int) -> np.ndarray:
        """Peak mode, per distance d (row d-1): (new peak, positions at the old peak if the peak
        stays, max on the block's positions, how many of them reach it) -- for the tests."""
        out = np.zeros((max(dmax, 0), 4), dtype=np.int64)
        self.passed_profile(s, n, sign, dmax)
        k, kt = K.collect(self.csr, self.arrays, self.work, s, n)
        if sign > 0:
            K.right_deltas(self.csr, self.arrays, self.work, s, n, dmax, k, 1)
        else:
            K.left_deltas(self.csr, self.arrays, self.work, s, n, dmax, k, 1)
        bar = (self.peak, self.excess, 0)
        K.peak_keys(self.csr, self.arrays, self.work, s, n, sign, dmax, 1, kt, True, out, *bar)
        return out

    def try_block(self, s: int, n: int, min_dist: int = 1) -> bool:
        """Apply the best improving move of block [s, s+n) by >= min_dist, if any."""
        moved, _ = K.try_block(self.csr, self.arrays, self.work, s, n, min_dist)
        return bool(moved)

    def move(self, s: int, n: int, dist: int, delta: int) -> None:
        """Move block [s, s+n) by dist places (its sum-liveness change `delta` known)."""
        K.move(self.csr, self.arrays, self.work, s, n, dist)
        self.arrays.meta[K.SUM] += delta

    # -- the ladder

    def climb(self, top: int, restart: bool, budget: int = LADDER_BUDGET) -> bool:
        """Run the ladder (levels 1..top) for about `budget` work; True once converged."""
        return bool(K.ladder(self.csr, self.arrays, self.work, top, restart, budget))

    def load(self, order: np.ndarray) -> None:
        """Make `order` the schedule (state rebuilt; move counters kept; ladder from level 1)."""
        K.load(self.csr, self.arrays, order)
        self.rewind()

    def rewind(self) -> None:
        """The next `climb` starts the ladder from level 1 (a complete climb, even at a local
        minimum the last one ended at)."""
        self.work.cursor[:] = 0
        self.work.cursor[K.LEVEL] = 1
        self.work.dirty[:] = 1
        self.work.again[:] = 0


def shift_order(
    g: Graph,
    order: Sequence[int],
    objective: str,
    *,
    ladder: Ladder = "continue",
    max_shift: int | None = None,
    time_limit: float = 10.0,
    report: Callable[[int], object] | None = None,
) -> tuple[ShiftState, bool]:
    """Run the n-shift ladder from `order`; returns the search state and whether it converged.

    At level n, blocks of n ops move by at least n places (shorter moves are the mirror image of
    a lower level), so levels 1 .. n_ops/2 cover every rotation of two adjacent sub-schedules.
    `ladder="restart"` drops back to 1-shifts after any improvement at a higher level
    (poprithms' default); `"continue"` climbs on and restarts only after a full climb.
    By default the ladder is complete: `converged` means no rotation of any size improves.
    `max_shift` caps the levels (then `converged` is relative to that cap). On time-out the
    state holds the best order so far (every applied move improves). `report` is called with
    the objective after each slice of the ladder (live progress).
    """
    state = ShiftState(g, order, objective)
    full = max(g.n // 2, 1)
    top = full if max_shift is None else min(max_shift, full)
    with stopwatch() as clock:
        while not state.climb(top, ladder == "restart", work_budget(time_limit - clock())):
            if report is not None:
                report(state.value)
            if clock() > time_limit:
                return state, False
    if report is not None:
        report(state.value)
    return state, True


def anneal_order(
    g: Graph,
    order: Sequence[int],
    objective: str,
    *,
    seed: int = 0,
    steps: int | None = None,
    time_limit: float = 10.0,
) -> tuple[ShiftState, bool, dict[str, int]]:
    """Simulated annealing over random block moves, then a T=0 `shift` descent from the best.

    A move is a random block (1 op half of the time, else 2..8) moved left or right by a
    log-uniform distance within its precedence range; its sum-liveness change comes from the
    same incremental deltas as `shift`. Uphill moves are taken with probability exp(-delta/T),
    T cooling geometrically from the median uphill change of 200 sampled moves to 1/1000 of it
    over `steps` proposals (default 20,000 + 100 per op). The energy is sum-liveness in both
    modes; in peak mode the best state is kept by (peak, excess, sum) and the final descent
    is the peak-mode `shift`. Deterministic for a seed unless the annealing phase (at most
    80 % of `time_limit`) runs out of time. Returns (descent state, converged, stats).
    """
    state = ShiftState(g, order, objective)
    steps = 20_000 + 100 * g.n if steps is None else steps
    mt, mti = _mersenne_state(seed)
    best_key = np.array(state.key(), dtype=np.int64)
    best_order = state.arrays.order.copy()
    accepted = 0
    args = (state.csr, state.arrays, state.work, mt, mti)
    with stopwatch() as clock:
        ups = np.zeros(200, dtype=np.int64)
        m = K.anneal_sample(*args, 200 if g.n > 1 else 0, ups)
        t0 = float(np.median(ups[:m])) if m else 0.0
        cool = 1e-3 ** (1 / max(steps, 1))
        temp = np.array([t0])
        for i in range(0, steps if t0 > 0 else 0, ANNEAL_CHUNK):
            if clock() > 0.8 * time_limit:
                break
            chunk = min(ANNEAL_CHUNK, steps - i)
            accepted += K.anneal_steps(*args, chunk, temp, cool, best_key, best_order)
        final, converged = shift_order(
            g, best_order.tolist(), objective, time_limit=max(time_limit - clock(), 0.0)
        )
    return final, converged, {"anneal_steps": steps, "anneal_accepted": accepted}


def warm_up() -> None:
    """Compile (or load from numba's cache) every kernel the search uses, on a six-op graph.

    The first call in a fresh install compiles for some 15-30 s of CPU; later processes load
    the cached machine code in a fraction of a second. Calling this before timed work keeps
    the one-off compilation out of a solver's time limit.
    """
    # the seed's example: ops a..f, allocs A (a-e), B (b-d), C (c-d), D (d), E (e-f)
    alloc_ops = ((0, 1, 2, 3, 4), (1, 2, 3), (2, 3), (3,), (4, 5))
    op_allocs = tuple(tuple(a for a, vs in enumerate(alloc_ops) if v in vs) for v in range(6))
    g = Graph(((),) * 6, ((),) * 6, alloc_ops, op_allocs, (1, 1, 1, 1, 1))
    for objective in ("sum_liveness", "peak"):
        state, _ = shift_order(g, [5, 4, 3, 2, 1, 0], objective)
        iterate_order(state, kicks=3)  # kick, local_ladder, load
        anneal_order(g, [5, 4, 3, 2, 1, 0], objective, steps=300)
        K.evaluate(compile_graph(g), np.arange(6, dtype=np.int64), objective == "peak")


# --- iterated local search ------------------------------------------------------------------------

KICK_MAX = 128  # longest window a kick reorders (lengths are log-uniform over 2..KICK_MAX)


def kick_length(rng: random.Random, n: int) -> int:
    """A kick's window length, log-uniform over 2..KICK_MAX (at most n): as many kicks of
    2-3 ops as of 64-128. Long kicks are what 20-row grids need (a column is 20 ops): at 60 s
    on grid-20x50, windows of at most 32 ops ended at 49,312, these at 49,069."""
    return min(int(2 ** rng.uniform(1, math.log2(KICK_MAX + 1))), n)


LOCAL_TOP = 8  # a local descent climbs levels 1..8 ...
LOCAL_MARGIN = 8  # ... over the block starts within 8 places of the kicked window
LOCAL_BUDGET = 2_000_000  # work cap of one local descent (a safety net: they end far sooner)
# near the deadline (`FINE_S`) the cap is LOCAL_FINE, about 0.1 ms (a local descent does some
# 20 work units a microsecond): a 100-op kick of 80 ops took 1.3 ms with a 1 ms limit; a
# descent the cap cuts short is rejected like any worse one
LOCAL_FINE = 2_000


class SideDescent(Protocol):
    """A descent `iterate_order` can run beside its kicks (`schedule_reference.SeedDescent`)."""

    state: ShiftState

    def step(self, budget: int) -> bool:
        """Run for about `budget` work units; True once converged."""
        ...


SIDE_SHARE = 0.6
"""Of the iterated search's time, the share a side descent gets until it has converged. The
seed's procedure took 0.4-2.5x our first descent's time on 1,000-op adversary, layered and
recompute graphs and 7-11x on trees. Given poprithms' own time, `shift` ended at or below
poprithms on all 25 graphs of 1,000 ops with 0.6, and on the 10 trees and adversary graphs
with 0.4 too, not with 0.3 or 0.2 (tree-1000-s4 +0.078 %: the seed's procedure did not
converge); the larger share leaves the margin."""


def iterate_order(
    state: ShiftState,
    *,
    seed: int = 0,
    time_limit: float = 10.0,
    patience: int | None = None,
    kicks: int | None = None,
    report: Callable[[int], object] | None = None,
    side: SideDescent | None = None,
) -> dict[str, int]:
    """Iterated local search from `state` (a local minimum of the complete ladder), in place.

    A kick reorders a random window of 2..128 consecutive ops (`kick_length`) by a random
    topological order of them (always valid); a local descent (the ladder on the block starts
    within 8 places of the window, levels 1..8) follows, and the result is kept when its key is
    not worse (plateaus are crossed), else the previous order is restored. It stops after
    `kicks` kicks, after `patience` kicks in a row without a better key (default 200 + 10 per
    op: small graphs end early, large ones use the time), or when the time left only fits the
    final climb: the complete ladder from the best order, so the state ends at a local minimum
    of every rotation (unless time ran out: then "converged" is 0). Every kick is drawn from
    `seed`, so the search is deterministic for a seed and a number of kicks (in the stats).

    `side`, a descent from elsewhere (the seed's procedure), runs between the kicks with
    `SIDE_SHARE` of the time until it converges (after the kicks' patience, alone); its local
    minimum replaces the best order when it is better (stats: `side_converged`, `side_better`).
    Unfinished at the end, its order still counts. Then the kicks' path depends on the clock.
    """
    g = state.g
    n = g.n
    patience = 200 + 10 * n if patience is None else patience
    rng = random.Random(seed)
    mt, mti = _mersenne_state(seed)
    args = (state.csr, state.arrays, state.work)
    full = max(n // 2, 1)
    done = improved = stall = 0
    with stopwatch() as clock:
        # a complete climb to a local minimum: it times the last one, whose room the kicks leave
        state.rewind()
        while not state.climb(full, False, work_budget(time_limit - clock())):
            if clock() > time_limit:
                return {"kicks": 0, "kicks_improving": 0, "converged": 0}
        deadline = time_limit - max(FINAL_CLIMBS * clock(), 0.05 * time_limit)  # the last climb
        best_key = state.key()
        best = state.arrays.order.copy()
        side_s = 0.0  # the side descent's seconds so far
        side_better = 0
        began = clock()
        while n > 2 and (kicks is None or done < kicks):
            if clock() > deadline:
                break
            if side is not None and (stall >= patience or side_s < SIDE_SHARE * (clock() - began)):
                at = clock()
                finished = side.step(work_budget(deadline - at))
                side_s += clock() - at
                if finished:
                    if side.state.key() < best_key:
                        best_key = side.state.key()
                        best[:] = side.state.arrays.order
                        state.load(best)
                        stall, side_better = 0, 1
                        if report is not None:
                            report(state.value)
                    side = None
                continue
            if stall >= patience:
                break
            length = kick_length(rng, n)
            a = rng.randrange(n - length + 1)
            K.kick(*args, a, a + length, mt, mti)
            top = min(length, LOCAL_TOP)
            cap = work_budget(deadline - clock(), LOCAL_BUDGET, LOCAL_FINE)
            K.local_ladder(*args, a - LOCAL_MARGIN, a + length + LOCAL_MARGIN, top, cap)
            done += 1
            key = state.key()
            if key <= best_key:
                stall = 0 if key < best_key else stall + 1
                improved += key < best_key
                best_key = key
                best[:] = state.arrays.order
            else:
                state.load(best)
                stall += 1
            if report is not None:
                report(state.value)  # the best order's (the state holds it now)
        side_converged = int(side is None and side_s > 0)
        if side is not None and side.state.key() < best_key:  # unfinished, but better
            best_key = side.state.key()
            best[:] = side.state.arrays.order
            side_better = 1
        stats = {"side_converged": side_converged, "side_better": side_better}
        if done or side_better:  # else the state is the local minimum it started from
            state.load(best)
            while not state.climb(full, False, work_budget(time_limit - clock())):
                if clock() > time_limit:
                    return {"kicks": done, "kicks_improving": improved, "converged": 0, **stats}
    return {"kicks": done, "kicks_improving": improved, "converged": 1, **stats}
