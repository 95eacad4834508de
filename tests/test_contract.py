"""The contract every solver of every problem keeps, checked on the solver's own raw result.

For each registered problem x solver, on small generated instances: the solution passes the
independent checker; the reported objective equals the recomputed one; bound and objective are
ordered by the problem's sense; `optimal` only when the bound meets the objective; the same seed
gives the same answer; a hint is never made worse (solvers declaring `hint`); the time limit
holds on an instance too big to finish, and meanwhile every exact solver and anytime heuristic
reports its progress (`Options.progress`), ending with its final incumbent. And each problem has
every module the harness finds by name (spec, generator, heuristics, models, picture, API,
shipped instances with a README).
"""

from __future__ import annotations

import itertools
import time
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from tensorplan.harness import registry
from tensorplan.harness.run import solve
from tensorplan.problems.core import (
    MIN_REPORT_S,
    OPTIONS,
    REPORT_S,
    Number,
    Options,
    Progress,
    Reporter,
    Result,
    Status,
    relative_gap,
)

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


NOT_REPORTING_YET = {
    ("allocation", "omnimalloc-tela"),
    ("allocation", "omnimalloc-super"),
}
"""Anytime peers that run OmniMalloc's C++ code in one call, with no callback to report through:
only the harness's final report speaks for them. Nothing of ours may join this list."""


def reports(problem: str, solver: str) -> bool:
    """Whether the solver itself must report: every exact solver, and every anytime heuristic
    (one that honours a time limit). Constructive heuristics have only the harness's report."""
    s = registry.solver(problem, solver)
    anytime = s.kind == "heuristic" and "time_limit" in s.honours
    return (s.kind == "exact" or anytime) and (problem, solver) not in NOT_REPORTING_YET


def assert_reports(problem: str, solver: str, res: Result, heard: list[Progress]) -> None:
    """What a solver reported while it ran: in order, incumbents never worse and bounds never
    weaker, every bound a valid one (never beyond the final objective), and the last report
    carrying the final incumbent."""
    if not reports(problem, solver):
        return
    sense = registry.problem(problem).sense
    worse = (lambda a, b: a > b + TOL) if sense == "min" else (lambda a, b: a < b - TOL)
    assert heard, f"{problem}/{solver} never reported its progress"
    assert all(p.solver == solver and p.sense == sense and not p.final for p in heard)
    assert all(a.elapsed_s <= b.elapsed_s for a, b in itertools.pairwise(heard))
    objectives = [p.objective for p in heard if p.objective is not None]
    bounds = [p.bound for p in heard if p.bound is not None]
    assert not any(worse(b, a) for a, b in itertools.pairwise(objectives)), objectives
    assert not any(worse(a, b) for a, b in itertools.pairwise(bounds)), bounds
    if res.status.has_solution:
        final = objective(res)
        assert heard[-1].objective == pytest.approx(final, rel=TOL, abs=TOL), (heard[-1], res)
        assert not any(worse(b, final) for b in bounds), (final, bounds)


@pytest.mark.parametrize("problem, solver", CASES)
def test_time_limit_holds_on_an_instance_too_big_to_finish(problem: str, solver: str) -> None:
    inst = generator(problem).sample(BIG[problem], 3)
    heard: list[Progress] = []
    res, wall = run(problem, solver, inst, time_limit=LIMIT, progress=heard.append)
    assert_contract(problem, inst, res)
    assert wall <= LIMIT + MARGIN, f"{solver} took {wall:.1f} s with a {LIMIT} s limit"
    assert_reports(problem, solver, res, heard)


@pytest.mark.parametrize("problem, solver", CASES)
def test_progress_reports_on_a_small_instance_end_with_the_harness_final(
    problem: str, solver: str
) -> None:
    """Through the front door, on a small instance: the solver's own reports (see
    `assert_reports`), then exactly one `final` report, last, of the verified result."""
    inst = generator(problem).sample(SMALL[problem] * 2, 6)
    heard: list[Progress] = []
    res = solve(inst, solver, Options(time_limit=5.0, progress=heard.append))
    assert res.status is not Status.ERROR, res.message
    assert [p.final for p in heard].count(True) == 1 and heard[-1].final
    last = heard[-1]
    assert (last.solver, last.objective, last.bound) == (res.solver, res.objective, res.bound)
    assert_reports(problem, solver, res, heard[:-1])


FEATURED = [
    (p, s, f)
    for p in registry.PROBLEMS
    for f in getattr(generator(p), "FEATURE_SAMPLES", {})
    for s in registry.solvers(p)
]


