"""Exact schedule models: CP-SAT (positions), a time-indexed MIP (HiGHS / CBC), DP over downsets.

All three handle both objectives and start from a quick descent improved by the default
heuristic, `shift`, then the bound `shift` reports (`warm_start`, 40 % of the time limit at most):
the order is their warm start (and the DP's pruning bound), and the bound (the hull, cut and
Lagrangian bounds) bounds them from below, so each reports the better of that and its own.
Every model returns the warm start with status `feasible` rather than nothing when it runs out of
time, and refuses (status `unknown`, with a message) a graph too large to build.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from tensorplan.heuristics.schedule import best_start, run_search, shift_order, warm_kernels
from tensorplan.models.backends import (
    Backend,
    LinearModel,
    cpsat_bound,
    exact_result,
    reserve_s,
    run_cpsat,
    solve_mip,
)
from tensorplan.problems.core import EXACT, Options, Reporter, Result, Solver, Status, stopwatch
from tensorplan.problems.schedule import (
    Graph,
    ScheduleInstance,
    ScheduleSolution,
    closure_counts,
    hulls,
    lower_bound,
    order_objective,
    own_sizes,
    to_order,
    to_solution,
)
from tensorplan.problems.schedule_bound import search_bound
from tensorplan.problems.schedule_cut import Signature, rest_tables
from tensorplan.problems.schedule_tree import tree_optimum

MIP_MAX_OPS = 30  # the time-indexed MIP has n^2 binaries and ~|alloc users| * n^2 non-zeros
CPSAT_MAX_OPS = 5000
DP_MAX_STATES = 200_000
DP_MAX_OPS = 500
"""Beyond this the per-state cost (a pass over the allocs) makes the DP pointless. With the
bound of both boundary chains (`schedule_cut.signature_bounds`) it proves an 8 x 50 grid
(400 ops) in 24 s, through 66,695 downsets; a 10 x 50 grid it leaves 1.8 % open at 30 s."""


# --- shared helpers -------------------------------------------------------------------------------


START_SHARE = 0.2
"""Of an exact model's time limit, what `shift`'s search gets in its start (after the quick
descent, `QUICK_SHARE` at most; before the bound, `START_BOUND_SHARE`). On 1,000 ops it uses it;
on a few hundred it ends sooner, its iterated search stopping on `START_PATIENCE`. Before, the
start was the quick descent alone: on a 20 x 50 grid at 10 s `cpsat` ended at 50,757 with bound
29,299, where `shift` alone reaches 49,443 and proves 46,779."""

START_BOUND_SHARE = 0.1
"""Of an exact model's time limit, what the bound `shift` would report gets
(`schedule_bound.search_bound`). The cut DP needs 0.2 s on a 1,000-op grid: within `shift`'s
own share of a 3 s search (0.3 s) it completed in some runs and not in others."""

QUICK_SHARE = 0.1
"""Of an exact model's time limit, what its quick descent (shifts of up to 8 ops from the best
cheap start) may take at most; it usually converges far sooner."""

START_GAP = 0.01
"""A quick order within this of the hull bound is the start as it is, with that bound: neither
`shift` nor a better bound could gain more, and the time is the model's. The training graphs'
peaks are such (0.011 %); CP-SAT proves them in 8-9 s of a 10 s limit, which the 0.6 s of
`shift` and the cut bound made it miss in the shipped report."""

START_PATIENCE = 200
"""Plus one per op: kicks in a row without a better order after which the start's iterated
search stops (`shift`'s own: 200 + 10 per op). Measured at 3 s: the same orders on 100-300-op
grids, trees and bifurcating graphs, in 0.24-0.63 s instead of 0.95-2.4 s."""


def warm_start(inst: ScheduleInstance, opts: Options, name: str) -> tuple[list[int], int, int]:
    """The exact models' start: a quick descent (or `opts.hint`), then `shift` from it in
    `START_SHARE` of the time limit (its progress reported as model `name`'s). Returns the
    order, its objective, and the bound `shift` would report (`schedule_bound.search_bound` in
    `START_BOUND_SHARE` of the limit, at least the hull bound), which bounds the model's
    objective from below as well.

    A quick order within `START_GAP` of the hull bound is returned at once, with that bound.
    The order is `shift`'s only when strictly better: on a tie the quick one stays the model's
    hint, as before. CP-SAT's search depends on its hint, not only on the hint's objective:
    it proves mobilenetv2-train's peak in 9.2 s from the quick order, and not in 15 s from
    `shift`'s order of the same peak."""
    g, objective = inst.graph, inst.objective
    if opts.hint is not None:
        quick = to_order(inst, opts.hint)
    else:
        cheap = best_start(inst)
        limit = max(0.05, QUICK_SHARE * opts.time_limit)
        quick = shift_order(g, cheap, objective, max_shift=8, time_limit=limit)[0].order
    quick_value, hull = order_objective(g, quick, objective), lower_bound(inst)
    if quick_value <= (1 + START_GAP) * hull:
        return quick, quick_value, hull
    share = replace(
        opts, time_limit=START_SHARE * opts.time_limit, hint=to_solution(inst, quick), log=False
    )
    found = run_search(inst, share, name=name, patience=START_PATIENCE + g.n, bound_share=0.0)
    assert found.solution is not None  # shift always returns an order
    order = to_order(inst, found.solution)
    value = order_objective(g, order, objective)
    if value >= quick_value:  # a tie (shift from the quick order never ends above it)
        order, value = quick, quick_value
    bound = search_bound(inst, value, START_BOUND_SHARE * opts.time_limit)
    return order, value, hull if bound is None else bound


def _met(name: str, inst: ScheduleInstance, start: list[int], runtime: float) -> Result:
    """The start meets its own bound: optimal, no model needed."""
    return _result(name, inst, Status.OPTIMAL, start, None, runtime, "the start meets its bound")


def twin_pairs(g: Graph) -> list[tuple[int, int]]:
    """Consecutive ops with identical predecessors, successors and allocs, sizes included:
    interchangeable, so ordering them by index loses no optimum."""
    groups: dict[tuple, list[int]] = {}
    for v in range(g.n):
        key = (tuple(sorted(g.preds[v])), tuple(sorted(g.succs[v])), tuple(sorted(g.op_allocs[v])))
        groups.setdefault(key, []).append(v)
    pairs: list[tuple[int, int]] = []
    for vs in groups.values():
        # twins may share allocs only if every such alloc is used by both: true by the key
        pairs.extend(itertools.pairwise(vs))
    return pairs


def _result(
    name: str,
    inst: ScheduleInstance,
    status: Status,
    order: Sequence[int] | None,
    bound: float | None,
    runtime: float,
    message: str = "",
    *,
    warm: Sequence[int] | None = None,
    stats: Mapping[str, Any] | None = None,
    report: Reporter | None = None,
) -> Result:
    """The result of an exact schedule model, through the one wrap-up (`exact_result`): the
    warm start `warm` is returned when the solver found nothing better; told to `report`."""

    def value(sol: ScheduleSolution) -> int:
        return order_objective(inst.graph, to_order(inst, sol), inst.objective)

    return exact_result(
        name,
        "min",
        status,
        None if order is None else to_solution(inst, order),
        bound,
        runtime,
        objective=value,
        warm=None if warm is None else to_solution(inst, warm),
        message=message,
        stats=stats,
        report=report,
    )


def _too_large(name: str, n: int, cap: int, model: str, advice: str = "") -> Result | None:
    """Refuse (status `unknown`, at once) a graph of `n` ops above a model's size cap."""
    if n <= cap:
        return None
    message = f"graph too large for {model} ({n} > {cap} ops){advice}"
    return Result(name, Status.UNKNOWN, None, None, 0.0, message=message)


def _empty(name: str, inst: ScheduleInstance) -> Result | None:
    if inst.graph.n == 0:
        return Result(name, Status.OPTIMAL, 0, 0, 0.0, to_solution(inst, []))
    return None


# --- CP-SAT ---------------------------------------------------------------------------------------


def run_cpsat_model(
    inst: ScheduleInstance,
    opts: Options,
) -> Result:
    """Position variables, all-different, precedence, first/last user per alloc (min/max).

    sum_liveness: minimise sum size * (last - first + 1). peak: each alloc is an interval
    [first, last + 1) of demand size under a cumulative whose capacity is the minimised peak.
    """
    time_limit, seed = opts.time_limit, opts.seed
    from ortools.sat.python import cp_model

    name = "cpsat"
    if (done := _empty(name, inst)) is not None:
        return Reporter(opts, name).result(done)
    g = inst.graph
    if (refused := _too_large(name, g.n, CPSAT_MAX_OPS, "the CP-SAT model")) is not None:
        return Reporter(opts, name).result(refused)
    report = Reporter(opts, name)
    reserve = reserve_s(time_limit)  # the harness's check, freeing the model
    with stopwatch() as clock:
        start, upper, lb = warm_start(inst, opts, name)
        report(upper, lb)
        if upper <= lb:
            return report.result(_met(name, inst, start, clock()))
        start_pos = [0] * g.n
        for p, v in enumerate(start):
            start_pos[v] = p
        n = g.n
        n_anc, n_desc = closure_counts(g)
        m = cp_model.CpModel()
        pos = [m.new_int_var(n_anc[v], n - 1 - n_desc[v], f"p{v}") for v in range(n)]
        m.add_all_different(pos)
        for v in range(n):
            for u in g.preds[v]:
                m.add(pos[u] + 1 <= pos[v])
        for u, v in twin_pairs(g):
            m.add(pos[u] < pos[v])
        terms, intervals, demands = [], [], []
        spans = [h.bit_count() for h in hulls(g)]  # every schedule keeps alloc a live this long
        for a, users in enumerate(g.alloc_ops):
            if not users:
                continue
            size = g.sizes[a]
            if len(users) == 1:
                f = lst = pos[users[0]]
            else:
                f = m.new_int_var(0, n - 1, f"f{a}")
                lst = m.new_int_var(0, n - 1, f"l{a}")
                m.add_min_equality(f, [pos[v] for v in users])
                m.add_max_equality(lst, [pos[v] for v in users])
                m.add(lst - f >= spans[a] - 1)
                m.add_hint(f, min(start_pos[v] for v in users))
                m.add_hint(lst, max(start_pos[v] for v in users))
            terms.append(size * (lst - f + 1))
            if inst.objective == "peak":
                length = m.new_int_var(max(1, spans[a]), n, f"len{a}")
                intervals.append(m.new_interval_var(f, length, lst + 1, f"i{a}"))
                demands.append(size)
        if inst.objective == "peak":
            peak = m.new_int_var(lb, max(sum(g.sizes), lb), "peak")
            m.add_cumulative(intervals, demands, peak)
            m.minimize(peak)
        else:
            total = sum(terms)
            m.add(total >= lb)
            m.minimize(total)
        for v in range(n):
            m.add_hint(pos[v], start_pos[v])
        solver, status = run_cpsat(
            m,
            time_limit=max(time_limit - clock() - reserve, 0.05),
            seed=seed,
            workers=opts.threads,
            gap=opts.gap,
            report=report,
        )
        bound = max(cpsat_bound(solver, status) or lb, lb)
        stats = {"variables": len(m.proto.variables), "constraints": len(m.proto.constraints)}
        if status.has_solution:
            values = [solver.value(p) for p in pos]
            order = sorted(range(n), key=values.__getitem__)
            return _result(
                name, inst, status, order, bound, clock(), warm=start, stats=stats, report=report
            )
        if status is Status.INFEASIBLE:  # cannot happen on an acyclic graph
            return _result(
                name,
                inst,
                Status.ERROR,
                None,
                None,
                clock(),
                "CP-SAT claims infeasible",
                stats=stats,
                report=report,
            )
    return _result(name, inst, status, None, bound, clock(), warm=start, stats=stats, report=report)


# --- time-indexed MIP -----------------------------------------------------------------------------


def build_mip(
    inst: ScheduleInstance, start: Sequence[int] | None = None
) -> tuple[LinearModel, dict[tuple[int, int], int], list[float] | None]:
    """x[v,t] = op v at position t; s[a,t] (alloc started by t), e[a,t] (a user at t or later),
    y[a,t] >= s + e - 1 (live at t). Objective sum size*y, or a peak >= sum_a size*y[a,t] for all t.
    Returns (model, x index, start vector or None)."""
    g = inst.graph
    n = g.n
    n_anc, n_desc = closure_counts(g)
    lm = LinearModel("min")
    x: dict[tuple[int, int], int] = {}
    peak_obj = inst.objective == "peak"
    for v in range(n):
        for t in range(n_anc[v], n - n_desc[v]):
            x[v, t] = lm.binary(name=f"x_{v}_{t}")
    for v in range(n):
        lm.add([(x[v, t], 1.0) for t in range(n) if (v, t) in x], 1, 1)
    for t in range(n):
        lm.add([(x[v, t], 1.0) for v in range(n) if (v, t) in x], 1, 1)

    def by(v: int, t: int) -> list[tuple[int, float]]:  # v placed at or before t
        return [(x[v, k], 1.0) for k in range(t + 1) if (v, k) in x]

    def from_(v: int, t: int) -> list[tuple[int, float]]:  # v placed at or after t
        return [(x[v, k], 1.0) for k in range(t, n) if (v, k) in x]

    for v in range(n):
        for u in g.preds[v]:
            for t in range(n):  # v by t  =>  u by t-1
                lm.add(by(v, t) + [(i, -c) for i, c in by(u, t - 1)], hi=0)
    for u, v in twin_pairs(g):
        for t in range(n):
            lm.add(by(v, t) + [(i, -c) for i, c in by(u, t - 1)], hi=0)
    peak = lm.var(0, math.inf, cost=1.0 if peak_obj else 0.0, name="peak") if peak_obj else None
    live_rows: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    objective_terms: list[tuple[int, float]] = []
    svar: dict[tuple[int, int], int] = {}
    evar: dict[tuple[int, int], int] = {}
    yvar: dict[tuple[int, int], int] = {}
    for a, users in enumerate(g.alloc_ops):
        if not users:
            continue
        size = float(g.sizes[a])
        for t in range(n):
            s_ = svar[a, t] = lm.var(0, 1, name=f"s_{a}_{t}")
            e_ = evar[a, t] = lm.var(0, 1, name=f"e_{a}_{t}")
            y_ = yvar[a, t] = lm.var(0, 1, cost=0.0 if peak_obj else size, name=f"y_{a}_{t}")
            for u in users:
                lm.add([(s_, 1.0)] + [(i, -c) for i, c in by(u, t)], lo=0)
                lm.add([(e_, 1.0)] + [(i, -c) for i, c in from_(u, t)], lo=0)
            lm.add([(y_, 1.0), (s_, -1.0), (e_, -1.0)], lo=-1)
            live_rows[t].append((y_, size))
            objective_terms.append((y_, size))
    lb = float(lower_bound(inst))
    if peak is not None:
        for t in range(n):
            lm.add([(peak, 1.0)] + [(i, -c) for i, c in live_rows[t]], lo=0)
        lm.add([(peak, 1.0)], lo=lb)
    else:
        lm.add(objective_terms, lo=lb)
    values = None
    if start is not None:
        values = [0.0] * lm.num_vars
        pos = [0] * n
        for p, v in enumerate(start):
            pos[v] = p
            values[x[v, p]] = 1.0
        prof = [0.0] * n
        for a, users in enumerate(g.alloc_ops):
            if not users:
                continue
            f, last = min(pos[u] for u in users), max(pos[u] for u in users)
            for t in range(n):
                values[svar[a, t]] = float(t >= f)
                values[evar[a, t]] = float(t <= last)
                values[yvar[a, t]] = float(f <= t <= last)
                prof[t] += g.sizes[a] * float(f <= t <= last)
        if peak is not None:
            values[peak] = max(prof, default=0.0)
    return lm, x, values


def run_mip(
    inst: ScheduleInstance,
    opts: Options,
    *,
    backend: Backend = "highs",
    name: str = "mip",
) -> Result:
    time_limit, seed = opts.time_limit, opts.seed
    if (done := _empty(name, inst)) is not None:
        return Reporter(opts, name).result(done)
    g = inst.graph
    if (
        refused := _too_large(
            name, g.n, MIP_MAX_OPS, "the time-indexed MIP", "; use cpsat or shift"
        )
    ) is not None:
        return Reporter(opts, name).result(refused)
    report = Reporter(opts, name)
    reserve = reserve_s(time_limit)  # the harness's check, freeing the model
    with stopwatch() as clock:
        start, upper, lb = warm_start(inst, opts, name)
        report(upper, lb)
        if upper <= lb:
            return report.result(_met(name, inst, start, clock()))
        lm, x, values = build_mip(inst, start)
        out = solve_mip(
            lm,
            backend=backend,
            time_limit=max(time_limit - clock() - reserve, 0.05),
            seed=seed,
            start=values,
            threads=opts.threads,
            gap=opts.gap,
            report=report,
        )
        bound = lb if out.bound is None else max(math.ceil(out.bound - 1e-6), lb)
        order: list[int] | None = None
        if out.values is not None and out.status.has_solution:
            where = {v: t for (v, t), i in x.items() if out.values[i] > 0.5}
            order = sorted(range(g.n), key=where.__getitem__)
        return _result(
            name,
            inst,
            out.status,
            order,
            bound,
            clock(),
            out.message,
            warm=start,
            stats=lm.stats(),
            report=report,
        )


# --- DP over downsets -----------------------------------------------------------------------------

DP_TREE_SHARE = 0.5
"""Of its limit, what `dp` gives the exact out-tree optimum (`schedule_tree.tree_optimum`,
sum-liveness, any size) before the downset DP: it returns at once on other graphs."""

DP_CUT_SHARE = 0.25
"""Of the time left after its warm start, what `dp` may spend on the cut values its pruning
bound adds (`schedule_cut.rest_tables`: exact, and then the best signature's paths, or lower
bounds from their linear relaxation where the exact DP gives up; at 100 ops they take
milliseconds). The signature's paths cut a 6 x 50 grid's downsets from 27,353 to 8,513 (7.7 s
to 2.9 s) and a 5 x 40 grid's from 5,971 to 3,147."""


def alloc_masks(g: Graph) -> list[int]:
    """Per alloc, its users as a bit set (bit v: op v), as the downset DP compares them."""
    return [sum(1 << u for u in users) for users in g.alloc_ops]


def _rest_bound(
    g: Graph, peak: bool, cuts: np.ndarray | None, signature: Signature | None = None
) -> Callable[[int, int], int]:
    """A bound on the cost still to come after a downset t of k ops, at positions k..n-1: each
    remaining op's own allocs are live at its position; and the allocs no op of t uses are live
    at one position at least, those t cuts are live at position k, and every later prefix D_j
    (j > k) cuts at least cut(j) (`cuts`, from `schedule_cut`, or lower bounds on them; zeros
    without them), or with a `signature` (`schedule_cut.signature_rest`) at least what its paths
    from t's size and counted ops give. Summed for sum-liveness, the largest term for peak; the
    higher of the two bounds."""
    n = g.n
    own = own_sizes(g)
    amask = alloc_masks(g)
    later = [0] * (n + 2)  # later[k]: the cut terms of positions k..n-1
    for j in range(n - 1, 0, -1):
        c = 0 if cuts is None else int(cuts[j])
        later[j] = max(later[j + 1], c) if peak else later[j + 1] + c
    # the signature's paths by size, then by the downset's count of each set's ops (indexed in
    # place: as nested lists, two chains of 100 ops at 500 ops would take 5 M Python ints)
    masks, paths = ((), None) if signature is None else (signature.masks, signature.rest)

    def rest(t: int, k: int) -> int:
        left = [own[v] for v in range(n) if not t >> v & 1]
        cross = unopened = 0
        for size, m in zip(g.sizes, amask, strict=True):
            if m & t:
                cross += size if m & ~t else 0
            elif m:
                unopened += size
        cut = later[k + 1]
        if paths is not None:
            cut = max(cut, int(paths[(k, *((t & mask).bit_count() for mask in masks))]))
        if peak:
            return max(max(left, default=0), cross, cut)
        return max(sum(left), unopened + cross + cut)

    return rest


def run_dp(
    inst: ScheduleInstance,
    opts: Options,
    *,
    max_states: int = DP_MAX_STATES,
) -> Result:
    """Shortest path over downsets (prefixes closed under predecessors), layer by layer. On an
    out-tree in sum-liveness mode, first the exact `schedule_tree.tree_optimum` (any size).

    Appending v to downset S costs size(open(S) | allocs(v)) for both objectives (summed for
    sum_liveness, maxed for peak). States that cannot beat the warm start (cost so far plus a
    bound on the rest, `_rest_bound`, with the cut values and signature of `schedule_cut` when
    they fit in a quarter of the time) are pruned, so if no full schedule survives the warm start
    is optimal.
    Stopping at `max_states` states or the time limit returns the warm start, `feasible`, with
    the bound proven by the last complete layer.
    """
    time_limit = opts.time_limit
    name = "dp"
    if (done := _empty(name, inst)) is not None:
        return Reporter(opts, name).result(done)
    g = inst.graph
    n = g.n
    if inst.objective == "sum_liveness":
        with stopwatch() as clock:
            found = tree_optimum(g, DP_TREE_SHARE * time_limit)
        if found is not None:
            how = "an out-tree: the least over its children's orders (schedule_tree)"
            optimal = _result(name, inst, Status.OPTIMAL, found[1], found[0], clock(), how)
            return Reporter(opts, name).result(optimal)
    if (refused := _too_large(name, n, DP_MAX_OPS, "the downset DP")) is not None:
        return Reporter(opts, name).result(refused)
    peak_obj = inst.objective == "peak"
    report = Reporter(opts, name)
    with stopwatch() as clock:
        start, ub, lb = warm_start(inst, opts, name)
        report(ub, lb)
        if ub <= lb:
            return report.result(_met(name, inst, start, clock()))
        tables = rest_tables(g, inst.objective, DP_CUT_SHARE * (time_limit - clock()))
        rest = _rest_bound(g, peak_obj, *tables)
        pred_mask = [sum(1 << u for u in g.preds[v]) for v in range(n)]
        amask = alloc_masks(g)
        sizes = g.sizes
        full = (1 << n) - 1

        layer: dict[int, int] = {0: 0}
        parents: list[dict[int, tuple[int, int]]] = []
        states = 1
        layer_bound = rest(0, 0)  # before any layer: the cut bound itself
        stopped = ""
        for _k in range(n):
            nxt: dict[int, int] = {}
            par: dict[int, tuple[int, int]] = {}
            for s, cost in layer.items():
                open_size = 0
                fresh = []
                for a, m in enumerate(amask):
                    if m & s:
                        if m & ~s:
                            open_size += sizes[a]
                    else:
                        fresh.append(a)
                fresh_set = set(fresh)
                for v in range(n):
                    if s >> v & 1 or pred_mask[v] & ~s:
                        continue
                    step = open_size + sum(sizes[a] for a in g.op_allocs[v] if a in fresh_set)
                    c = max(cost, step) if peak_obj else cost + step
                    t = s | 1 << v
                    old = nxt.get(t)
                    if old is not None and old <= c:
                        continue
                    r = rest(t, _k + 1)
                    if (max(c, r) if peak_obj else c + r) >= ub:
                        continue
                    if old is None:
                        states += 1
                    nxt[t] = c
                    par[t] = (s, v)
                if states > max_states:
                    stopped = f"state cap {max_states} reached"
                    break
                if clock() > time_limit:
                    stopped = "time limit reached"
                    break
            if stopped:
                break
            parents.append(par)
            layer = nxt
            if not layer:
                break
            # what beats the warm start costs this at least; a large layer takes seconds here,
            # so past the limit the last complete layer's bound stands
            fresh_bound: int | None = None
            for i, (s, c) in enumerate(layer.items()):
                if i % 256 == 255 and clock() > time_limit:
                    fresh_bound = None
                    break
                r = rest(s, _k + 1)
                b = max(c, r) if peak_obj else c + r
                fresh_bound = b if fresh_bound is None else min(fresh_bound, b)
            if fresh_bound is not None:
                layer_bound = fresh_bound
            report(None, min(ub, layer_bound))
        stats = {"states": states, "layers": len(parents)}
        if stopped:
            bound = min(ub, max(layer_bound, lb))
            return _result(
                name,
                inst,
                Status.FEASIBLE,
                start,
                bound,
                clock(),
                f"{stopped} after {len(parents)} of {n} layers; returning the warm start",
                stats=stats,
                report=report,
            )
        if full in layer:
            order = []
            s = full
            for par in reversed(parents):
                s, v = par[s]
                order.append(v)
            order.reverse()
            return _result(
                name, inst, Status.OPTIMAL, order, None, clock(), stats=stats, report=report
            )
    return _result(
        name,
        inst,
        Status.OPTIMAL,
        start,
        None,
        clock(),
        "no schedule beats the warm start",
        stats=stats,
        report=report,
    )


SOLVERS = [
    Solver(
        "cpsat",
        "exact",
        run_cpsat_model,
        "CP-SAT: positions, all-different, min/max per alloc (cumulative for peak)",
        EXACT,
        warm=warm_kernels,
    ),
    Solver(
        "mip",
        "exact",
        partial(run_mip, backend="highs", name="mip"),
        "time-indexed MIP on HiGHS",
        EXACT,
        warm=warm_kernels,
    ),
    Solver(
        "mip-cbc",
        "exact",
        partial(run_mip, backend="cbc", name="mip-cbc"),
        "time-indexed MIP on CBC",
        EXACT,
        warm=warm_kernels,
    ),
    Solver(
        "dp",
        "exact",
        run_dp,
        f"DP over downsets, pruned by the warm start and the cut bound, capped at {DP_MAX_STATES}"
        " states; on out-trees (sum-liveness), any size: the least over children's orders",
        frozenset({"time_limit", "hint"}),
        warm=warm_kernels,
    ),
]
