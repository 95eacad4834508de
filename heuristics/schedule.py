"""Schedule heuristics: Kahn orders, a greedy list scheduler, and the solvers built on the seed's
`shift` local search.

The search itself lives in `heuristics/schedule_shift.py` (the ladder, the annealer, the search
state) over compiled kernels in `heuristics/schedule_kernels.py`; its public names are re-exported
here. This module holds the start orders (`kahn`, `greedy_order`, the portfolio `best_start`) and
the solver entry points (`run_shift`, `run_anneal`, `SOLVERS`).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from functools import partial
from typing import Any, Literal

import numpy as np

from tensorplan.heuristics.schedule_kernels import evaluate
from tensorplan.heuristics.schedule_shift import (
    Ladder,
    ShiftState,
    anneal_order,
    compile_graph,
    shift_order,
)
from tensorplan.problems.core import Options, Result, Solver, heuristic_result, stopwatch
from tensorplan.problems.schedule import (
    Graph,
    ScheduleInstance,
    order_objective,
    to_order,
    to_solution,
)

TieBreak = Literal["fifo", "filo", "random"]

__all__ = [
    "SOLVERS",
    "ShiftState",
    "anneal_order",
    "best_start",
    "greedy_order",
    "kahn",
    "run_anneal",
    "run_shift",
    "shift_order",
]


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


# --- solvers --------------------------------------------------------------------------------------


def best_start(inst: ScheduleInstance) -> list[int]:
    """The best of the greedy order and the Kahn fifo/filo orders; filo (depth-first) often wins.

    Ties go to the first of greedy, fifo, filo. The orders are scored by the compiled
    `evaluate` (the same value as `problems.schedule.order_objective`, checked in the tests).
    """
    g = inst.graph
    csr = compile_graph(g)
    peak = inst.objective == "peak"
    orders = [greedy_order(g), kahn(g, "fifo"), kahn(g, "filo")]
    return min(orders, key=lambda o: evaluate(csr, np.asarray(o, dtype=np.int64), peak))


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
    state: ShiftState,
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
        best: tuple[ShiftState, bool, dict[str, int]] | None = None
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
