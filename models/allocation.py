"""Exact allocation models: CP-SAT (2-D no-overlap of time x address rectangles) and a big-M MIP.

Both start from the best heuristic placement (hint / MIP start), take its peak as the upper bound
and the live-size profile as the lower bound, and break the mirror symmetry (offset <-> peak -
offset - size) on the largest buffer when there is no alignment to preserve.
"""

from __future__ import annotations

import math
from functools import partial

from tensorplan.heuristics.allocation import OverlapIndex, multistart
from tensorplan.models import backends
from tensorplan.models.backends import (
    Backend,
    LinearModel,
    cpsat_bound,
    exact_result,
    run_cpsat,
)
from tensorplan.problems.allocation import AllocationInstance, AllocationSolution, lower_bound, peak
from tensorplan.problems.core import EXACT, Options, Result, Solver, Status, stopwatch


def _setup(
    inst: AllocationInstance, initial: AllocationSolution | None, seed: int, time_limit: float
) -> tuple[AllocationSolution | None, int, int]:
    """(warm start or None, lower bound, upper bound) shared by both models.

    The start is the caller's solution if feasible, else the best multistart placement; it is
    mirrored into the half the symmetry breaker keeps, and dropped if it exceeds the capacity.
    """
    from tensorplan.problems.allocation import check

    start = initial if initial is not None and not check(inst, initial) else None
    if start is None:
        start = multistart(inst, Options(time_limit=min(1.0, time_limit / 10), seed=seed)).solution
    ub = sum(b.size for b in inst.buffers) if start is None else peak(inst, start)
    if start is not None and (m := _mirror_breaker(inst)) is not None:
        b = inst.buffers[m]
        if 2 * start.offsets[m] + b.size > ub:
            start = AllocationSolution(
                tuple(ub - o - x.size for o, x in zip(start.offsets, inst.buffers, strict=True))
            )
    if inst.capacity is not None and ub > inst.capacity:
        start, ub = None, inst.capacity
    return start, lower_bound(inst), ub


def _settled(
    inst: AllocationInstance, name: str, start: AllocationSolution | None, lb: int, runtime: float
) -> Result | None:
    """A result without any model: proven infeasible by the live sizes, or optimal because the
    warm start already meets the lower bound."""
    if inst.capacity is not None and lb > inst.capacity:
        return Result(
            name,
            Status.INFEASIBLE,
            None,
            None,
            runtime,
            message=f"live sizes reach {lb} > capacity {inst.capacity}",
        )
    if start is not None and peak(inst, start) == lb:
        return Result(
            name, Status.OPTIMAL, lb, lb, runtime, start, message="warm start meets the lower bound"
        )
    return None


def _pairs(inst: AllocationInstance) -> list[tuple[int, int]]:
    index = OverlapIndex(inst)
    return [(i, j) for i in range(len(inst.buffers)) for j in index.of(i).tolist() if i < j]


def _mirror_breaker(inst: AllocationInstance) -> int | None:
    """Index of the buffer whose offset is held in the lower half, or None when not valid."""
    if inst.alignment != 1 or not inst.buffers:
        return None
    return max(range(len(inst.buffers)), key=lambda i: inst.buffers[i].size)


