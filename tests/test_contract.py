"""The contract every solver of every problem keeps, checked on the solver's own raw result.

For each registered problem x solver, on small generated instances: the solution passes the
independent checker; the reported objective equals the recomputed one; bound and objective are
ordered by the problem's sense; `optimal` only when the bound meets the objective; the same seed
gives the same answer; a hint is never made worse (solvers declaring `hint`); the time limit
holds on an instance too big to finish. And each problem has every module the harness finds by
name (spec, generator, heuristics, models, picture, API, shipped instances with a README).
"""

from __future__ import annotations

import time
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from tensorplan.harness import registry
from tensorplan.problems.core import OPTIONS, Number, Options, Result, Status, relative_gap

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"allocation": 7, "schedule": 7, "fusion": 7, "layout": 6}
BIG = {"allocation": 2500, "schedule": 400, "fusion": 160, "layout": 400}
LIMIT = 1.0  # seconds, for the time-limit check
MARGIN = 3.0  # seconds allowed beyond it: process start-up of CBC, Python's own overheads
TOL = 1e-6

CASES = [(p, s) for p in registry.PROBLEMS for s in registry.solvers(p)]


def generator(problem: str) -> Any:
    return import_module(f"tensorplan.problems.{problem}_gen")


def run(problem: str, solver: str, inst: Any, **options: Any) -> tuple[Result, float]:
    """The solver's raw result (no harness verification) and its wall time."""
    opts = Options(**{"time_limit": 10.0, **options})
    start = time.perf_counter()
    res = registry.solver(problem, solver).run(inst, opts)
    return res, time.perf_counter() - start


def objective(res: Result) -> Number:
    """The objective of a result that carries a solution."""
    assert res.objective is not None, (res.solver, res.status, res.message)
    return res.objective


def assert_contract(problem: str, inst: Any, res: Result) -> None:
    spec = registry.problem(problem)
    assert isinstance(res, Result) and isinstance(res.status, Status)
    assert res.status is not Status.ERROR, res.message
    if not res.status.has_solution:
        assert res.solution is None and res.objective is None
        return
    assert spec.check(inst, res.solution) == [], res.message
    value = spec.evaluate(inst, res.solution)
    assert res.objective == pytest.approx(value, rel=TOL, abs=TOL)
    if res.bound is not None:
        slack = TOL * max(1.0, abs(value))
        if spec.sense == "min":
            assert res.bound <= value + slack
        else:
            assert res.bound >= value - slack
    if res.status is Status.OPTIMAL:
        assert res.bound is not None and relative_gap(value, res.bound, spec.sense) == 0


@pytest.mark.parametrize("problem, solver", CASES)
def test_solution_objective_bound_status_and_determinism(problem: str, solver: str) -> None:
    for seed in (1, 2):
        inst = generator(problem).sample(SMALL[problem], seed)
        first, _ = run(problem, solver, inst, seed=seed)
        assert_contract(problem, inst, first)
        again, _ = run(problem, solver, inst, seed=seed)
        assert again.status == first.status
        assert again.objective == first.objective
        assert again.solution == first.solution, "the same seed must give the same answer"


@pytest.mark.parametrize("problem, solver", CASES)
def test_time_limit_holds_on_an_instance_too_big_to_finish(problem: str, solver: str) -> None:
    inst = generator(problem).sample(BIG[problem], 3)
    res, wall = run(problem, solver, inst, time_limit=LIMIT)
    assert_contract(problem, inst, res)
    assert wall <= LIMIT + MARGIN, f"{solver} took {wall:.1f} s with a {LIMIT} s limit"


def best_known(problem: str, inst: Any) -> Any:
    """The best solution any exact solver finds quickly: the hint to hand to the others."""
    spec = registry.problem(problem)
    best = None
    for s in registry.solvers(problem).values():
        if s.kind == "exact":
            res, _ = run(problem, s.name, inst, time_limit=5.0)
            if res.status.has_solution and (
                best is None or spec.better(objective(res), objective(best))
            ):
                best = res
    return best


