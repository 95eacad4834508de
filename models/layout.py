"""Exact layout models: a labelling problem over classes of sink elements, as a MIP and on CP-SAT.

Through the view ops every pair position is a constant (two fixed labels, or one sink element with
itself), a unary term (a sink element against a fixed label) or a binary term (two sink elements):
see `problems.layout.terms`. The objective is a sum of agreement weights, all non-negative.

Design notes (how and why): docs/design/layout_exact.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np

from tensorplan.heuristics.layout import apply_classes, class_starts, greedy0_vector, local_vector
from tensorplan.models.backends import Backend, LinearModel, cpsat_bound, run_cpsat, solve_mip
from tensorplan.problems.core import Options, Reporter, Result, Solver, Status, stopwatch
from tensorplan.problems.layout import (
    LayoutInstance,
    fresh_solution,
    objective,
    repair_barriers,
    solution_vector,
    terms,
    upper_bound,
)
from tensorplan.problems.layout_classes import ElementClass, OutOfTime, Reduction, reduce_terms

LOCAL_SHARE = 0.25  # of the time limit for `local` as the warm start
GROUP_SHARE = 0.6  # grouping must be done by this fraction of the time limit
BATCH_VARS = 1_000  # tiny classes are solved together up to this many variables
VARS_PER_SECOND = 20_000  # a model larger than this x the seconds left is not attempted
# measured on random-300ops-1000el-s7 (30 s): LP at level 2 is essential; probing and symmetry
# detection cost more than they give on these many small models
CPSAT_PARAMS: dict = {"linearization_level": 2, "symmetry_level": 0, "cp_model_probing_level": 0}
TAIL = 0.03  # fraction of the time limit kept for assembling and evaluating the answer


def class_vars(k: ElementClass) -> int:
    """Variables of a class's model: x per (element, label), y per (link, label)."""
    return k.options * (k.size + k.link_j.size)


# --- the shared build -----------------------------------------------------------------------------


@dataclass
class Batch:
    """Arrays of one model over a batch of classes (variables: per class x block then y block)."""

    classes: list[int]  # class indices
    x_base: list[int]  # first x variable of each class
    num_vars: int
    integer: np.ndarray  # bool per variable (x integer, y continuous)
    cost: np.ndarray  # objective weight per variable, multiplicity included
    choice: list[np.ndarray]  # per element row: its x variables (exactly one)
    y_var: np.ndarray  # per agreement variable y ...
    y_x1: np.ndarray  # ... y <= x1
    y_x2: np.ndarray  # ... y <= x2
    start: np.ndarray  # warm start value per variable
    cheap_bound: float  # sum over the batch of multiplicity x cheap class bound
    banned: np.ndarray  # x variables fixed to 0 (the barrier rule)


def build_batch(red: Reduction, idx: list[int], hints: list[np.ndarray]) -> Batch:
    """Lay out the labelling model of classes `idx` with numpy (no per-variable Python)."""
    costs, integ, starts = [], [], []
    choice: list[np.ndarray] = []
    yv, y1, y2, banned = [], [], [], []
    x_base = []
    base = 0
    cheap = 0.0
    for q in idx:
        k = red.classes[q]
        m = k.multiplicity
        L = k.options
        s, nl = k.size, k.link_j.size
        xb, yb = base, base + s * L
        banned.append(xb + k.ban_j * L + k.ban_c)
        x_base.append(xb)
        base = yb + nl * L
        cost = np.zeros(s * L + nl * L)
        np.add.at(cost, k.unary_j * L + k.unary_l, m * k.unary_w)
        cost[s * L :] = np.repeat(m * k.link_w, L)
        costs.append(cost)
        integ.append(np.r_[np.ones(s * L, dtype=bool), np.zeros(nl * L, dtype=bool)])
        xs = np.zeros((s, L))
        xs[np.arange(s), hints[q]] = 1.0
        agree = (hints[q][k.link_j] == hints[q][k.link_k])[:, None] & (
            np.arange(L)[None, :] == hints[q][k.link_j][:, None]
        )
        starts.append(np.r_[xs.ravel(), agree.ravel().astype(float)])
        choice.extend(xb + np.arange(s * L).reshape(s, L))
        lab = np.tile(np.arange(L), nl)
        yv.append(yb + np.arange(nl * L))
        y1.append(xb + np.repeat(k.link_j, L) * L + lab)
        y2.append(xb + np.repeat(k.link_k, L) * L + lab)
        cheap += m * k.bound()
    cat = np.concatenate
    e = [np.empty(0, dtype=np.int64)]
    return Batch(
        list(idx),
        x_base,
        base,
        cat(integ),
        cat(costs),
        choice,
        cat(e + yv),
        cat(e + y1),
        cat(e + y2),
        cat(starts),
        cheap,
        cat(e + banned),
    )


