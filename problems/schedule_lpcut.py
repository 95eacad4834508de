"""The cut bound's linear relaxation: lower bounds on every cut(k) when the exact DP gives up.

`schedule_cut` bounds both objectives by cut(k), the lightest cross(I) over the ideals I of k
ops, and computes it exactly by a frontier DP whose states explode on random layered DAGs and
adversary graphs. There the cut values are still worth having: cut(k) is the optimum of a small
0-1 program, and its linear relaxation is a lower bound on it.

**The program.** x_v = [v in I], closed under predecessors (x_v <= x_u for an edge u -> v),
sum x_v = k; per alloc with two users or more, y <= x_v and z >= x_v over its users, charged
size x (z - y): for 0-1 x the best y is "all users in" and z "some user in", so the charge is
the alloc's size exactly when it crosses I. Without the size row the constraint matrix is a
closure problem's (totally unimodular), and its relaxation only convexifies over k: the empty
and the full ideal alone drive it to 0. So each k also fixes what no ideal of k ops can do: an
op with more than k ancestors (itself included) is out, one with more than n - k descendants
is in. On layered-20x50 the relaxed values are 75-90 % of the exact ones (HiGHS's
branch-and-bound: 1-3 s per k) at 2.4 ms per k.

**Sound.** The value kept is not HiGHS's objective but the Lagrangian bound of the row duals
it returns, computed here (sum over columns of min(d_j l_j, d_j u_j) with d = c - A^T y, plus
the size row's term; the precedence rows' right-hand sides are 0), so a dual that is slightly
off gives a lower value, never a wrong one. cut(k) is an integer, so each bound is rounded up
after a margin far above the floating-point error.

**Every k from a few programs.** Those multipliers bound the program of every other k too, with
that k's own fixings, and the bound is a sum of steps over the k at which each op's bounds
change: one pass of prefix sums gives it for all k (`_Program.curve`). Each k's bound is the
best over the programs solved. So when the time cannot cover one program per k, the programs
skip sizes (as many as the running pace says) and the sizes between still get bounds: at 1 s,
layered-20x50 35,303 of the 35,510 one program a size gives; adversary-5000 at 3.5 s
20,970,365 (neighbouring sizes sharing one program with the fixings of their range gave
13,603,407).
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tensorplan.problems.schedule import Graph

MARGIN = 1e-9
"""Relative to the sum of the absolute terms of a bound (`_Program.magnitude`): far above the
float64 error of the sums (about 1e-16 of it a term) and far below the rounding to integers it
precedes."""

PACE_WEIGHT = 0.2
"""Weight of the latest program in the running pace, which sets how many sizes the next program
skips (so that the programs left fit the time left)."""

IMPORT_S = 0.15
"""Time that importing HiGHS needs (80 ms measured), when no solve has imported it yet."""

SETUP_S_PER_OP = 2e-5
"""Time an op that the reachability, the program and its first solve need (5 us an op
measured for the first two, 10 ms for the first solve at 1,000 ops): with less than this and
the import, `lp_cuts` goes without."""


def lp_cuts(g: Graph, seconds: float) -> np.ndarray | None:
    """Lower bounds on cut(k) for k = 0..n (int64; see the module's docstring), within
    `seconds`; None when they cannot start (too little time, or more ops than
    `schedule.HULL_MAX_OPS`: the fixings need the graph's reachability)."""
    from tensorplan.problems import schedule

    started = time.perf_counter()
    deadline = started + seconds
    n = g.n
    setup = SETUP_S_PER_OP * n + (0.0 if "highspy" in sys.modules else IMPORT_S)
    if seconds < setup or n > schedule.HULL_MAX_OPS:
        return None
    import highspy

    program = _Program.of(g, highspy)
    best = np.zeros(n + 1)
    magnitude = 0.0  # the largest sum of absolute terms in a curve: what its error scales with
    k = 1
    pace = 0.0  # seconds a program, recent ones weigh more; not the first (from scratch)
    while k < n:
        now = time.perf_counter()
        left = deadline - now
        if left <= 0:
            break
        duals = program.solve(k, left)
        if duals is None:
            break
        np.maximum(best, program.curve(duals), out=best)
        magnitude = max(magnitude, program.magnitude(duals))
        took = time.perf_counter() - now
        if k > 1:
            pace = took if not pace else PACE_WEIGHT * took + (1 - PACE_WEIGHT) * pace
        k += max(1, math.ceil((n - k) * pace / max(deadline - time.perf_counter(), 1e-9)))
    cuts = np.ceil(best - MARGIN * magnitude).clip(min=0).astype(np.int64)
    cuts[0] = cuts[n] = 0
    return cuts


class _Program:
    """The relaxed program of the module's docstring, built once; `solve` sets the fixings and
    the size row of one k and re-solves from the last basis; `curve` turns any row multipliers
    into a bound for every k."""

    def __init__(
        self,
        highs: Any,
        optimal: Any,
        costs: np.ndarray,
        heads: np.ndarray,
        tails: np.ndarray,
        ups: np.ndarray,
        downs: np.ndarray,
    ) -> None:
        self.highs = highs
        self.optimal = optimal  # HiGHS's status for a solved program
        self.costs = costs
        self.cost_magnitude = float(np.abs(costs).sum())
        self.heads = heads  # row r is x[heads[r]] - x[tails[r]] <= 0
        self.tails = tails
        self.n = n = len(ups)
        self.allowed_from = ups  # x_v may be 1 from k = ups_v on,
        self.in_from = np.maximum(n - downs + 1, ups)  # and must be from here on

    @classmethod
    def of(cls, g: Graph, highspy: Any) -> _Program:
        from tensorplan.problems.schedule import closure_counts

        ups, downs = (np.array(c, dtype=np.int64) + 1 for c in closure_counts(g))  # + itself
        heads: list[int] = []
        tails: list[int] = []
        for v, ps in enumerate(g.preds):
            for u in ps:
                heads.append(v)
                tails.append(u)
        costs = [0.0] * g.n
        for size, users in zip(g.sizes, g.alloc_ops, strict=True):
            if len(users) < 2:
                continue  # never crosses a cut
            y, z = len(costs), len(costs) + 1
            costs += [-float(size), float(size)]
            for v in users:
                heads += [y, v]
                tails += [v, z]
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        cols, rows = len(costs), len(heads)
        h.addVars(cols, np.zeros(cols), np.ones(cols))
        h.changeColsCost(cols, np.arange(cols, dtype=np.int32), np.asarray(costs))
        index = np.empty(2 * rows, dtype=np.int32)
        index[0::2], index[1::2] = heads, tails
        value = np.empty(2 * rows)
        value[0::2], value[1::2] = 1.0, -1.0
        starts = np.arange(0, 2 * rows, 2, dtype=np.int32)
        h.addRows(rows, np.full(rows, -np.inf), np.zeros(rows), 2 * rows, starts, index, value)
        h.addRow(0.0, float(g.n), g.n, np.arange(g.n, dtype=np.int32), np.ones(g.n))
        arrays = (np.asarray(heads, np.int64), np.asarray(tails, np.int64))
        optimal = highspy.HighsModelStatus.kOptimal
        return cls(h, optimal, np.asarray(costs), *arrays, ups, downs)

    def solve(self, k: int, seconds: float) -> np.ndarray | None:
        """HiGHS's row duals of the program for ideals of k ops; None when it stops without an
        optimal basis (out of time)."""
        h, n = self.highs, self.n
        hi = (self.allowed_from <= k).astype(np.float64)
        lo = (self.in_from <= k).astype(np.float64)
        h.changeColsBounds(n, np.arange(n, dtype=np.int32), lo, hi)
        h.changeRowBounds(len(self.heads), float(k), float(k))
        spent = h.getRunTime()  # HiGHS's time limit counts all its runs
        h.setOptionValue("time_limit", spent + max(seconds, 1e-3))
        h.run()
        if h.getModelStatus() != self.optimal:
            return None
        return np.asarray(h.getSolution().row_dual)

    def magnitude(self, duals: np.ndarray) -> float:
        """A bound on the sum of the absolute terms `curve` adds up for `duals` (each row's
        multiplier enters two reduced costs; the size row's, n of them and its k term)."""
        rows = len(self.heads)
        size_dual = abs(float(duals[rows]))
        return (
            self.cost_magnitude
            + float(2 * np.abs(duals[:rows]).sum())
            + (2 * self.n * size_dual + 1.0)
        )

    def curve(self, duals: np.ndarray) -> np.ndarray:
        """For k = 0..n, the Lagrangian bound of row multipliers `duals` on the program of k
        (the module's "Sound"; float, before the margin and the rounding): sum over columns of
        min(d_j l_j, d_j u_j) with each k's fixings, by prefix sums over the k at which each
        op's bounds change."""
        n, rows = self.n, len(self.heads)
        y = np.minimum(duals[:rows], 0.0)  # rows x_head - x_tail <= 0 take y <= 0
        size_dual = float(duals[rows])
        reduced = self.costs.copy()
        reduced -= np.bincount(self.heads, weights=y, minlength=len(self.costs))
        reduced += np.bincount(self.tails, weights=y, minlength=len(self.costs))
        d = reduced[:n] - size_dual
        steps = np.bincount(self.allowed_from, weights=np.minimum(d, 0.0), minlength=n + 2)
        steps += np.bincount(self.in_from, weights=np.maximum(d, 0.0), minlength=n + 2)
        other = float(np.minimum(reduced[n:], 0.0).sum())  # y and z columns in [0, 1]
        return other + np.cumsum(steps)[: n + 1] + size_dual * np.arange(n + 1)
