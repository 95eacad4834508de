"""Exact layout models: a labelling problem over classes of sink elements, as a MIP and on CP-SAT.

Through the view ops every pair position is a constant (two fixed labels, or one sink element with
itself), a unary term (a sink element against a fixed label) or a binary term (two sink elements):
see `problems.layout.terms`. The objective is a sum of agreement weights, all non-negative.

Reduction, exact at every step:
- sink elements without binary terms are independent: each takes its best unary label (closed
  form, no variables);
- the other elements split into connected components of the binary terms, which are independent
  sub-problems; components with the same canonical signature (elements in index order, labels
  renamed by first appearance, same weights and links) are one *class*: it is modelled once,
  weighted by how many components it stands for, and its optimal labelling is copied to all of them
  through each component's label renaming;
- each class's candidate labels are the labels that reach it (its unary labels); a class with none
  takes one fresh label, since with non-negative weights a second fresh label never helps.

Model of a class with elements j, candidate labels l, multiplicity m:
x[j,l] binary, sum_l x[j,l] = 1; agreement y[j,k,l] <= x[j,l], y[j,k,l] <= x[k,l] for each link
(j,k); maximise m * (sum unary_w x + sum link_w y). MIP (HiGHS or CBC through `LinearModel`) and
CP-SAT (weights scaled to integers) share the build.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from heuristics.layout import greedy0_vector, linked_components
from models.backends import LinearModel, cpsat_bound, run_cpsat, solve_mip
from problems.core import Result, Solver, Status, stopwatch
from problems.layout import (
    LayoutInstance,
    LayoutSolution,
    Terms,
    fresh_solution,
    objective,
    solution_vector,
    terms,
    upper_bound,
)


@dataclass
class Klass:
    """One class of identical components: its canonical sub-problem and the components it covers."""

    size: int  # elements per component
    num_labels: int  # canonical candidate labels (0 means: one fresh label)
    unary: list[tuple[int, int, float]]  # (element, canonical label, weight)
    links: list[tuple[int, int, float]]  # (element, element, weight)
    members: list[tuple[list[int], list[int]]]  # per component: (global elements, label ids)


@dataclass
class Reduction:
    terms: Terms
    isolated_value: float  # best total of the isolated elements
    isolated_x: np.ndarray  # best label of every isolated element (-1 elsewhere / no unary)
    classes: list[Klass]

    @property
    def components(self) -> int:
        return sum(len(k.members) for k in self.classes)


def reduce(inst: LayoutInstance) -> Reduction:
    """Split the labelling problem into closed-form elements and classes of components."""
    tm = terms(inst)
    n = tm.n
    linked = np.zeros(n, dtype=bool)
    linked[tm.bin_e] = True
    linked[tm.bin_f] = True
    us = np.searchsorted(tm.unary_e, np.arange(n + 1))
    # isolated elements: argmax of the unary weights
    iso_x = np.full(n, -1, dtype=np.int64)
    iso_value = 0.0
    if tm.unary_e.size:
        has = us[1:] > us[:-1]
        best = np.zeros(n)
        best[has] = np.maximum.reduceat(tm.unary_w, us[:-1][has])
        is_max = tm.unary_w >= best[tm.unary_e] - 1e-12
        idx = np.flatnonzero(is_max)[::-1]  # the first maximal term of each element wins
        iso_x[tm.unary_e[idx]] = tm.unary_l[idx]
        iso_x[linked] = -1
        iso_value = float(best[~linked].sum())
    classes: list[Klass] = []
    if tm.bin_e.size:
        comp = linked_components(n, tm.bin_e, tm.bin_f)
        nodes = np.flatnonzero(linked)
        order = nodes[np.argsort(comp[nodes], kind="stable")]
        cuts = np.flatnonzero(np.diff(comp[order])) + 1
        starts = [0, *cuts.tolist(), order.size]
        pos = np.zeros(n, dtype=np.int64)
        ecomp = comp[tm.bin_e]
        eorder = np.argsort(ecomp, kind="stable")
        ecut = np.searchsorted(ecomp[eorder], comp[order[np.array(starts[:-1])]])
        ecut = [*ecut.tolist(), eorder.size]
        ul, uw = tm.unary_l.tolist(), tm.unary_w.tolist()
        be, bf, bw = (tm.bin_e[eorder].tolist(), tm.bin_f[eorder].tolist(),
                      tm.bin_w[eorder].tolist())
        usl = us.tolist()
        orderl = order.tolist()
        seen: dict[tuple, int] = {}
        for c in range(len(starts) - 1):
            els = orderl[starts[c]:starts[c + 1]]  # ascending global index
            pos[els] = np.arange(len(els))
            rename: dict[int, int] = {}
            unary = []
            for j, e in enumerate(els):
                items = sorted(zip(uw[usl[e]:usl[e + 1]], ul[usl[e]:usl[e + 1]], strict=True),
                               key=lambda wl: (-wl[0], wl[1]))
                for w, lab in items:
                    unary.append((j, rename.setdefault(lab, len(rename)), w))
            links = sorted((int(pos[be[k]]), int(pos[bf[k]]), bw[k])
                           for k in range(ecut[c], ecut[c + 1]))
            sig = (len(els), tuple(unary), tuple(links))
            labels = list(rename)
            got = seen.get(sig)
            if got is None:
                seen[sig] = len(classes)
                classes.append(Klass(len(els), len(rename), unary, links, [(els, labels)]))
            else:
                classes[got].members.append((els, labels))
    return Reduction(tm, iso_value, iso_x, classes)


# --- the shared build -----------------------------------------------------------------------------


@dataclass
class Build:
    """Variable layout of the labelling model: x[(class, element, label)], y per (link, label)."""

    x: dict[tuple[int, int, int], int]
    y: list[tuple[int, int, int, int, int, float]]  # (var, class, j, k, label, weight)
    objective_terms: list[tuple[int, float]]  # (var, weight incl. multiplicity)


def _build(red: Reduction, add_var: Callable[[str], int],
           add_choice: Callable[[list[int]], None],
           add_le: Callable[[int, int], None]) -> Build:
    """Lay out the model through three callbacks: new binary, exactly-one, y <= x."""
    xs: dict[tuple[int, int, int], int] = {}
    ys = []
    obj: list[tuple[int, float]] = []
    for c, k in enumerate(red.classes):
        m = len(k.members)
        labels = max(k.num_labels, 1)
        for j in range(k.size):
            row = []
            for lab in range(labels):
                v = add_var(f"x{c}_{j}_{lab}")
                xs[c, j, lab] = v
                row.append(v)
            add_choice(row)
        for j, lab, w in k.unary:
            obj.append((xs[c, j, lab], m * w))
        for j, jj, w in k.links:
            for lab in range(labels):
                v = add_var(f"y{c}_{j}_{jj}_{lab}")
                add_le(v, xs[c, j, lab])
                add_le(v, xs[c, jj, lab])
                ys.append((v, c, j, jj, lab, w))
                obj.append((v, m * w))
    return Build(xs, ys, obj)


def _class_hint(red: Reduction, x0: np.ndarray) -> dict[tuple[int, int], int]:
    """Canonical label of each class element in the start solution (first component of a class)."""
    hint: dict[tuple[int, int], int] = {}
    for c, k in enumerate(red.classes):
        els, labels = k.members[0]
        canon = {lab: i for i, lab in enumerate(labels)}
        # a label outside the candidates: join a neighbour-free default (label 0)
        for j, e in enumerate(els):
            hint[c, j] = canon.get(int(x0[e]), 0)
    return hint


def _assemble(inst: LayoutInstance, red: Reduction, choice: Callable[[int, int], int]
              ) -> np.ndarray:
    """Sink-element labels from each class's canonical choice, copied through every component."""
    g = inst.graph
    x = red.isolated_x.copy()
    fresh = g.num_labels
    for c, k in enumerate(red.classes):
        picked = [choice(c, j) for j in range(k.size)]
        for els, labels in k.members:
            if labels:
                x[els] = [labels[p] for p in picked]
            else:
                x[els] = fresh
                fresh += 1
    left = np.flatnonzero(x < 0)
    x[left] = np.arange(fresh, fresh + left.size)
    return x