def class_picks(
    red: Reduction, b: Batch, block: Callable[[int, int], np.ndarray]
) -> dict[int, np.ndarray]:
    """Canonical labelling of every class of a batch: argmax over each element's x variables.

    `block(start, count)` returns the values of variables start..start+count-1.
    """
    out = {}
    for q, xb in zip(b.classes, b.x_base, strict=True):
        k = red.classes[q]
        L = k.options
        out[q] = np.asarray(block(xb, k.size * L), dtype=float).reshape(k.size, L).argmax(axis=1)
    return out


def linear_model(b: Batch) -> LinearModel:
    """The batch as a `LinearModel` (maximise), rows: exactly-one per element, y <= x."""
    n = b.num_vars
    rows = len(b.choice) + 2 * b.y_var.size
    starts = [0]
    index: list[int] = []
    value: list[float] = []
    for row in b.choice:
        index.extend(row.tolist())
        value.extend([1.0] * row.size)
        starts.append(len(index))
    if b.y_var.size:  # rows y - x1 <= 0, then y - x2 <= 0
        pairs = np.stack([np.r_[b.y_var, b.y_var], np.r_[b.y_x1, b.y_x2]], axis=1)
        index.extend(pairs.ravel().tolist())
        value.extend([1.0, -1.0] * (2 * b.y_var.size))
        starts.extend((starts[-1] + 2 * np.arange(1, 2 * b.y_var.size + 1)).tolist())
    lo = [1.0] * len(b.choice) + [-math.inf] * (2 * b.y_var.size)
    hi = [1.0] * len(b.choice) + [0.0] * (2 * b.y_var.size)
    assert len(lo) == rows
    return LinearModel(
        sense="max",
        lower=[0.0] * n,
        upper=np.where(np.isin(np.arange(n), b.banned), 0.0, 1.0).tolist(),
        integer=b.integer.tolist(),
        cost=b.cost.tolist(),
        names=[f"v{i}" for i in range(n)],
        row_lower=lo,
        row_upper=hi,
        row_start=starts,
        row_index=index,
        row_value=value,
    )


# --- guarded solves -------------------------------------------------------------------------------


# --- one engine, three back-ends ------------------------------------------------------------------


@dataclass
class Outcome:
    status: Status
    bound: float | None  # bound on the batch's objective (multiplicities included)
    picks: dict[int, np.ndarray]
    message: str = ""


def _solve_batch_mip(
    red: Reduction,
    b: Batch,
    backend: Backend,
    limit: float,
    seed: int,
    threads: int,
    left: float = math.inf,
) -> Outcome:
    """One batch on HiGHS or CBC within `limit` seconds; `left` is the time left overall."""
    lm = linear_model(b)
    out = solve_mip(
        lm, backend=backend, time_limit=min(limit, left), seed=seed, start=b.start, threads=threads
    )  # both back-ends are killed at their deadline by `solve_mip` itself
    picks = {}
    if out.status.has_solution and (values := out.values) is not None:
        picks = class_picks(red, b, lambda i, c: values[i : i + c])
    bound = out.bound if out.status.has_solution or out.status is Status.OPTIMAL else None
    return Outcome(out.status, bound, picks, out.message)


def _scale(weights: np.ndarray) -> tuple[int, bool]:
    """Smallest power of ten making every weight integral (exact), else 10**6 with rounding."""
    for d in range(7):
        s = 10**d
        ws = weights * s
        if np.all(np.abs(ws - np.round(ws)) <= 1e-9 * np.maximum(1.0, np.abs(ws))):
            return s, True
    return 10**6, False


