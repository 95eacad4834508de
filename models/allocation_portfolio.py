"""`fast`: the default fast allocation heuristic, every placement rule plus `bb-lds` in one limit.

Four phases share the time limit, each starting from the best packing of the one before:

1. ffd and the placement rules of OmniMalloc's fast allocators (the first `PEER_RULES`
   orderings of the portfolio of `heuristics.allocation`: `omni`'s seven first-fit orders,
   `best_fit`), within the whole time limit (not a share of it): once they have run, `fast` is
   never behind those allocators; then the packing of the blocks that rectangle composition
   rebuilds (`heuristics.allocation_compose`), which is the optimum of a tiling cut by
   guillotine and pinwheel cuts;
2. the rest of that portfolio (TelaMalloc's incumbents, the section-load orderings; components
   merged; seeded perturbations) until `FIRST_SHARE` of the limit;
3. `bb-lds` (the anytime branch and bound of `models.allocation_bb`) warm-started from it, for
   `LDS_SHARE` of what is left: it closes most small and mid-size instances to the max-load
   bound, and returns at once when the instance is too big for it;
4. the same portfolio search resumed (with `bb-lds`'s packing taken in, component by
   component), over the orderings not run yet, then perturbations, for whatever time is left.

Every phase keeps or lowers the peak, so `fast` is never worse than the portfolio's first pass
(ffd) nor than any ordering it runs. It lives in `models/` because it calls `bb-lds` (heuristics
may not import models); its kind is "heuristic": it proves nothing unless it meets the bound.

Concurrent lifetimes (a conflict graph, `AllocationInstance.conflicts`) take none of these
phases: `fast` runs the conflict-graph portfolio of `heuristics.allocation_conflicts` (its
orderings, then iterated greedy) for the whole limit (`solve_fast_concurrent`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from tensorplan.heuristics import allocation_conflicts
from tensorplan.heuristics.allocation import (
    PEER_RULES,
    PortfolioSearch,
    hint_offsets,
    warm_conflicts,
)
from tensorplan.models import allocation_bb
from tensorplan.problems.allocation import (
    CONCURRENT,
    AllocationInstance,
    AllocationSolution,
    check_reserve,
    lower_bound,
    peak,
)
from tensorplan.problems.core import Options, Reporter, Result, Solver, Status

FIRST_SHARE = 0.05
"""The share of the time limit the portfolio runs for before `bb-lds`."""
LDS_SHARE = 0.9
"""The share of the time left that `bb-lds` gets (it returns sooner when it is done or the
instance is too big for it). Splitting it in two runs, the second only while the first
improved, lost more than it won: it needs its time at once."""
MIN_PHASE_S = 0.02
"""`bb-lds` is skipped with less time than this."""
RESTARTS = 10**9
"""Perturbations are bounded by the time only."""


def solve_fast(inst: AllocationInstance, opts: Options) -> Result:
    """See the module docstring."""
    if inst.conflicts is not None:
        return solve_fast_concurrent(inst, opts)
    t0 = time.perf_counter()
    deadline = t0 + opts.time_limit - check_reserve(inst)
    lb = lower_bound(inst)
    cap = inst.capacity
    if cap is not None and lb > cap:
        return Result(
            "fast", Status.INFEASIBLE, None, None, 0.0, None, f"live sizes reach {lb} > {cap}"
        )
    free = inst.uncapped()
    report = Reporter(opts, "fast")
    search = PortfolioSearch(free, opts.seed, hint_offsets(free, opts), report)
    search.run(deadline, upto=PEER_RULES)  # the peers' rules, whatever the first share
    search.run(min(deadline, t0 + FIRST_SHARE * opts.time_limit), restarts=RESTARTS)
    left = deadline - time.perf_counter()
    if search.best.top > lb and left * LDS_SHARE > MIN_PHASE_S:
        hint = AllocationSolution(tuple(search.best.offsets.tolist()))
        with report.ticking():  # bb-lds reports nothing here: the heartbeat goes on
            lds = allocation_bb.solve(
                free,
                Options(time_limit=LDS_SHARE * left, seed=opts.seed, hint=hint),
                name="bb-lds",
                lds=True,
                max_nodes=allocation_bb.LDS_NODES,
            )
        if lds.solution is not None:
            search.offer(lds.solution, "bb-lds")
    search.run(deadline, restarts=RESTARTS)
    res = search.result(free, "fast", time.perf_counter() - t0)
    return report.result(_answer(inst, res.solution, res.runtime_s, res.stats))


def solve_fast_concurrent(inst: AllocationInstance, opts: Options) -> Result:
    """Concurrent lifetimes: a heavy clique's bound against the capacity (`infeasible` when
    the clique cannot fit), then the conflict-graph portfolio of
    `heuristics.allocation_conflicts` for the whole time limit (or until it meets the bound)."""
    t0 = time.perf_counter()
    cap = inst.capacity
    if cap is not None:
        lb = allocation_conflicts.conflict_arrays(inst).clique_bound
        if lb > cap:
            why = f"a clique of conflicting buffers needs {lb} > {cap}"
            took = time.perf_counter() - t0
            return Result("fast", Status.INFEASIBLE, None, None, took, None, why)
    left = max(opts.time_limit - (time.perf_counter() - t0), 0.01)
    res = allocation_conflicts.portfolio(inst, replace(opts, time_limit=left), name="fast")
    return replace(res, runtime_s=time.perf_counter() - t0)


def _answer(
    inst: AllocationInstance,
    best: AllocationSolution | None,
    runtime: float,
    stats: Mapping[str, object],
) -> Result:
    """Feasible with the packing when it fits the capacity (if any), else unknown."""
    best = best if best is not None else AllocationSolution(())  # no buffers
    top = peak(inst, best)
    cap = inst.capacity
    if cap is not None and top > cap:
        return Result(
            "fast",
            Status.UNKNOWN,
            None,
            None,
            runtime,
            message=f"heuristic peak {top} exceeds capacity {cap}",
            stats=stats,
        )
    message = "" if cap is None else f"peak {top} fits capacity {cap}"
    return Result("fast", Status.FEASIBLE, top, None, runtime, best, message, stats)


def warm_kernels() -> None:
    """`bb-lds`'s search kernel and the concurrent-lifetime heuristics' kernels."""
    allocation_bb.warm_kernel()
    warm_conflicts()


SOLVERS = [
    Solver(
        "fast",
        "heuristic",
        solve_fast,
        "default fast heuristic: the multistart portfolio (OmniMalloc's and TelaMalloc's "
        "placement rules included), then bb-lds, then the portfolio again, in one time limit; "
        "on conflict graphs, the multistart portfolio over the graph for the whole limit",
        frozenset({"time_limit", "seed", "hint", "capacity"}),
        supports=CONCURRENT,
        warm=warm_kernels,
    ),
]
