"""Schedule heuristics: Kahn orders, a greedy list scheduler, and the solvers built on the seed's
`shift` local search.

The search itself lives in `heuristics/schedule_shift.py` (the ladder, the annealer, the search
state) over compiled kernels in `heuristics/schedule_kernels.py`; its public names are re-exported
here. This module holds the start orders (`kahn`, `greedy_order`, the portfolio `best_start`) and
the solver entry points (`run_shift`, `run_anneal`, `SOLVERS`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from functools import cache, partial
from typing import Any, Literal

import numpy as np

from tensorplan.heuristics.schedule_kernels import evaluate, greedy_list, kahn_list
from tensorplan.heuristics.schedule_reference import SeedDescent, seed_shift, seed_start
from tensorplan.heuristics.schedule_shift import (
    Ladder,
    ShiftState,
    anneal_order,
    compile_graph,
    iterate_order,
    shift_order,
    warm_up,
)
from tensorplan.problems.core import (
    Options,
    Reporter,
    Result,
    Solver,
    heuristic_result,
    stopwatch,
)
from tensorplan.problems.schedule import (
    Graph,
    ScheduleInstance,
    to_order,
    to_solution,
)
from tensorplan.problems.schedule_bound import search_bound, too_short
from tensorplan.problems.schedule_bound import warm as warm_bound
from tensorplan.problems.schedule_cut import warm as warm_cut

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
    """A topological order; ready ops leave in arrival order (fifo), reverse (filo) or at random.
    fifo and filo run compiled (`schedule_kernels.kahn_list`; 0.1 ms a pass in Python at 100
    ops, two per solve), random in Python (`kahn_python`: CPython's generator draws it)."""
    if tie == "random":
        return kahn_python(g, tie, seed)
    return kahn_list(compile_graph(g), g.n, tie == "filo").tolist()


def kahn_python(g: Graph, tie: TieBreak = "fifo", seed: int = 0) -> list[int]:
    """`kahn` in Python, every tie-break: the reference its compiled fifo and filo are held to."""
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
    the whole pass at O(sum of alloc users * log n); compiled (`schedule_kernels.greedy_list`):
    2-3 ms in Python at 1,000 ops, which a solve given milliseconds cannot spare.
    """
    return greedy_list(compile_graph(g), g.n).tolist()


# --- solvers --------------------------------------------------------------------------------------


def best_start(inst: ScheduleInstance) -> list[int]:
    """The best of the greedy order and the Kahn fifo/filo orders; filo (depth-first) often wins.

    Ties go to the first of greedy, fifo, filo. The orders are scored by the compiled
    `evaluate` (the same value as `problems.schedule.order_objective`, checked in the tests).
    """
    return scored_best_start(inst)[0]


def scored_best_start(inst: ScheduleInstance) -> tuple[list[int], int]:
    """`best_start` and its objective (a solve reports it, and scoring costs a pass)."""
    g = inst.graph
    orders = [greedy_order(g), kahn(g, "fifo"), kahn(g, "filo")]
    return min(((o, objective_of(inst, o)) for o in orders), key=lambda pair: pair[1])


def objective_of(inst: ScheduleInstance, order: list[int]) -> int:
    """The objective of `order`, compiled (`evaluate`; the tests hold it to `order_objective`,
    which takes 1.6 ms at 1,000 ops in Python)."""
    peak = inst.objective == "peak"
    return int(evaluate(compile_graph(inst.graph), np.asarray(order, dtype=np.int64), peak))


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
        value = objective_of(inst, order)
    return heuristic_result(name, value, to_solution(inst, order), clock())


def run_greedy(
    inst: ScheduleInstance,
    opts: Options,
) -> Result:
    with stopwatch() as clock:
        order = greedy_order(inst.graph)
        value = objective_of(inst, order)
    return heuristic_result("greedy", value, to_solution(inst, order), clock())


def _search_result(
    name: str,
    inst: ScheduleInstance,
    state: ShiftState,
    converged: bool,
    start_value: int,
    clock: Callable[[], float],
    bound_s: float | None = None,
    **stats: Any,
) -> Result:
    """Result of a shift-style search; its message says when time ran out before a local
    minimum. With `bound_s` (seconds, maybe 0) it carries the bound that fits in that time
    (`schedule_bound.search_bound`; with none left, the hull bound if the instance holds it):
    heuristics' rows then say how far from optimal."""
    value = state.value
    message = "" if converged else "time limit reached before a local minimum"
    bound = None if bound_s is None else search_bound(inst, value, bound_s)
    done = heuristic_result(
        name,
        value,
        to_solution(inst, state.order),
        clock(),
        message=message,
        start_objective=start_value,
        moves=state.moves,
        converged=converged,
        **stats,
    )
    return done if bound is None else replace(done, bound=bound)


BOUND_SHARE = 0.1
"""Of its time limit, what `shift` and `shift-anneal` give the bound they report
(after the search, which then has 80 %; 10 % stays for the caller's verification)."""


LATER_DESCENT = 6.0
"""A descent after the first starts only while the time left is at least this multiple of the
time the solve has spent (start orders included). Ours from the seed's start finds basins the
kicks do not leave on trees (tree-1000-s3: 10,996 from it, 11,108 from the first, at 1-4 s);
trees at our reference's time have 6.7-9.2x left. On short limits the kicks and the seed's
procedure beside them are the better use of the time: given poprithms' time, with 1 (the value
before) grid-20x50-w19-s1 ended 2.99 % below poprithms instead of 4.29 %, and the mean over
the 50 graphs of `benchmarks/schedule_seed.py` was -0.81 % instead of -0.83 %."""


ITERATE_AFTER = 0.25
"""The iterated search starts only while the time left is at least this share of the time the
solve has spent: its first complete climb (which it times) can take as long as a descent, and
a kick needs room for three. On 100-op graphs at the seed procedure's own time (0.3 ms) the
climb alone overran the limit by half."""


def _descend(
    inst: ScheduleInstance,
    starts: list[tuple[Callable[[], list[int]], Ladder]],
    budget: float,
    clock: Callable[[], float],
    report: Reporter,
) -> tuple[ShiftState, bool]:
    """The best local minimum (by key) of our descent from each (start, ladder) in turn, until
    `budget` seconds on the solve's `clock`, while `LATER_DESCENT` allows (the first always
    runs; a start order is computed only when its descent runs); (state, converged)."""
    best: tuple[ShiftState, bool] | None = None
    for start, ladder in starts:
        left = max(budget - clock(), 0)
        if best is not None and left < LATER_DESCENT * clock():
            break
        state, converged = shift_order(
            inst.graph, start(), inst.objective, ladder=ladder, time_limit=left, report=report
        )
        if best is None or state.key() < best[0].key():
            best = (state, converged)
    assert best is not None
    return best


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
    report = Reporter(opts, name)
    with stopwatch() as clock:
        if inst.graph.n == 0:
            return report.result(heuristic_result(name, 0, to_solution(inst, []), clock()))
        order = _start(inst, start, seed, initial_solution)
        start_value = objective_of(inst, order)
        report(start_value)
        state, converged = shift_order(
            inst.graph,
            order,
            inst.objective,
            ladder=ladder,
            max_shift=max_shift,
            time_limit=max(time_limit - clock(), 0),
            report=report,
        )
        return report.result(
            _search_result(
                name, inst, state, converged, start_value, clock, proposals=state.proposals
            )
        )


def run_search(
    inst: ScheduleInstance,
    opts: Options,
    *,
    name: str = "shift",
    patience: int | None = None,
    bound_share: float = BOUND_SHARE,
) -> Result:
    """The default `shift`: our descents, then iterated local search beside the seed's own.

    Our descent (`shift_order`, ladder "continue") from `best_start`, or from the hint when one
    is given; then, time permitting (`LATER_DESCENT`), ours from the seed's start
    (`schedule_reference.seed_start`; "continue", in peak mode "restart"), the better local
    minimum kept. Then `iterate_order` (kicks and local descents, seeded) for the rest of the
    time limit (`ITERATE_AFTER`), ending with the complete ladder again. In sum-liveness mode
    without a hint, the seed's own procedure (`schedule_reference.SeedDescent`, which ends at
    poprithms' schedule exactly) runs beside the kicks until it converges, and its local minimum
    is taken when better: our implementation takes about 0.3-0.5x poprithms' time on 1,000-op
    graphs other than grids, so given poprithms' time it converges there and `shift` ends at
    or below poprithms' own schedule (on grids, 0.83-1.0x, ours ends 0.1-14 % below it). Ours
    first: its start is up to 72 % better, so on large graphs it reaches in 10 s what the
    seed's needs minutes for, and it is the better use of short limits
    (`benchmarks/schedule_seed.py`). 10 % of the time limit is left for the caller's
    verification. `patience`: the iterated search's (`iterate_order`'s default when None);
    `bound_share`: of the limit, the bound's (0: none; the search gets its share, and the
    share of a bound too short to run, `schedule_bound.too_short`).
    """
    time_limit, seed, hint = opts.time_limit, opts.seed, opts.hint
    report = Reporter(opts, name)
    with stopwatch() as clock:
        g = inst.graph
        if g.n == 0:
            return report.result(heuristic_result(name, 0, to_solution(inst, []), clock()))
        reserved = 0.0 if too_short(g.n, bound_share * time_limit) else bound_share
        budget = (0.9 - reserved) * time_limit
        side: SeedDescent | None = None
        # the seed's start, for our second descent and the seed's own: computed once, if at all
        seeds_start = cache(partial(seed_start, g))
        if hint is not None:
            first = to_order(inst, hint)
            start_value = objective_of(inst, first)
            starts: list[tuple[Callable[[], list[int]], Ladder]] = [(lambda: first, "continue")]
        else:
            first, start_value = scored_best_start(inst)
            second: Ladder = "continue" if inst.objective == "sum_liveness" else "restart"
            starts = [(lambda: first, "continue"), (seeds_start, second)]
        state, converged = _descend(inst, starts, budget, clock, report)
        stats: dict[str, int] = {"kicks": 0, "kicks_improving": 0}
        if converged and budget - clock() >= ITERATE_AFTER * clock():
            if hint is None and inst.objective == "sum_liveness":
                side = SeedDescent(g, seeds_start())
            left = budget - clock()
            stats = iterate_order(
                state,
                seed=seed,
                time_limit=left,
                patience=patience,
                report=report,
                side=side,
            )
            # without a kick the state is still the descent's local minimum
            converged = bool(stats.pop("converged")) or stats["kicks"] == 0
        bound_s = min(bound_share * time_limit, max(0.9 * time_limit - clock(), 0.0))
        done = _search_result(
            name,
            inst,
            state,
            converged,
            start_value,
            clock,
            bound_s if bound_share > 0 else None,
            proposals=state.proposals,
            **stats,
        )
        return report.result(done)


def run_anneal(
    inst: ScheduleInstance,
    opts: Options,
    *,
    start: str = "best",
    steps: int | None = None,
    rounds: int | None = None,
    name: str = "shift-anneal",
) -> Result:
    """Annealed shift (`anneal_order`) from the same start orders as `run_shift`, in rounds that
    use the whole time limit.

    The first round starts from `shift`'s local minimum, each later one from the best order so
    far, so the result is never worse than `shift` from the same start. Round r (seed seed + r)
    anneals for `steps` proposals (default 20,000 + 100 per op); after every `STALL_ROUNDS`
    rounds in a row without a better order the rounds get twice as long (slower cooling finds
    what faster did not). A round is shortened to what the time left fits (measured on the
    rounds before); 10 % of the limit is left for the bound (`BOUND_SHARE`), 10 % for the
    caller's verification. Rounds stop when the time is used, after `rounds` rounds, or when
    the best order meets the instance's lower bound (proven optimal): `anneal_stop` in the
    stats says which. Deterministic for a seed and a number of rounds unless the time limit
    shortened a round (`anneal_cut` 1): `rounds=stats["anneal_rounds"]` repeats a run.
    """
    time_limit, seed, initial_solution = opts.time_limit, opts.seed, opts.hint
    report = Reporter(opts, name)
    with stopwatch() as clock:
        g = inst.graph
        if g.n == 0:
            return report.result(heuristic_result(name, 0, to_solution(inst, []), clock()))
        budget = (0.9 - BOUND_SHARE) * time_limit
        order = _start(inst, start, seed, initial_solution)
        start_value = objective_of(inst, order)
        report(start_value)
        best, converged = shift_order(
            g, order, inst.objective, time_limit=0.5 * budget, report=report
        )
        base = 20_000 + 100 * g.n if steps is None else steps
        totals = {"anneal_steps": 0, "anneal_accepted": 0, "anneal_rounds": 0, "anneal_cut": 0}
        floor = inst.lower_bound
        rate = 0.0  # proposals per second, measured
        stall = 0
        stop = "time"
        while True:
            if rounds is not None and totals["anneal_rounds"] >= rounds:
                stop = "rounds"
                break
            if best.value <= floor:
                stop = "optimal"
                break
            r = totals["anneal_rounds"]
            size = base << min(stall // STALL_ROUNDS, 20)
            left = budget - clock()
            if rate:
                fit = int(0.8 * left * rate)
                if fit < min(size, 1000):
                    break
                if fit < size:
                    size = fit
                    totals["anneal_cut"] = 1
            elif left <= 0:
                break
            t = clock()
            state, conv, stats = anneal_order(
                g, best.order, inst.objective, seed=seed + r, steps=size, time_limit=max(left, 0)
            )
            rate = size / max(clock() - t, 1e-6)
            totals["anneal_rounds"] += 1
            totals["anneal_steps"] += size
            totals["anneal_accepted"] += stats["anneal_accepted"]
            if state.key() < best.key():
                best, converged, stall = state, conv, 0
            else:
                stall += 1
            report(best.value)
        done = _search_result(
            name,
            inst,
            best,
            converged,
            start_value,
            clock,
            BOUND_SHARE * time_limit,
            anneal_stop=stop,
            **totals,
        )
        return report.result(done)


STALL_ROUNDS = 4
"""After this many rounds in a row without a better order, `shift-anneal`'s rounds get twice as
long."""


def warm_kernels() -> None:
    """Compile (or load) every kernel of the shift family: `tensorplan warm` runs it, since a
    solve of a tiny instance ends before the iterated search, and a first compilation inside
    a warm-up solve's time limit would cut its later phases short."""
    warm_up()
    warm_bound()
    warm_cut()
    g = Graph(
        ((), (0,), (1,)),
        ((1,), (2,), ()),
        ((0, 1), (1, 2), (2,)),
        ((0,), (0, 1), (1, 2)),
        (1, 2, 3),
    )
    seed_shift(g, seed_start(g))  # the reference's kernels (benchmarks time it against shift)
    greedy_order(g)
    kahn(g, "filo")


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
        partial(run_search, name="shift"),
        "n-shift ladder descents, then iterated local search (seeded kicks + local descents) "
        "for the rest of the time limit, the seed's own procedure running beside it",
        SHIFT | {"seed"},
        warm=warm_kernels,
    ),
    Solver(
        "shift-restart",
        "heuristic",
        partial(run_shift, start="best", ladder="restart", name="shift-restart"),
        "shift, dropping back to 1-shifts after every higher-level improvement",
        SHIFT,
        warm=warm_kernels,
    ),
    Solver(
        "shift-fifo",
        "heuristic",
        partial(run_shift, start="fifo", name="shift-fifo"),
        "shift from a Kahn fifo order",
        SHIFT,
        warm=warm_kernels,
    ),
    Solver(
        "shift-filo",
        "heuristic",
        partial(run_shift, start="filo", name="shift-filo"),
        "shift from a Kahn filo order",
        SHIFT,
        warm=warm_kernels,
    ),
    Solver(
        "shift-random",
        "heuristic",
        partial(run_shift, start="random", name="shift-random"),
        "shift from a seeded random Kahn order",
        SHIFT | {"seed"},
        warm=warm_kernels,
    ),
    Solver(
        "shift-anneal",
        "heuristic",
        partial(run_anneal, start="best", name="shift-anneal"),
        "simulated annealing over block moves (seeded), then a shift descent",
        SHIFT | {"seed"},
        warm=warm_kernels,
    ),
]
