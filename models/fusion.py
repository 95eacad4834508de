"""Exact fusion clustering: the seed's ILP in its unoptimised and optimised forms.

Variables (seed section "Graph -> ILP"): x_ij binary for a pair of nodes, 0 when they share a
cluster; pi_i in [0, N-1] orders the clusters (equal within a cluster, strictly increasing along an
edge between clusters); c_i binary, 0 when node i's array is fully contracted. The objective is
sum W_ij x_ij + sum N c_i.

- `unopt` (the seed's first form): x for every pair, c for every node; precedence rows for every
  pair, x_ij = 1 for fusion-preventing edges and unrelated rates, the rate chain
  x_q <= x_ij, and x_ij <= c_i for every edge.
- `opt` (the seed's "fusion-preventing path optimisation"): no x for pairs with a fusion-preventing
  path, unrelated rates, or a rate chain through such a pair; their edges become pi_i + 1 <= pi_j;
  no c for an array that can never be contracted. Same optimum up to the constant those fixed
  variables contribute (`problems.fusion.unoptimised_constant`).

The same LinearModel runs on HiGHS, CBC, or (translated row by row, pi integral) CP-SAT. Every run
is warm-started from the greedy heuristic (or `initial_solution`) and handed the problem's lower
bound.
The clustering is read off as the components of {x_ij = 0}, ordered topologically. A solve stopped
by `gap` (HiGHS mip_rel_gap, CBC ratio, CP-SAT relative_gap_limit) is `feasible` with its proven
bound, never `optimal` unless the bound meets the objective. The time limit covers the whole solve:
a model estimated to take too long to build is not built, building stops at the deadline, and the
back-end gets what is left less the wrap-up; with no time for the model the warm start is the
answer (`feasible`). The solver that scales, `strong`, lives in `models/fusion_strong.py` and is
registered here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

from tensorplan.models.backends import (
    MIN_SOLVE_S,
    Backend,
    LinearModel,
    OutOfTime,
    check_deadline,
    cpsat_bound,
    exact_result,
    run_cpsat,
    solve_deadline,
    solve_mip,
    wrap_up_s,
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
from tensorplan.problems.fusion import (
    FusionInstance,
    FusionSolution,
    check,
    labels_of,
    lower_bound,
    objective,
    rate_chain,
    solution_from_labels,
    unoptimised_constant,
)


@dataclass
class FusionModel:
    """A built ILP and where its variables are."""

    form: str
    lp: LinearModel
    x: dict[tuple[int, int], int]
    pi: list[int]
    c: dict[int, int]
    constant: int  # model objective - reported objective


def model_pairs(inst: FusionInstance, form: str) -> int:
    """How many pair variables (the bulk of the rows) `build` makes in form `form`."""
    n = inst.graph.n
    return n * (n - 1) // 2 if form == "unopt" else len(inst.graph.fusable)


BUILD_S_PER_PAIR = 5e-6
"""Building either form, per pair variable with its rows (measured 3.7 us for `unopt` at 400
bindings): a model estimated past the deadline is not started."""


def build(inst: FusionInstance, form: str = "opt", *, deadline: float = math.inf) -> FusionModel:
    """The seed's ILP in form `opt` or `unopt`; raises `OutOfTime` once `time.perf_counter()`
    passes `deadline` (checked every 1024 pairs)."""
    if form not in ("opt", "unopt"):
        raise ValueError(f"unknown form {form!r}")
    g = inst.graph
    n = g.n
    lp = LinearModel()
    pi = [lp.var(0.0, float(max(n - 1, 0)), name=f"pi[{g.names[i]}]") for i in range(n)]
    if form == "unopt":
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        c_nodes = list(range(n))
    else:
        pairs = sorted(g.fusable)
        c_nodes = list(g.contractible)
    x: dict[tuple[int, int], int] = {}
    for k, p in enumerate(pairs):
        if not k & 1023:
            check_deadline(deadline)
        x[p] = lp.binary(cost=g.weight[p], name=f"x[{g.names[p[0]]},{g.names[p[1]]}]")
    c = {i: lp.binary(cost=n, name=f"c[{g.names[i]}]") for i in c_nodes}

    for k, ((i, j), v) in enumerate(x.items()):
        if not k & 1023:
            check_deadline(deadline)
        if (i, j) in g.edges:  # x <= pi_j - pi_i <= N x
            lp.add([(pi[j], 1), (pi[i], -1), (v, -1)], lo=0)
        else:  # -N x <= pi_j - pi_i <= N x
            lp.add([(pi[j], 1), (pi[i], -1), (v, n)], lo=0)
        lp.add([(pi[j], 1), (pi[i], -1), (v, -n)], hi=0)
    for (i, j), fp in g.edges.items():
        if (i, j) not in x:  # never fused: strictly before
            lp.add([(pi[j], 1), (pi[i], -1)], lo=1)
        elif fp:
            lp.add([(x[(i, j)], 1)], lo=1, hi=1)
    for k, ((i, j), v) in enumerate(x.items()):
        if not k & 1023:
            check_deadline(deadline)
        if form == "unopt" and g.root[g.rate[i]] != g.root[g.rate[j]]:
            lp.add([(v, 1)], lo=1, hi=1)
            continue
        chain = (
            rate_chain(g.rate, g.depth, g.generator, i, j)
            if g.root[g.rate[i]] == g.root[g.rate[j]]
            else ()
        )
        for q in chain:
            lp.add([(x[q], 1), (v, -1)], hi=0)
    for i, ci in c.items():
        for j in g.succ[i]:
            lp.add([(x[(i, j)], 1), (ci, -1)], hi=0)
    constant = unoptimised_constant(inst) if form == "unopt" else 0
    lb = lower_bound(inst) + constant
    if lb > 0:
        lp.add([(k, w) for k, w in enumerate(lp.cost) if w], lo=lb)
    return FusionModel(form, lp, x, pi, c, constant)


def start_values(model: FusionModel, inst: FusionInstance, sol: FusionSolution) -> list[float]:
    """The variable vector of a legal clustering (cluster position as pi)."""
    lab = labels_of(inst, sol)
    g = inst.graph
    values = [0.0] * model.lp.num_vars
    for i, v in enumerate(model.pi):
        values[v] = float(lab[i])
    for (i, j), v in model.x.items():
        values[v] = float(lab[i] != lab[j])
    for i, v in model.c.items():
        values[v] = float(any(lab[j] != lab[i] for j in g.succ[i]))
    return values


def extract(model: FusionModel, inst: FusionInstance, values) -> FusionSolution | None:
    """Components of {x_ij = 0}, ordered topologically; None if that is not a legal clustering."""
    n = inst.graph.n
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for (i, j), v in model.x.items():
        if values[v] < 0.5:
            parent[find(i)] = find(j)
    try:
        sol = solution_from_labels(inst, [find(i) for i in range(n)])
    except ValueError:
        return None
    return None if check(inst, sol) else sol


def warm_start(inst: FusionInstance, initial_solution) -> FusionSolution:
    """A legal `initial_solution`, else the best of the greedy, typed and stream heuristics."""
    if isinstance(initial_solution, FusionSolution) and not check(inst, initial_solution):
        return initial_solution
    from tensorplan.heuristics.fusion import cluster_greedy, cluster_stream, cluster_typed

    found = [
        solution_from_labels(inst, f(inst)) for f in (cluster_greedy, cluster_typed, cluster_stream)
    ]
    return min(found, key=lambda sol: objective(inst, sol))


def _finish(
    name: str,
    model: FusionModel,
    inst: FusionInstance,
    start: FusionSolution,
    status: Status,
    values,
    model_obj: float | None,
    bound: float | None,
    runtime: float,
    message: str,
    extra: dict,
    report: Reporter | None = None,
) -> Result:
    """Through the one wrap-up (`exact_result`): the warm start when the solver found nothing
    better, `optimal` only when the bound (the model's, less its constant) meets the objective."""
    stats = {**model.lp.stats(), "form": model.form, **extra}
    if bound is not None:
        bound = math.ceil(bound - model.constant - 1e-6)
    if model_obj is not None:
        stats["model_objective"] = round(model_obj)
    sol = extract(model, inst, values) if values is not None else None
    return exact_result(
        name,
        "min",
        status,
        sol,
        bound,
        runtime,
        objective=partial(objective, inst),
        warm=start,
        message=message,
        stats=stats,
        report=report,
    )


CPSAT_S_PER_ROW = 1e-5  # measured: 420k rows convert in 3.8 s


def _no_time(
    name: str,
    form: str,
    inst: FusionInstance,
    start: FusionSolution,
    runtime: float,
    backend: str,
    why: str,
    report: Reporter | None = None,
) -> Result:
    """The warm start (`feasible`, no bound of the model's) when the time limit leaves no room
    to build the model or run its back-end."""
    stats = {"form": form, "backend": backend, "pairs": model_pairs(inst, form)}
    return exact_result(
        name,
        "min",
        Status.UNKNOWN,
        None,
        None,
        runtime,
        objective=partial(objective, inst),
        warm=start,
        message=f"{why}: warm start returned",
        stats=stats,
        report=report,
    )


def _prepare(
    instance: FusionInstance, opts: Options, form: str, per_row_s: float = 0.0
) -> tuple[float, FusionSolution, FusionModel | str]:
    """(deadline of the answer, warm start, model) of a solve. The warm start comes first: it is
    the answer when there is no time for the model. In the model's place, the reason it was not
    built: estimated (`BUILD_S_PER_PAIR` a pair, `per_row_s` more a row for a later step) to end
    past the deadline less `MIN_SOLVE_S` for the back-end, or passing it while building."""
    deadline = solve_deadline(opts.time_limit)
    start = warm_start(instance, opts.hint)
    pairs = model_pairs(instance, form)
    rows = 3 * pairs  # about: two precedence rows and a rate or contraction row per pair
    if time.perf_counter() + (BUILD_S_PER_PAIR + 3 * per_row_s) * pairs + MIN_SOLVE_S > deadline:
        return deadline, start, f"no time to build a model of {pairs} pairs (~{rows} rows)"
    try:
        model = build(instance, form, deadline=deadline - MIN_SOLVE_S)
    except OutOfTime:
        return deadline, start, "time limit reached while building the model"
    return deadline, start, model


def model_gap(inst: FusionInstance, model: FusionModel, start: FusionSolution, gap: float) -> float:
    """The gap to ask of the solver so that the clustering's own gap is at most `gap`.

    The unoptimised form's objective is the clustering's plus a constant C, which shrinks a
    relative gap: within g' on the model, objective - bound <= g' (W + C) for any incumbent no
    worse than the warm start's W, and that is <= gap * L (L: the problem's lower bound, so
    <= gap * bound) once g' = gap * L / (W + C)."""
    if gap <= 0:
        return 0.0
    floor = lower_bound(inst)
    return gap * floor / max(objective(inst, start) + model.constant, 1)


def run_mip(
    instance: FusionInstance,
    opts: Options,
    *,
    name: str,
    form: str,
    backend: Backend,
) -> Result:
    report = Reporter(opts, name)
    with stopwatch() as elapsed:
        deadline, start, model = _prepare(instance, opts, form)
        report(objective(instance, start))
        if isinstance(model, str):
            return _no_time(name, form, instance, start, elapsed(), backend, model, report)
        values = start_values(model, instance, start)
        left = deadline - wrap_up_s(model.lp, model.lp.num_vars) - time.perf_counter()
        if left < MIN_SOLVE_S:
            why = f"no time left to run {backend} on the model"
            return _no_time(name, form, instance, start, elapsed(), backend, why, report)
        with report.shifted(model.constant):
            out = solve_mip(
                model.lp,
                backend=backend,
                time_limit=left,
                seed=opts.seed,
                start=values,
                threads=opts.threads,
                gap=model_gap(instance, model, start, opts.gap),
                report=report,
            )
        runtime = elapsed()
    return _finish(
        name,
        model,
        instance,
        start,
        out.status,
        out.values,
        out.objective,
        out.bound,
        runtime,
        out.message,
        {"backend": backend},
        report,
    )


def to_cpsat(lp: LinearModel, start=None, *, deadline: float = math.inf):
    """Translate an integral LinearModel to CP-SAT (continuous variables become integers: valid
    for the fusion ILP, where cluster positions serve as pi); raises `OutOfTime` once
    `time.perf_counter()` passes `deadline` (checked every 1024 rows)."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    xs = [
        m.new_int_var(math.ceil(lo), math.floor(hi), nm)
        for lo, hi, nm in zip(lp.lower, lp.upper, lp.names, strict=True)
    ]
    for r in range(lp.num_constraints):
        if not r & 1023:
            check_deadline(deadline)
        a, b = lp.row_start[r], lp.row_start[r + 1]
        expr = sum(int(lp.row_value[k]) * xs[lp.row_index[k]] for k in range(a, b))
        lo, hi = lp.row_lower[r], lp.row_upper[r]
        if math.isfinite(lo) and math.isfinite(hi):
            m.add_linear_constraint(expr, math.ceil(lo), math.floor(hi))
        elif math.isfinite(lo):
            m.add(expr >= math.ceil(lo))
        elif math.isfinite(hi):
            m.add(expr <= math.floor(hi))
    m.minimize(sum(int(w) * xs[k] for k, w in enumerate(lp.cost) if w))
    if start is not None:
        for v, s in zip(xs, start, strict=True):
            m.add_hint(v, round(s))
    return m, xs


def run_cpsat_model(
    instance: FusionInstance,
    opts: Options,
    *,
    name: str,
    form: str,
) -> Result:
    report = Reporter(opts, name)
    with stopwatch() as elapsed:
        # the conversion to CP-SAT is a Python loop over the rows: counted in the estimate
        deadline, start, model = _prepare(instance, opts, form, CPSAT_S_PER_ROW)
        report(objective(instance, start))
        if isinstance(model, str):
            return _no_time(name, form, instance, start, elapsed(), "cpsat", model, report)
        read_back = wrap_up_s(model.lp, model.lp.num_vars)
        try:
            cp, xs = to_cpsat(
                model.lp,
                start_values(model, instance, start),
                deadline=deadline - read_back - MIN_SOLVE_S,
            )
        except OutOfTime:
            why = "time limit reached while building the CP-SAT model"
            return _no_time(name, form, instance, start, elapsed(), "cpsat", why, report)
        with report.shifted(model.constant):
            solver, status = run_cpsat(
                cp,
                time_limit=deadline - read_back - time.perf_counter(),
                seed=opts.seed,
                workers=opts.threads,
                gap=model_gap(instance, model, start, opts.gap),
                report=report,
            )
        values = [solver.value(v) for v in xs] if status.has_solution else None
        model_obj = solver.objective_value if status.has_solution else None
        runtime = elapsed()
    return _finish(
        name,
        model,
        instance,
        start,
        status,
        values,
        model_obj,
        cpsat_bound(solver, status),
        runtime,
        "",
        {"backend": "cpsat"},
        report,
    )


SOLVERS = [
    Solver(
        "ilp",
        "exact",
        partial(run_mip, name="ilp", form="opt", backend="highs"),
        "seed ILP, optimised form, HiGHS",
        EXACT,
    ),
    Solver(
        "ilp-cbc",
        "exact",
        partial(run_mip, name="ilp-cbc", form="opt", backend="cbc"),
        "seed ILP, optimised form, CBC",
        EXACT,
    ),
    Solver(
        "ilp-unopt",
        "exact",
        partial(run_mip, name="ilp-unopt", form="unopt", backend="highs"),
        "seed ILP, unoptimised form, HiGHS",
        EXACT,
    ),
    Solver(
        "ilp-unopt-cbc",
        "exact",
        partial(run_mip, name="ilp-unopt-cbc", form="unopt", backend="cbc"),
        "seed ILP, unoptimised form, CBC",
        EXACT,
    ),
    Solver(
        "cpsat",
        "exact",
        partial(run_cpsat_model, name="cpsat", form="opt"),
        "seed ILP, optimised form, on CP-SAT",
        EXACT,
    ),
    Solver(
        "cpsat-unopt",
        "exact",
        partial(run_cpsat_model, name="cpsat-unopt", form="unopt"),
        "seed ILP, unoptimised form, on CP-SAT",
        EXACT,
    ),
]