@pytest.mark.parametrize("problem, solver, feature", FEATURED)
def test_instance_features_are_taken_or_refused_as_declared(
    problem: str, solver: str, feature: str
) -> None:
    """A solver that declares a feature (`Solver.supports`) keeps the whole contract on
    instances asking it, small and too big to finish; any other answers `unknown`, at once,
    through the front door, saying which feature it lacks."""
    make = generator(problem).FEATURE_SAMPLES[feature]
    if feature not in registry.solver(problem, solver).supports:
        res = solve(make(SMALL[problem], 1), solver, Options(time_limit=5.0))
        assert res.status is Status.UNKNOWN and res.solution is None
        assert f"does not take {feature}" in res.message
        return
    for seed in (1, 2):
        inst = make(SMALL[problem] * 2, seed)
        first, _ = run(problem, solver, inst, seed=seed)
        assert_contract(problem, inst, first)
        assert first.status.has_solution, first.message
        again, _ = run(problem, solver, inst, seed=seed)
        assert (again.status, again.objective) == (first.status, first.objective)
    inst = make(BIG[problem] // 5, 3)
    heard: list[Progress] = []
    res, wall = run(problem, solver, inst, time_limit=LIMIT, progress=heard.append)
    assert_contract(problem, inst, res)
    assert wall <= LIMIT + MARGIN, f"{solver} took {wall:.1f} s with a {LIMIT} s limit"
    assert_reports(problem, solver, res, heard)


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


# --- live progress: the mechanism itself ---------------------------------------------------------


def test_reporter_sends_improvements_throttled_heartbeats_and_the_last_word() -> None:
    now = [0.0]
    heard: list[Progress] = []
    r = Reporter(Options(progress=heard.append), "x", "min", clock=lambda: now[0])
    r(10, 2)  # the first report goes at once
    now[0] = MIN_REPORT_S / 4
    r(9, None)  # an improvement this soon waits
    r(12, 1)  # a worse incumbent and a weaker bound are nothing new
    assert [(p.objective, p.bound) for p in heard] == [(10, 2)]
    now[0] = MIN_REPORT_S * 2
    r.tick()  # the waiting improvement goes with the next call
    assert [(p.objective, p.bound, p.elapsed_s) for p in heard][-1] == (9, 2, MIN_REPORT_S * 2)
    r.result(Result("x", Status.FEASIBLE, 9, 2, 0.0))  # the last word, nothing new: not repeated
    assert len(heard) == 2
    r.result(Result("x", Status.OPTIMAL, 8, 8, 0.0))  # new: sent at once, however soon
    assert (heard[-1].objective, heard[-1].bound, heard[-1].gap) == (8, 8, 0.0)
    now[0] = 10 * REPORT_S
    r.tick()  # the heartbeat: the same state, later
    assert len(heard) == 4 and heard[-1].elapsed_s == now[0]


def test_reporter_for_maximisation_keeps_the_largest_and_the_smallest_bound() -> None:
    heard: list[Progress] = []
    r = Reporter(Options(progress=heard.append), "x", "max", clock=lambda: 0.0)
    r(5, 20, force=True)
    r(4, 30, force=True)  # worse and weaker: nothing sent
    r(6, 18, force=True)
    assert [(p.objective, p.bound) for p in heard] == [(5, 20), (6, 18)]
    assert heard[-1].gap == pytest.approx(12 / 18)


def test_a_failing_progress_callback_is_dropped_and_the_solve_stands() -> None:
    calls = []

    def boom(p: Progress) -> None:
        calls.append(p)
        raise RuntimeError("listener bug")

    inst = generator("fusion").sample(SMALL["fusion"] * 2, 6)
    res = solve(inst, "cpsat", Options(time_limit=5.0, progress=boom))
    assert res.status is Status.OPTIMAL
    assert [p.final for p in calls] == [False, True]  # the solver's reporter dropped it at once


def test_progress_and_log_are_no_part_of_the_question() -> None:
    opts = Options(time_limit=3.0, progress=print, log=True)
    assert opts == Options(time_limit=3.0) and hash(opts) == hash(Options(time_limit=3.0))
    assert "progress" not in repr(opts) and "log" not in repr(opts)


def test_a_guarded_child_reports_through_a_pipe_of_its_own() -> None:
    from tensorplan.models.backends import run_guarded

    heard: list[Progress] = []
    r = Reporter(Options(progress=heard.append), "x")

    def work() -> int:
        r(5.0, None, force=True)
        r(4.0, 1.0, force=True)
        return 7

    assert run_guarded(work, 10.0, r) == 7
    assert [(p.objective, p.bound) for p in heard] == [(5.0, None), (4.0, 1.0)]
    assert r.fn is not None  # the parent's reporter is its own: only the child's was rewired


def test_cbc_log_lines_carry_incumbents_and_bounds() -> None:
    from tensorplan.models.backends import _cbc_news

    assert _cbc_news("Cbc0012I Integer solution of 42 found by DiveCoefficient after 0 it") == (
        42.0,
        None,
    )
    line = "Cbc0010I After 100 nodes, 5 on tree, 40 best solution, best possible 35.5 (0.5 s)"
    assert _cbc_news(line) == (40.0, 35.5)
    assert _cbc_news("Continuous objective value is 30.25 - 0.01 seconds") == (None, 30.25)
    assert _cbc_news("Cbc0038I Full problem 25 rows 24 columns") == (None, None)