def solve_cpsat(inst: AllocationInstance, opts: Options) -> Result:
    """Rectangles [start, end+1) x [offset, offset+size) under AddNoOverlap2D, plus a cumulative
    over time with the peak as capacity (a stronger energy bound), minimising the peak."""
    from ortools.sat.python import cp_model

    time_limit, seed = opts.time_limit, opts.seed
    with stopwatch() as elapsed:
        start, lb, ub = _setup(inst, opts.hint, seed, time_limit)
        if (done := _settled(inst, "cpsat", start, lb, elapsed())) is not None:
            return done
        a = inst.alignment
        m = cp_model.CpModel()
        top = m.new_int_var(lb, max(lb, ub), "peak")
        xs, ts, offs = [], [], []
        for i, b in enumerate(inst.buffers):
            k = m.new_int_var(0, max(0, (ub - b.size) // a), f"slot{i}")
            off = k if a == 1 else m.new_int_var(0, max(0, ub - b.size), f"off{i}")
            if a != 1:
                m.add(off == a * k)
            offs.append(off)
            xs.append(m.new_interval_var(off, b.size, off + b.size, f"mem{i}"))
            ts.append(m.new_fixed_size_interval_var(b.start, b.duration, f"time{i}"))
            m.add(off + b.size <= top)
        m.add_no_overlap_2d(ts, xs)
        m.add_cumulative(ts, [b.size for b in inst.buffers], top)
        if (i := _mirror_breaker(inst)) is not None:
            m.add(2 * offs[i] + inst.buffers[i].size <= top)
        if start is not None:
            for off, o in zip(offs, start.offsets, strict=True):
                m.add_hint(off, o)
            m.add_hint(top, peak(inst, start))
        m.minimize(top)
        solver, status = run_cpsat(
            m,
            time_limit=max(0.1, time_limit - elapsed()),
            seed=seed,
            workers=opts.threads,
            params={"relative_gap_limit": opts.gap},
        )
        stats = {"variables": len(m.proto.variables), "constraints": len(m.proto.constraints)}
        sol = (
            AllocationSolution(tuple(int(solver.value(o)) for o in offs))
            if status.has_solution
            else None
        )
        bound = cpsat_bound(solver, status)
    return _result(inst, "cpsat", status, sol, bound, elapsed(), start, "", stats)


def _result(
    inst: AllocationInstance,
    name: str,
    status: Status,
    sol: AllocationSolution | None,
    bound: int | None,
    runtime: float,
    start: AllocationSolution | None,
    message: str,
    stats: dict,
) -> Result:
    return exact_result(
        name,
        "min",
        status,
        sol,
        bound,
        runtime,
        objective=partial(peak, inst),
        warm=start,
        message=message,
        stats=stats,
    )


def solve_mip(
    inst: AllocationInstance, opts: Options, *, backend: Backend = "highs", name: str = "mip"
) -> Result:
    """Big-M disjunctive MIP: for each lifetime-overlapping pair a binary picks which sits below.

    offset_i = alignment * k_i (k integer); above_ij = 1 means i lies below j:
    o_i + s_i <= o_j + M (1 - above_ij) and o_j + s_j <= o_i + M above_ij; peak >= o_i + s_i.
    """
    time_limit, seed = opts.time_limit, opts.seed
    with stopwatch() as elapsed:
        start, lb, ub = _setup(inst, opts.hint, seed, time_limit)
        if (done := _settled(inst, name, start, lb, elapsed())) is not None:
            return done
        a, bs = inst.alignment, inst.buffers
        big = ub
        lm = LinearModel("min")
        top = lm.var(lb, max(lb, ub), integer=True, cost=1.0, name="peak")
        slot = [
            lm.var(0, max(0, (ub - b.size) // a), integer=True, name=f"k{i}")
            for i, b in enumerate(bs)
        ]
        for i, b in enumerate(bs):
            lm.add([(slot[i], a), (top, -1)], hi=-b.size)
        pairs = _pairs(inst)
        below = {}
        for i, j in pairs:
            z = lm.binary(name=f"z{i}_{j}")
            below[i, j] = z
            lm.add([(slot[i], a), (slot[j], -a), (z, big)], hi=big - bs[i].size)
            lm.add([(slot[j], a), (slot[i], -a), (z, -big)], hi=-bs[j].size)
        if (m := _mirror_breaker(inst)) is not None:
            lm.add([(slot[m], 2 * a), (top, -1)], hi=-bs[m].size)
        warm = None
        if start is not None:
            offs = start.offsets
            warm = [0.0] * lm.num_vars
            warm[top] = peak(inst, start)
            for i, o in enumerate(offs):
                warm[slot[i]] = o // a
            for (i, j), z in below.items():
                warm[z] = 1.0 if offs[i] + bs[i].size <= offs[j] else 0.0
        out = backends.solve_mip(
            lm,
            backend=backend,
            time_limit=max(0.1, time_limit - elapsed()),
            seed=seed,
            start=warm,
            threads=opts.threads,
            gap=opts.gap,
        )
        sol = (
            AllocationSolution(tuple(round(out.values[k]) * a for k in slot))
            if out.values is not None and out.status.has_solution
            else None
        )
        bound = None if out.bound is None else math.ceil(out.bound - 1e-6)
    return _result(inst, name, out.status, sol, bound, elapsed(), start, out.message, lm.stats())


HONOURS = EXACT | {"capacity"}

SOLVERS = [
    Solver(
        "cpsat",
        "exact",
        solve_cpsat,
        "CP-SAT: 2-D no-overlap + cumulative, warm-started",
        HONOURS,
    ),
    Solver(
        "mip",
        "exact",
        partial(solve_mip, backend="highs", name="mip"),
        "big-M disjunctive MIP on HiGHS, warm-started",
        HONOURS,
    ),
    Solver(
        "mip-cbc",
        "exact",
        partial(solve_mip, backend="cbc", name="mip-cbc"),
        "the same MIP on CBC (pulp)",
        HONOURS,
    ),
]