def _start(inst: LayoutInstance, initial_solution: LayoutSolution | None) -> np.ndarray:
    if initial_solution is not None:
        return solution_vector(inst, initial_solution)
    return greedy0_vector(inst)[0]


def _finish(inst: LayoutInstance, name: str, status: Status, x: np.ndarray | None,
            x0: np.ndarray, bound: float | None, elapsed: float, message: str,
            stats: dict) -> Result:
    """Pick the better of the model's labelling and the warm start; report a sound bound."""
    ub = upper_bound(inst)
    bound = ub if bound is None else min(bound, ub)
    cands = [x0] if x is None else [x, x0]
    scored = [(objective(inst, fresh_solution(inst, v)), i, v) for i, v in enumerate(cands)]
    value, _, best = max(scored, key=lambda t: (t[0], -t[1]))
    if status is not Status.OPTIMAL or x is None:
        status = Status.FEASIBLE  # a time-out keeps the better of incumbent and warm start
    return Result(name, status, value, bound, elapsed, fresh_solution(inst, best), message, stats)


def _stats(red: Reduction, model_stats: dict) -> dict:
    return {**model_stats, "classes": len(red.classes), "components": red.components,
            "sink_elements": red.terms.n,
            "isolated_elements": int(np.count_nonzero(red.isolated_x >= 0))}