@pytest.mark.parametrize("problem", registry.PROBLEMS)
def test_hints_are_never_made_worse_and_optima_agree(problem: str) -> None:
    spec = registry.problem(problem)
    inst = generator(problem).sample(SMALL[problem] + 3, 5)
    hint = best_known(problem, inst)
    assert hint is not None
    optima = set()
    for s in registry.solvers(problem).values():
        res, _ = run(problem, s.name, inst, time_limit=5.0)
        assert_contract(problem, inst, res)
        if res.status is Status.OPTIMAL:
            optima.add(round(objective(res), 6))
        if res.status.has_solution:  # nobody beats a proven optimum, heuristics included
            assert not spec.better(objective(res), objective(hint)) or hint.status is not (
                Status.OPTIMAL
            )
        if "hint" in s.honours:
            hinted, _ = run(problem, s.name, inst, time_limit=2.0, hint=hint.solution)
            assert_contract(problem, inst, hinted)
            assert hinted.status.has_solution
            assert not spec.better(objective(hint), objective(hinted)), s.name
    assert len(optima) <= 1, f"exact solvers disagree on the optimum: {optima}"


@pytest.mark.parametrize("problem", registry.PROBLEMS)
def test_gap_stops_within_the_gap(problem: str) -> None:
    """A solver honouring `gap` that stops before its time limit is within the gap."""
    inst = generator(problem).sample(SMALL[problem] * 4, 4)
    limit = 5.0
    for s in registry.solvers(problem).values():
        if "gap" not in s.honours:
            continue
        res, wall = run(problem, s.name, inst, time_limit=limit, gap=0.2)
        assert_contract(problem, inst, res)
        if res.status.has_solution and wall < 0.7 * limit:
            gap = relative_gap(res.objective, res.bound, registry.problem(problem).sense)
            assert gap is not None and gap <= 0.2 + TOL, s.name


def test_declarations_name_known_options_only() -> None:
    for problem, solver in CASES:
        s = registry.solver(problem, solver)
        assert s.honours <= set(OPTIONS)
        assert s.kind in ("exact", "heuristic")
        assert s.summary and s.name == solver
        if s.kind == "exact":
            assert "time_limit" in s.honours, f"{problem}/{solver}: exact solvers must stop"


# --- every problem has every piece the harness looks up by name -----------------------------


def missing_pieces(problem: str) -> list[str]:
    """What the harness and the notebooks need of a problem that it lacks."""
    wanted = {
        f"tensorplan.problems.{problem}": "PROBLEM",
        f"tensorplan.problems.{problem}_gen": "sample",
        f"tensorplan.harness.picture_{problem}": "picture",
    }
    modules = registry.SOLVER_MODULES.get(problem, (f"heuristics.{problem}", f"models.{problem}"))
    wanted.update({f"tensorplan.{m}": "SOLVERS" for m in modules})
    missing = []
    for module, attribute in wanted.items():
        try:
            if not hasattr(import_module(module), attribute):
                missing.append(f"{module}.{attribute}")
        except ModuleNotFoundError:
            missing.append(module)
    if not (ROOT / "instances" / problem / "README.md").is_file():
        missing.append(f"instances/{problem}/README.md")
    import tensorplan

    try:
        getattr(tensorplan, problem)
    except AttributeError:
        missing.append(f"tensorplan.{problem}")
    return missing


@pytest.mark.parametrize("problem", registry.PROBLEMS)
def test_problem_has_every_piece(problem: str) -> None:
    assert missing_pieces(problem) == []
    kinds = {s.kind for s in registry.solvers(problem).values()}
    assert kinds == {"exact", "heuristic"}


def test_a_problem_without_its_pieces_is_caught() -> None:
    assert len(missing_pieces("packing")) == 7
