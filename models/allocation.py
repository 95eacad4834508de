"""Exact allocation models: `bb` (branch and bound, `allocation_bb`), CP-SAT (2-D no-overlap of
time x address rectangles) and a big-M MIP; `bb-lds`, bb as an anytime heuristic, is declared here.

CP-SAT and the MIP start from the best placement of the portfolio and a short `bb-lds` run (hint /
MIP start), take its peak as the upper bound and the live-size profile as the lower bound (so they
stop once the start meets it, without building a model), refuse models too big to build (status
`unknown`, with a message) or to build and run in the time left (the start, `feasible`, with a
message: the time limit covers the whole solve), and break the mirror symmetry (offset <-> peak -
offset - size) on the largest buffer when there is no alignment to preserve. With a capacity they
answer "does it fit?": the first packing within it, or `infeasible` when proven.

Concurrent lifetimes (an explicit conflict graph, `AllocationInstance.conflicts`) take separate
models, with the same conventions: CP-SAT places one address interval per buffer under a
no-overlap for each clique of a cover of the graph, the MIP has a binary per conflicting pair;
both start from the concurrent portfolio's packing and are bounded below by the heaviest clique.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from tensorplan.heuristics import allocation_conflicts
from tensorplan.heuristics.allocation import OverlapIndex
from tensorplan.models import allocation_bb, backends
from tensorplan.models.allocation_window import box
from tensorplan.models.backends import (
    FREE_S_PER_NONZERO,
    MIN_SOLVE_S,
    READ_S_PER_VAR,
    Backend,
    LinearModel,
    cpsat_bound,
    exact_result,
    run_cpsat,
    solve_deadline,
)
from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems.allocation import (
    CONCURRENT,
    AllocationInstance,
    AllocationSolution,
    conflict_graph,
    lower_bound,
    peak,
    sizes,
)
from tensorplan.problems.core import (
    EXACT,
    Options,
    Reporter,
    Result,
    Solver,
    Status,
    stopwatch,
)


def _setup(
    inst: AllocationInstance, initial: AllocationSolution | None, seed: int, time_limit: float
) -> tuple[AllocationSolution | None, int, int]:
    """(warm start or None, lower bound, upper bound) shared by both models.

    The start is the caller's solution if feasible, else the portfolio's placement improved by a
    short `bb-lds` run (see `_start`); it is mirrored into the half the symmetry breaker keeps,
    and dropped if it exceeds the capacity.
    """
    # a fifth of the budget (at most 2 s) for the start: on the shipped set it often meets the
    # max-load bound outright, and a model started higher rarely catches up in the rest
    start = _start(inst, initial, seed, min(2.0, time_limit / 5))
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


def _start(
    inst: AllocationInstance, initial: AllocationSolution | None, seed: int, budget_s: float
) -> AllocationSolution | None:
    """The warm start: the caller's packing if valid, else the portfolio heuristic's, improved
    by a short limited-discrepancy `bb` run aimed at the max-load bound (which often closes
    tight instances outright, so no model is built)."""
    free = inst.uncapped()
    opts = Options(time_limit=max(budget_s, 0.05), seed=seed, hint=initial)
    res = allocation_bb.solve(free, opts, name="start", lds=True, max_nodes=allocation_bb.LDS_NODES)
    return res.solution


def _too_big(inst: AllocationInstance, name: str, runtime: float) -> Result | None:
    """Refuse, with a message, a model that could not be built in reasonable time or memory.

    The MIP has one binary and two rows per lifetime-overlapping pair (counted without building
    the graph); CP-SAT has a few variables per buffer and a 2-D no-overlap over all of them.
    """
    n = len(inst.buffers)
    if name == "cpsat":
        if n > CPSAT_MAX_BUFFERS:
            return Result(
                name,
                Status.UNKNOWN,
                None,
                None,
                runtime,
                message=f"model too big: {n} buffers > {CPSAT_MAX_BUFFERS} (use bb or multistart)",
            )
        return None
    pairs = OverlapIndex(inst, max_edges=0).edges // 2
    if pairs > MIP_MAX_PAIRS:
        return Result(
            name,
            Status.UNKNOWN,
            None,
            None,
            runtime,
            message=f"model too big: {pairs} overlapping pairs > {MIP_MAX_PAIRS} "
            "(one binary and two rows each; use bb or cpsat)",
        )
    return None


CPSAT_MAX_BUFFERS = 20_000
MIP_MAX_PAIRS = 300_000


def _settled(
    inst: AllocationInstance,
    name: str,
    start: AllocationSolution | None,
    lb: int,
    runtime: float,
    what: str = "live sizes",
) -> Result | None:
    """A result without any model: proven infeasible by the live sizes (`what` bounds the peak
    by `lb`), or optimal because the warm start already meets the lower bound."""
    if inst.capacity is not None and lb > inst.capacity:
        return Result(
            name,
            Status.INFEASIBLE,
            None,
            None,
            runtime,
            message=f"{what} reach {lb} > capacity {inst.capacity}",
        )
    if start is not None and peak(inst, start) == lb:
        return Result(
            name, Status.OPTIMAL, lb, lb, runtime, start, message="warm start meets the lower bound"
        )
    if start is not None and inst.capacity is not None:
        return Result(
            name,
            Status.FEASIBLE,
            peak(inst, start),
            lb,
            runtime,
            start,
            message=f"warm start fits within capacity {inst.capacity}",
        )
    return None


def _pairs(inst: AllocationInstance) -> tuple[np.ndarray, np.ndarray]:
    """The lifetime-overlapping pairs (i, j), i < j, as two index arrays: by i, then as
    `OverlapIndex.of(i)` lists j."""
    index = OverlapIndex(inst)
    n = len(inst.buffers)
    if index.csr is not None:
        ptr, nbr = index.csr
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        keep = src < nbr
        return src[keep], nbr[keep].astype(np.int64)
    found = [(i, j) for i in range(n) for j in index.of(i).tolist() if i < j]
    pairs = np.asarray(found, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


MIP_S_PER_PAIR = 4e-6
"""Building the MIP, per overlapping pair (one binary, two rows; measured 1.5 us) and handing it
to a back-end: a model estimated past the deadline is not built."""


def _mirror_breaker(inst: AllocationInstance) -> int | None:
    """Index of the buffer whose offset is held in the lower half, or None when not valid."""
    if inst.alignment != 1 or not inst.buffers:
        return None
    return max(range(len(inst.buffers)), key=lambda i: inst.buffers[i].size)


def solve_cpsat(inst: AllocationInstance, opts: Options) -> Result:
    """Rectangles [start, end+1) x [offset, offset+size) under AddNoOverlap2D, plus a cumulative
    over time with the peak as capacity (a stronger energy bound), minimising the peak."""
    if inst.conflicts is not None:
        return solve_cpsat_concurrent(inst, opts)
    time_limit, seed = opts.time_limit, opts.seed
    with stopwatch() as elapsed:
        deadline = solve_deadline(time_limit)
        from ortools.sat.python import cp_model  # in the budget: a cold import takes 0.1 s

        if (done := _too_big(inst, "cpsat", elapsed())) is not None:
            return Reporter(opts, "cpsat").result(done)
        report = Reporter(opts, "cpsat")
        start, lb, ub = _setup(inst, opts.hint, seed, time_limit)
        report(None if start is None else peak(inst, start), lb)
        if (done := _settled(inst, "cpsat", start, lb, elapsed())) is not None:
            return report.result(done)
        a = inst.alignment
        m = cp_model.CpModel()
        top = m.new_int_var(lb, max(lb, ub), "peak")
        xs, ts, offs = [], [], []
        for i, b in enumerate(inst.buffers):
            off, span, during = box(m, b, i, ub, a)
            offs.append(off)
            xs.append(span)
            ts.append(during)
            m.add(off + b.size <= top)
        m.add_no_overlap_2d(ts, xs)
        m.add_cumulative(ts, [b.size for b in inst.buffers], top)
        if (half := _mirror_breaker(inst)) is not None:
            m.add(2 * offs[half] + inst.buffers[half].size <= top)
        if start is not None:
            for off, o in zip(offs, start.offsets, strict=True):
                m.add_hint(off, o)
            m.add_hint(top, peak(inst, start))
        m.minimize(top)
        # CP-SAT wants the sum of all variable domains within int64: big sizes times many buffers
        # can pass it, and then its solve says only MODEL_INVALID
        if ub * len(m.proto.variables) >= 2**62 and (why := m.validate()):
            message = f"CP-SAT refuses the model: {why}"
            return _result(
                inst, "cpsat", Status.UNKNOWN, None, None, elapsed(), start, message, {}, report
            )
        left = deadline - READ_S_PER_VAR * len(inst.buffers) - time.perf_counter()
        if left < MIN_SOLVE_S:
            why = "no time left to run CP-SAT"
            return _result(
                inst, "cpsat", Status.UNKNOWN, None, None, elapsed(), start, why, {}, report
            )
        solver, status = run_cpsat(
            m,
            time_limit=left,
            seed=seed,
            workers=opts.threads,
            gap=opts.gap,
            # with a capacity the question is "does it fit?": the first packing answers it
            params={"stop_after_first_solution": inst.capacity is not None},
            report=report,
        )
        stats = {"variables": len(m.proto.variables), "constraints": len(m.proto.constraints)}
        sol = (
            AllocationSolution(tuple(int(solver.value(o)) for o in offs))
            if status.has_solution
            else None
        )
        bound = cpsat_bound(solver, status)
    return _result(inst, "cpsat", status, sol, bound, elapsed(), start, "", stats, report)


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
    report: Reporter | None = None,
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
        report=report,
    )


def solve_mip(
    inst: AllocationInstance, opts: Options, *, backend: Backend = "highs", name: str = "mip"
) -> Result:
    """Big-M disjunctive MIP: for each pair that may be live at once (lifetimes overlap, or the
    instance lists the pair among its `conflicts`) a binary picks which sits below.

    offset_i = alignment * k_i (k integer); above_ij = 1 means i lies below j:
    o_i + s_i <= o_j + M (1 - above_ij) and o_j + s_j <= o_i + M above_ij; peak >= o_i + s_i.
    Concurrent lifetimes: the heaviest clique bounds the peak, and buffers with no conflict sit
    at 0. (Clique cuts, o_i >= sum of the sizes of C's members below i for each clique C of a
    cover, and the same above, were tried: on random 24-buffer graphs HiGHS proved no faster.)
    """
    time_limit, seed = opts.time_limit, opts.seed
    concurrent = inst.conflicts is not None
    too_big = _too_big_concurrent if concurrent else _too_big
    stats: dict[str, object] = {}
    with stopwatch() as elapsed:
        deadline = solve_deadline(time_limit)
        if (done := too_big(inst, name, elapsed())) is not None:
            return Reporter(opts, name).result(done)
        report = Reporter(opts, name)
        if concurrent:
            c = _setup_concurrent(inst, opts.hint, seed, time_limit)
            start, lb, ub, (pi, pj) = c.start, c.lb, c.ub, c.pairs
            fixed, what, known = c.g.degree() == 0, CLIQUE, c.lb
            stats["clique_bound_exact"] = c.exact
        else:
            start, lb, ub = _setup(inst, opts.hint, seed, time_limit)
            (pi, pj), fixed, what, known = _pairs(inst), None, "live sizes", None
        report(None if start is None else peak(inst, start), lb)
        if (done := _settled(inst, name, start, lb, elapsed(), what)) is not None:
            return report.result(done)
        kind = "conflicting" if concurrent else "overlapping"
        # after the back-end: the offsets read (not the pairs' binaries), the model freed
        read_back = READ_S_PER_VAR * len(inst.buffers) + FREE_S_PER_NONZERO * 6 * len(pi)
        if time.perf_counter() + MIP_S_PER_PAIR * len(pi) + read_back + MIN_SOLVE_S > deadline:
            why = f"no time to build the MIP of {len(pi)} {kind} pairs"
            return _result(
                inst, name, Status.UNKNOWN, None, known, elapsed(), start, why, {}, report
            )
        lm, top, slot, z = _mip_model(inst, lb, ub, pi, pj, fixed)
        warm = None
        if start is not None:
            offs = np.asarray(start.offsets, dtype=np.int64)
            warm = np.zeros(lm.num_vars)
            warm[top] = peak(inst, start)
            warm[slot] = offs // inst.alignment
            size = np.fromiter((b.size for b in inst.buffers), dtype=np.int64)
            warm[z] = offs[pi] + size[pi] <= offs[pj]
        left = deadline - read_back - time.perf_counter()
        if left < MIN_SOLVE_S:
            why = f"no time left to run the MIP of {len(pi)} {kind} pairs"
            return _result(
                inst, name, Status.UNKNOWN, None, known, elapsed(), start, why, {}, report
            )
        out = backends.solve_mip(
            lm,
            backend=backend,
            time_limit=left,
            seed=seed,
            start=warm,
            threads=opts.threads,
            gap=opts.gap,
            report=report,
        )
        sol = (
            AllocationSolution(tuple(round(out.values[k]) * inst.alignment for k in slot))
            if out.values is not None and out.status.has_solution
            else None
        )
        bound = None if out.bound is None else math.ceil(out.bound - 1e-6)
        if concurrent:
            bound = _with_clique(bound, out.status, lb)
        stats = {**lm.stats(), **stats}
        del lm  # freeing a large model takes a while: inside the solve's time
    return _result(inst, name, out.status, sol, bound, elapsed(), start, out.message, stats, report)


def _mip_model(
    inst: AllocationInstance,
    lb: int,
    ub: int,
    pi: np.ndarray,
    pj: np.ndarray,
    fixed: np.ndarray | None = None,
) -> tuple[LinearModel, int, list[int], np.ndarray]:
    """(model, peak column, slot columns, pair binaries): offset_i = alignment * slot_i,
    z = 1 puts i (the pair's first buffer) below j, big-M = `ub` (the start's peak, or the
    capacity); buffers marked in `fixed` (no conflict at all) sit at 0."""
    a, bs = inst.alignment, inst.buffers
    big = ub
    size = np.fromiter((b.size for b in bs), dtype=np.int64, count=len(bs))
    lm = LinearModel("min")
    top = lm.var(lb, max(lb, ub), integer=True, cost=1.0, name="peak")
    slot = [
        lm.var(
            0,
            0 if fixed is not None and fixed[i] else max(0, (ub - b.size) // a),
            integer=True,
            name=f"k{i}",
        )
        for i, b in enumerate(bs)
    ]
    for i, b in enumerate(bs):
        lm.add([(slot[i], a), (top, -1)], hi=-b.size)
    z = lm.binaries(len(pi), prefix="z")
    cols = np.asarray(slot, dtype=np.int64)
    si, sj = cols[pi], cols[pj]
    ones = np.ones(len(pi), dtype=np.int64)
    # o_i + s_i <= o_j + M (1 - z) and o_j + s_j <= o_i + M z, both rows of each pair in turn
    index = np.stack([si, sj, z, sj, si, z], axis=1).reshape(-1, 3)
    value = np.stack([a * ones, -a * ones, big * ones, a * ones, -a * ones, -big * ones], 1)
    upper = np.stack([big - size[pi], -size[pj]], axis=1).ravel()
    lm.add_rows(index, value.reshape(-1, 3), -math.inf, upper)
    if (m := _mirror_breaker(inst)) is not None:
        lm.add([(slot[m], 2 * a), (top, -1)], hi=-bs[m].size)
    return lm, top, slot, z


# --- concurrent lifetimes: an explicit conflict graph ---------------------------------------------

CONCURRENT_CPSAT_MAX_PAIRS = 500_000
"""CP-SAT on a concurrent instance past this many conflicting pairs is refused: covering the
graph by cliques and building a no-overlap for each takes seconds there (about 10 us a pair)."""
CONCURRENT_S_PER_PAIR = 2e-5
"""Covering the conflict graph by cliques and building CP-SAT's no-overlaps, per conflicting
pair (measured 4-10 us): a model estimated past the deadline is not built."""
START_S_PER_BUFFER = 0.01
"""The warm start's search, per buffer: on a few buffers the model proves the optimum in less
time than the search would spend looking for it (it stops early only on the clique bound)."""
CLIQUE = "a clique's sizes"
"""What bounds the peak of a concurrent instance (`_settled`'s message)."""


@dataclass(frozen=True)
class _Concurrent:
    """What both concurrent models start from: the conflict graph, the sizes, the heaviest
    clique found and its bound `lb` (`exact`: a proven maximum), the warm start and its peak
    `ub` (the capacity when there is no start within it)."""

    g: ac.Graph
    size: np.ndarray
    clique: list[int]
    lb: int
    exact: bool
    start: AllocationSolution | None
    ub: int

    @property
    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        ptr, nbr = self.g.indptr, self.g.indices
        src = np.repeat(np.arange(self.g.n, dtype=np.int64), np.diff(ptr))
        keep = src < nbr
        return src[keep], nbr[keep].astype(np.int64)


def _too_big_concurrent(inst: AllocationInstance, name: str, runtime: float) -> Result | None:
    """Refuse, with a message, a concurrent model too big to build: CP-SAT by its buffers and
    pairs (the clique cover), the MIP by its pairs (one binary and two rows each)."""
    n, pairs = len(inst.buffers), len(inst.conflicts or ())
    why = None
    if name == "cpsat" and n > CPSAT_MAX_BUFFERS:
        why = f"{n} buffers > {CPSAT_MAX_BUFFERS}"
    elif name == "cpsat" and pairs > CONCURRENT_CPSAT_MAX_PAIRS:
        why = f"{pairs} conflicting pairs > {CONCURRENT_CPSAT_MAX_PAIRS}"
    elif name != "cpsat" and pairs > MIP_MAX_PAIRS:
        why = f"{pairs} conflicting pairs > {MIP_MAX_PAIRS} (one binary and two rows each)"
    if why is None:
        return None
    return Result(name, Status.UNKNOWN, None, None, runtime, message=f"model too big: {why}")


def _setup_concurrent(
    inst: AllocationInstance, initial: AllocationSolution | None, seed: int, time_limit: float
) -> _Concurrent:
    """The heaviest clique (a tenth of the budget, at most 1 s, for the exact search) and the
    warm start (a fifth, at most 2 s, as the interval models' start, and START_S_PER_BUFFER a
    buffer: `_concurrent_start`),
    mirrored into the half the symmetry breaker keeps, isolated buffers moved to 0, dropped if
    it exceeds the capacity."""
    g, size, a = conflict_graph(inst), sizes(inst), inst.alignment
    members, exact = ac.max_clique(g, size, min(1.0, time_limit / 10))
    lb = max(ac.rounded_clique_bound(size, members, a), int(size.max(initial=0)))
    budget_s = min(2.0, time_limit / 5, START_S_PER_BUFFER * len(size))
    offs = _concurrent_start(inst, lb, initial, seed, budget_s)
    ub = int((offs + size).max(initial=0))
    if (m := _mirror_breaker(inst)) is not None and 2 * offs[m] + size[m] > ub:
        offs = ub - offs - size
    offs[g.degree() == 0] = 0
    start: AllocationSolution | None = AllocationSolution(tuple(offs.tolist()))
    if inst.capacity is not None and ub > inst.capacity:
        start, ub = None, inst.capacity
    return _Concurrent(g, size, members, lb, exact, start, ub)


def _concurrent_start(
    inst: AllocationInstance,
    lb: int,
    initial: AllocationSolution | None,
    seed: int,
    budget_s: float,
) -> np.ndarray:
    """The best packing of the concurrent portfolio (`heuristics.allocation_conflicts`: greedy
    orderings, the caller's packing compacted among them when valid, then iterated greedy from
    the best) within `budget_s`, or as soon as it meets `lb`; the capacity is left to the
    caller."""
    arrays = allocation_conflicts.conflict_arrays(inst)
    hint = allocation_conflicts.hint_offsets(inst, Options(seed=seed, hint=initial))
    search = allocation_conflicts.ConcurrentSearch(arrays, seed, hint)
    search.bound = max(search.bound, lb)
    search.run(time.perf_counter() + budget_s)
    return search.offsets.copy()


def _clique_cover(g: ac.Graph, size: np.ndarray, first: list[int]) -> list[list[int]]:
    """Cliques covering every edge of `g`, `first` (a clique) among them: from each uncovered
    edge, grown greedily by the common neighbour that covers most new edges (then the
    heaviest), while one covers any. A leftover edge is a clique of two."""
    adj = [set(g.neighbours(v).tolist()) for v in range(g.n)]
    todo = [set(nb) for nb in adj]
    cliques: list[list[int]] = []

    def take(clique: list[int]) -> None:
        for k, u in enumerate(clique):
            for v in clique[k + 1 :]:
                todo[u].discard(v)
                todo[v].discard(u)
        cliques.append(clique)

    if len(first) >= 2:
        take(list(first))
    w = size.tolist()
    for u in sorted(range(g.n), key=lambda v: -len(adj[v])):
        while todo[u]:
            v = max(todo[u], key=lambda x: (len(todo[x]), w[x]))
            clique = [u, v]
            cand = adj[u] & adj[v]
            gain = {x: (x in todo[u]) + (x in todo[v]) for x in cand}
            while cand:
                x = max(cand, key=lambda y: (gain[y], w[y]))
                if not gain[x]:
                    break
                clique.append(x)
                cand &= adj[x]
                for y in cand:
                    gain[y] += y in todo[x]
            take(clique)
    return cliques


def solve_cpsat_concurrent(inst: AllocationInstance, opts: Options) -> Result:
    """Concurrent lifetimes on CP-SAT: an address interval per buffer (its offset in units of
    the alignment), one no-overlap per clique of a cover of the conflict graph, the peak above
    every interval and at least the heaviest clique's sizes; hinted with the warm start."""
    time_limit, seed = opts.time_limit, opts.seed
    with stopwatch() as elapsed:
        deadline = solve_deadline(time_limit)
        from ortools.sat.python import cp_model  # in the budget: a cold import takes 0.1 s

        if (done := _too_big_concurrent(inst, "cpsat", elapsed())) is not None:
            return Reporter(opts, "cpsat").result(done)
        report = Reporter(opts, "cpsat")
        c = _setup_concurrent(inst, opts.hint, seed, time_limit)
        start, lb, ub, n = c.start, c.lb, c.ub, len(inst.buffers)
        report(None if start is None else peak(inst, start), lb)
        if (done := _settled(inst, "cpsat", start, lb, elapsed(), CLIQUE)) is not None:
            return report.result(done)
        build_s = CONCURRENT_S_PER_PAIR * len(inst.conflicts or ()) + READ_S_PER_VAR * n
        if time.perf_counter() + build_s + MIN_SOLVE_S > deadline:
            why = "no time to cover the conflict graph and run CP-SAT"
            return _result(
                inst, "cpsat", Status.UNKNOWN, None, lb, elapsed(), start, why, {}, report
            )
        cover = _clique_cover(c.g, c.size, c.clique)
        a = inst.alignment
        m = cp_model.CpModel()
        top = m.new_int_var(lb, max(lb, ub), "peak")
        isolated = c.g.degree() == 0
        slots, spans = [], []
        for i, b in enumerate(inst.buffers):
            k = m.new_int_var(0, 0 if isolated[i] else max(0, (ub - b.size) // a), f"slot{i}")
            slots.append(k)
            spans.append(m.new_fixed_size_interval_var(a * k, b.size, f"mem{i}"))
            m.add(a * k + b.size <= top)
        for clique in cover:
            m.add_no_overlap([spans[v] for v in clique])
        if (half := _mirror_breaker(inst)) is not None:
            m.add(2 * slots[half] + inst.buffers[half].size <= top)
        if start is not None:
            for k, o in zip(slots, start.offsets, strict=True):
                m.add_hint(k, o // a)
            m.add_hint(top, peak(inst, start))
        m.minimize(top)
        stats = {
            "variables": len(m.proto.variables),
            "constraints": len(m.proto.constraints),
            "cliques": len(cover),
            "clique_bound_exact": c.exact,
        }
        if ub * len(m.proto.variables) >= 2**62 and (why := m.validate()):
            why = f"CP-SAT refuses the model: {why}"
            return _result(
                inst, "cpsat", Status.UNKNOWN, None, lb, elapsed(), start, why, stats, report
            )
        left = deadline - READ_S_PER_VAR * n - time.perf_counter()
        if left < MIN_SOLVE_S:
            why = "no time left to run CP-SAT"
            return _result(
                inst, "cpsat", Status.UNKNOWN, None, lb, elapsed(), start, why, stats, report
            )
        solver, status = run_cpsat(
            m,
            time_limit=left,
            seed=seed,
            workers=opts.threads,
            gap=opts.gap,
            params={"stop_after_first_solution": inst.capacity is not None},
            report=report,
        )
        sol = (
            AllocationSolution(tuple(int(solver.value(k)) * a for k in slots))
            if status.has_solution
            else None
        )
        bound = _with_clique(cpsat_bound(solver, status), status, lb)
    return _result(inst, "cpsat", status, sol, bound, elapsed(), start, "", stats, report)


def _with_clique(bound: int | None, status: Status, lb: int) -> int | None:
    """The solver's bound raised to the clique bound (none for a proven infeasible model)."""
    if status is Status.INFEASIBLE:
        return None
    return lb if bound is None else max(bound, lb)


HONOURS = EXACT | {"capacity"}

SOLVERS = [
    Solver(
        "cpsat",
        "exact",
        solve_cpsat,
        "CP-SAT: 2-D no-overlap + cumulative (concurrent: a no-overlap per clique of a "
        "cover of the conflict graph), warm-started",
        HONOURS,
        supports=CONCURRENT,
        warm=allocation_conflicts.warm,
    ),
    Solver(
        "mip",
        "exact",
        partial(solve_mip, backend="highs", name="mip"),
        "big-M disjunctive MIP on HiGHS, warm-started",
        HONOURS,
        supports=CONCURRENT,
        warm=allocation_conflicts.warm,
    ),
    Solver(
        "mip-cbc",
        "exact",
        partial(solve_mip, backend="cbc", name="mip-cbc"),
        "the same MIP on CBC (pulp)",
        HONOURS,
        supports=CONCURRENT,
        warm=allocation_conflicts.warm,
    ),
]