def run_mip(inst: LayoutInstance, *, backend: str = "highs", name: str = "mip",
            time_limit: float = 10.0, seed: int = 0,
            initial_solution: LayoutSolution | None = None) -> Result:
    with stopwatch() as elapsed:
        x0 = _start(inst, initial_solution)
        red = reduce(inst)
        lm = LinearModel(sense="max")
        b = _build(red, lambda nm: lm.binary(name=nm),
                   lambda row: lm.add([(v, 1.0) for v in row], 1.0, 1.0),
                   lambda y, x: lm.add([(y, 1.0), (x, -1.0)], hi=0.0))
        for v, w in b.objective_terms:
            lm.cost[v] += w
        for v, *_ in b.y:  # agreements need not be integral: x is
            lm.integer[v] = False
        const = red.terms.constant + red.isolated_value
        lm.offset = const
        ub = upper_bound(inst)
        if b.objective_terms:  # hand the solver the cheap upper bound
            lm.add(b.objective_terms, hi=ub - const + 1e-6)
        hint = _class_hint(red, x0)
        start = np.zeros(lm.num_vars)
        for (c, j, lab), v in b.x.items():
            start[v] = 1.0 if hint[c, j] == lab else 0.0
        for v, c, j, jj, lab, _ in b.y:
            start[v] = 1.0 if hint[c, j] == lab == hint[c, jj] else 0.0
        if lm.num_vars == 0:
            out_status, vals, bound, msg = Status.OPTIMAL, np.empty(0), const, ""
        else:
            out = solve_mip(lm, backend=backend, time_limit=max(time_limit - elapsed(), 0.05),
                            seed=seed, start=start)
            out_status, vals, msg = out.status, out.values, out.message
            bound = out.bound if out_status.has_solution else None
        x = None
        if vals is not None and out_status.has_solution:
            x = _assemble(inst, red, lambda c, j: max(
                range(max(red.classes[c].num_labels, 1)), key=lambda lab: vals[b.x[c, j, lab]]))
        return _finish(inst, name, out_status, x, x0, bound, elapsed(), msg,
                       _stats(red, lm.stats()))


def _scale(weights: list[float]) -> tuple[int, bool]:
    """Smallest power of ten making every weight integral (exact), else 10**6 with rounding."""
    for d in range(7):
        s = 10 ** d
        if all(abs(w * s - round(w * s)) <= 1e-9 * max(1.0, abs(w * s)) for w in weights):
            return s, True
    return 10 ** 6, False


def run_cpsat_model(inst: LayoutInstance, *, name: str = "cpsat", time_limit: float = 10.0,
                    seed: int = 0, initial_solution: LayoutSolution | None = None,
                    workers: int = 1) -> Result:
    from ortools.sat.python import cp_model

    with stopwatch() as elapsed:
        x0 = _start(inst, initial_solution)
        red = reduce(inst)
        model = cp_model.CpModel()
        bools: list = []

        def new(nm: str) -> int:
            bools.append(model.new_bool_var(nm))
            return len(bools) - 1

        b = _build(red, new, lambda row: model.add_exactly_one(bools[v] for v in row),
                   lambda y, x: model.add_implication(bools[y], bools[x]))
        scale, exact = _scale([w for _, w in b.objective_terms])
        coef = [(bools[v], round(w * scale)) for v, w in b.objective_terms]
        const = red.terms.constant + red.isolated_value
        ub = upper_bound(inst)
        if coef:
            expr = sum(c * v for v, c in coef)
            model.add(expr <= math.floor((ub - const) * scale + 1e-6))
            model.maximize(expr)
        hint = _class_hint(red, x0)
        for (c, j, lab), v in b.x.items():
            model.add_hint(bools[v], hint[c, j] == lab)
        stats = {"variables": len(bools), "constraints": len(model.proto.constraints)}
        if not coef:
            status, bound, msg = Status.OPTIMAL, const, ""
            x = _assemble(inst, red, lambda c, j: 0)
        else:
            solver, status = run_cpsat(model, time_limit=max(time_limit - elapsed(), 0.05),
                                       seed=seed, workers=workers,
                                       params={"linearization_level": 2})
            x, msg = None, ""
            sb = cpsat_bound(solver, status)
            # without a solution CP-SAT's bound may be a placeholder: trust it only with one
            bound = None if sb is None or not exact or not status.has_solution \
                else const + sb / scale
            if status.has_solution:
                x = _assemble(inst, red, lambda c, j: next(
                    lab for lab in range(max(red.classes[c].num_labels, 1))
                    if solver.boolean_value(bools[b.x[c, j, lab]])))
            if not exact:
                msg = "weights rounded to 1e-6 for CP-SAT: optimality not claimed"
                if status is Status.OPTIMAL:
                    status = Status.FEASIBLE
        return _finish(inst, name, status, x, x0, bound, elapsed(), msg, _stats(red, stats))


SOLVERS = [
    Solver("mip", "exact", partial(run_mip, backend="highs", name="mip"),
           "labelling MIP over classes of sink elements, HiGHS"),
    Solver("mip-cbc", "exact", partial(run_mip, backend="cbc", name="mip-cbc"),
           "the same labelling MIP on CBC (pulp)"),
    Solver("cpsat", "exact", partial(run_cpsat_model, name="cpsat"),
           "the labelling model on CP-SAT, weights scaled to integers"),
]