def _solve_batch_cpsat(red: Reduction, b: Batch, limit: float, seed: int, workers: int) -> Outcome:
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    v = [model.new_bool_var("") for _ in range(b.num_vars)]
    for i in b.banned.tolist():
        model.add(v[i] == 0)
    for row in b.choice:
        model.add_exactly_one(v[i] for i in row.tolist())
    for y, x1, x2 in zip(b.y_var.tolist(), b.y_x1.tolist(), b.y_x2.tolist(), strict=True):
        model.add_implication(v[y], v[x1])
        model.add_implication(v[y], v[x2])
    nz = np.flatnonzero(b.cost)
    scale, exact = _scale(b.cost[nz])
    coef = np.round(b.cost[nz] * scale).astype(np.int64)
    expr = cp_model.LinearExpr.weighted_sum([v[i] for i in nz.tolist()], coef.tolist())
    model.add(expr <= math.floor(b.cheap_bound * scale + 1e-6))
    model.maximize(expr)
    for i, s in enumerate(b.start.tolist()):
        model.add_hint(v[i], s > 0.5)
    solver, status = run_cpsat(
        model, time_limit=limit, seed=seed, workers=workers, params=CPSAT_PARAMS
    )
    picks = {}
    if status.has_solution:
        picks = class_picks(
            red,
            b,
            lambda i, c: np.array([solver.boolean_value(x) for x in v[i : i + c]], dtype=float),
        )
    sb = cpsat_bound(solver, status, sense="max")
    bound = None if sb is None or not exact or not status.has_solution else sb / scale
    msg = ""
    if not exact:
        msg = "weights rounded to 1e-6 for CP-SAT: optimality not claimed"
        if status is Status.OPTIMAL:
            status = Status.FEASIBLE
    return Outcome(status, bound, picks, msg)


def run_exact(
    inst: LayoutInstance,
    opts: Options,
    *,
    engine: Backend | Literal["cpsat"] = "highs",
    name: str = "mip",
) -> Result:
    """Warm start, group, solve the classes batch by batch within the time limit, assemble."""
    time_limit, seed, initial_solution = opts.time_limit, opts.seed, opts.hint
    report = Reporter(opts, name, "max")
    with stopwatch() as elapsed:
        T = max(float(time_limit), 0.0)
        x0 = (
            repair_barriers(inst.graph, solution_vector(inst, initial_solution))[0]
            if initial_solution is not None
            else greedy0_vector(inst)[0]
        )
        stats: dict = {"sink_elements": inst.graph.num_sink_elements}

        def out_of_time() -> None:
            if elapsed() >= GROUP_SHARE * T:
                raise OutOfTime

        try:  # set-up too long for the time limit: the warm start, and the harness's bound
            tm = terms(inst, out_of_time)
            red = reduce_terms(tm, out_of_time, inst.graph)
        except OutOfTime:
            return _result(
                inst,
                name,
                Status.FEASIBLE,
                x0,
                None,
                elapsed(),
                "time limit reached while grouping: warm start",
                stats,
                report,
            )
        ub = upper_bound(inst)
        stats.update(
            classes=len(red.classes),
            components=red.components,
            isolated_elements=int(np.count_nonzero(red.isolated_x >= 0)),
        )
        # warm start: the better of the start and `local` within its share of the time
        xw, _ = local_vector(
            inst, x0, tm, time_limit=elapsed() + LOCAL_SHARE * T, elapsed=elapsed, red=red
        )
        stats["warm_start_objective"] = tm.value(xw)
        report(objective(inst, fresh_solution(inst, xw)), ub)
        hints, values = class_starts(red, xw)
        base = tm.constant + red.isolated_value
        picks: dict[int, np.ndarray] = {}
        bound = base
        solved_optimal = True
        # closed form: at most one candidate label
        todo = []
        for q, k in enumerate(red.classes):
            if k.num_labels <= 1 and not k.ban_j.size:
                picks[q] = np.zeros(k.size, dtype=np.int64)
                bound += k.multiplicity * k.value(picks[q])
            else:
                todo.append(q)
        todo.sort(key=lambda q: (class_vars(red.classes[q]), q))
        batches: list[list[int]] = []
        for q in todo:
            if (
                batches
                and sum(class_vars(red.classes[i]) for i in batches[-1])
                + class_vars(red.classes[q])
                <= BATCH_VARS
            ):
                batches[-1].append(q)
            else:
                batches.append([q])
        total_vars = sum(class_vars(red.classes[q]) for q in todo)
        stats.update(variables=total_vars, batches=len(batches))
        end = T * (1.0 - TAIL) - 0.05
        msgs: list[str] = []
        left_vars = total_vars
        skipped = 0
        with report.ticking():  # the batches' back-ends are told nothing: a heartbeat
            for bi, idx in enumerate(batches):
                nv = sum(class_vars(red.classes[q]) for q in idx)
                remaining = end - elapsed()
                cheap = sum(red.classes[q].multiplicity * red.classes[q].bound() for q in idx)
                # CBC starts a process and reads a file, and is killed only half a second after its
                # limit: it needs a second left at least
                floor = 1.0 if engine == "cbc" else 0.02
                if remaining <= floor or nv > VARS_PER_SECOND * remaining:
                    bound += cheap
                    solved_optimal = False
                    skipped += len(idx)
                    left_vars -= nv
                    continue
                # a share in proportion to the model size, unused time rolls over to the rest
                share = remaining * nv / max(left_vars, 1)
                share = max(share, min(0.1, remaining / (len(batches) - bi)))
                left_vars -= nv
                b = build_batch(red, idx, hints)
                if engine == "cbc":
                    limit = min(max(share, 0.4), end - elapsed() - 0.6)
                else:
                    limit = max(min(share, end - elapsed()), 0.02)
                if engine == "cpsat":
                    out = _solve_batch_cpsat(red, b, limit, seed, opts.threads)
                else:
                    out = _solve_batch_mip(
                        red, b, engine, limit, seed, opts.threads, end - elapsed() + 0.5 * TAIL * T
                    )
                picks.update(out.picks)
                bound += cheap if out.bound is None else min(out.bound, cheap)
                if out.status is not Status.OPTIMAL:
                    solved_optimal = False
                if out.message and out.message not in msgs:
                    msgs.append(out.message)
        stats["classes_not_modelled"] = skipped
        for q in range(len(red.classes)):
            picks.setdefault(q, hints[q])
        # assemble: isolated elements at their best, every class's pick where it beats the member
        x = xw.copy()
        iso = red.isolated_x >= 0
        x[iso] = red.isolated_x[iso]
        x, _ = apply_classes(inst, red, x, [picks[q] for q in range(len(red.classes))], values)
        # the classes' models know the barrier rule only element by element (`terms` drops the
        # unary terms it forbids); a label copied along a link, or a cycle through two barriers,
        # is repaired here and the answer is then optimal only if it still meets the bound
        x, relabelled = repair_barriers(inst.graph, x, tm.value)
        if relabelled:
            stats["barrier_rule_relabelled"] = relabelled
            msgs.append(f"barrier rule: {relabelled} sink element(s) relabelled after the models")
        if tm.value(x) < tm.value(xw):  # xw obeys the barrier rule; picks are at least as good
            x = xw
        status = Status.OPTIMAL if solved_optimal else Status.FEASIBLE
        if skipped:
            msgs.append(f"{skipped} class(es) too large for the time left: warm start kept")
        return _result(
            inst, name, status, x, min(bound, ub), elapsed(), "; ".join(msgs), stats, report
        )


def _result(
    inst: LayoutInstance,
    name: str,
    status: Status,
    x: np.ndarray,
    bound: float | None,
    elapsed: float,
    message: str,
    stats: dict,
    report: Reporter,
) -> Result:
    sol = fresh_solution(inst, x)
    value = objective(inst, sol)
    if bound is None:
        return report.result(Result(name, status, value, None, elapsed, sol, message, stats))
    if status is Status.OPTIMAL:
        if abs(bound - value) <= 1e-6 * max(1.0, abs(value)):
            bound = value
        else:  # lowered by the barrier-rule repair: no longer proven
            status = Status.FEASIBLE
    if value > bound and value - bound <= 1e-6 * max(1.0, abs(value)):
        bound = value  # rounding noise only
    return report.result(Result(name, status, value, bound, elapsed, sol, message, stats))


HONOURS = frozenset({"time_limit", "seed", "threads", "hint"})  # per-class solves: no overall gap

SOLVERS = [
    Solver(
        "mip",
        "exact",
        partial(run_exact, engine="highs", name="mip"),
        "labelling MIP over classes of sink elements, HiGHS, batch by batch",
        HONOURS,
    ),
    Solver(
        "mip-cbc",
        "exact",
        partial(run_exact, engine="cbc", name="mip-cbc"),
        "the same labelling MIP on CBC (pulp)",
        HONOURS,
    ),
    Solver(
        "cpsat",
        "exact",
        partial(run_exact, engine="cpsat", name="cpsat"),
        "the labelling model on CP-SAT, weights scaled to integers",
        HONOURS,
    ),
]
