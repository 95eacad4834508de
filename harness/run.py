"""The front door: load instances and solutions, solve through the registry, verify every result.

`solve` never hands back an unverified solution: the problem's own checker re-examines it and the
objective is recomputed from the instance; a solution that fails becomes a `Status.ERROR` result.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from tensorplan.harness import registry
from tensorplan.problems.core import (
    InstanceError,
    Options,
    Problem,
    Progress,
    Result,
    Status,
    load_json,
    refusal,
    relative_gap,
    req,
    solution_field,
    stopwatch,
)
from tensorplan.problems.core import write_json_atomic as write_json_atomic  # re-exported
from tensorplan.problems.core import write_text_atomic as write_text_atomic  # re-exported

log = logging.getLogger("tensorplan")

TOLERANCE = 1e-6
METRIC = "metric_"  # stats key prefix of the figures `Problem.metrics` measures


def parse_instance(data: Mapping[str, Any]) -> Any:
    """Build the instance of whichever problem the `problem` field names."""
    name = req(data, "problem", "")
    if not isinstance(name, str):
        raise InstanceError("problem", f"must be a string, got {type(name).__name__}")
    return registry.problem(name).parse_instance(data)


def load_instance(path: str | Path) -> Any:
    """Read and validate an instance file; errors name the file, the field and the reason."""
    data = load_json(path)
    try:
        return parse_instance(data)
    except InstanceError as err:
        raise err.in_file(path) from None


def instance_name(instance: Any, fallback: str = "") -> str:
    return getattr(instance, "name", None) or fallback


def load_solution(path: str | Path, instance: Any) -> tuple[Mapping[str, Any], Any]:
    """Read a solution file for `instance`; returns (the whole document, the parsed solution).

    InstanceError (naming the file) when it is malformed or of another problem; MismatchError
    (an InstanceError) when it names another instance or does not fit this one's ids."""
    doc = load_json(path)
    try:
        return doc, parse_solution_document(doc, instance)
    except InstanceError as err:
        raise err.in_file(path) from None


def parse_solution_document(doc: Mapping[str, Any], instance: Any) -> Any:
    """The parsed solution of a solution document (the shape `solve -o` writes, see
    `solution_document`) for `instance`; errors as `load_solution`'s, without a file."""
    spec = registry.problem_of(instance)
    if not isinstance(doc, Mapping):
        raise InstanceError("<solution>", f"must be an object, got {type(doc).__name__}")
    field = solution_field(doc, spec.name, instance_name(instance) or None)
    return spec.parse_solution(field, instance)


def solution_document(
    instance: Any, result: Result, *, spec: Problem | None = None
) -> dict[str, Any]:
    """The solution file `solve -o` writes and `check` reads (`spec`: the instance's problem,
    when the caller has it already)."""
    spec = spec or registry.problem_of(instance)
    return {
        "problem": spec.name,
        "instance": instance_name(instance),
        "solver": result.solver,
        "status": str(result.status),
        "objective": result.objective,
        "bound": result.bound,
        "runtime_s": round(result.runtime_s, 6),
        "message": result.message,
        "solution": None
        if result.solution is None
        else spec.solution_to_json(instance, result.solution),
    }


DEFAULT_OPTIONS = Options()
SETUP_REPORTED_S = 0.5
"""A warm-up (`solve(warm=True)`) that took this long compiled kernels: the result's stats
carry it as `setup_s`, and the CLI says so (`tensorplan warm` does it once, at set-up)."""
MIN_SOLVE_SHARE = 0.1
"""The least share of its time limit a solver gets when the set-up before it (loading, warming
up: `solve(budget_from=...)`) has taken more: a solve is always attempted."""


def solve(
    instance: Any,
    solver: str | None = None,
    options: Options = DEFAULT_OPTIONS,
    *,
    spec: Problem | None = None,
    warm: bool = False,
    budget_from: float | None = None,
) -> Result:
    """Run one registered solver with `options` and return its verified result (see `verify`).

    The CLI, the batch worker and the Python API all call this. `spec` is the instance's
    problem when the caller has resolved it already (else it is looked up here). A capacity
    other than the instance's own is part of the instance: see `with_capacity`.
    `warm` builds the solver's compiled kernels first, outside its time (once per process:
    the API and the CLI's solve; a batch warms up once before it forks its workers).
    `budget_from` (a `time.perf_counter()` value; the CLI's solve: when it began the task) makes
    the time limit count from then: what loading the instance and warming up took comes out of
    the solver's limit, which keeps at least `MIN_SOLVE_SHARE` of it.
    A crash inside the solver becomes an `error` result carrying the exception text.
    `options.progress` hears the solver's own reports while it runs, then always one `final`
    report of the verified result (every solver of every problem ends with one).
    """
    if spec is None:
        spec = registry.problem_of(instance)
    elif not isinstance(instance, spec.instance_type):
        raise InstanceError("problem", f"not an instance of problem {spec.name!r}")
    chosen = registry.solver(spec.name, solver)
    missing = spec.features(instance) - chosen.supports
    if missing:
        refused = Result(
            chosen.name,
            Status.UNKNOWN,
            None,
            None,
            0.0,
            message=refusal(chosen.name, missing, supporting(spec.name, missing)),
        )
        return _told(options, spec, refused, time.perf_counter())
    setup_s = 0.0
    if warm:
        warm_began = time.perf_counter()
        warm_once(spec.name, chosen.name, spec.features(instance))
        setup_s = time.perf_counter() - warm_began
    if budget_from is not None:
        left = options.time_limit - (time.perf_counter() - budget_from)
        options = replace(options, time_limit=max(left, MIN_SOLVE_SHARE * options.time_limit))
    began = time.perf_counter()
    try:
        result = chosen.run(instance, options)
    except Exception as err:  # a solver bug must not take the batch down
        tail = traceback.format_exception_only(type(err), err)[-1].strip()
        crashed = Result(
            chosen.name, Status.ERROR, None, None, 0.0, message=f"solver crashed: {tail}"
        )
        return _told(options, spec, crashed, began)
    with stopwatch() as elapsed:
        verified = verify(spec, instance, result)
    # verification is part of the user's budget: its cost is reported beside the solver's time
    stats = {**verified.stats, "verify_s": round(elapsed(), 4)}
    if setup_s >= SETUP_REPORTED_S:  # one-off compilation: set-up, reported as such
        stats["setup_s"] = round(setup_s, 2)
    return _told(options, spec, replace(verified, stats=stats), began)


def supporting(problem: str, features: frozenset[str]) -> list[str]:
    """The solvers of `problem` that take every one of `features`."""
    return [s.name for s in registry.solvers(problem).values() if features <= s.supports]


def _told(options: Options, spec: Problem, result: Result, began: float) -> Result:
    """`result`, after sending it to `options.progress` as the `final` report (a failing
    callback is logged, never raised: the result stands)."""
    if options.progress is not None:
        took = time.perf_counter() - began
        final = Progress(result.solver, took, result.objective, result.bound, spec.sense, True)
        try:
            options.progress(final)
        except Exception as err:
            log.warning("progress callback failed: %s: %s", type(err).__name__, err)
    return result


def warm_up(
    problem: str,
    solvers: Iterable[str],
    *,
    hooks: bool = False,
    features: frozenset[str] | None = None,
) -> list[str]:
    """Run each solver once on a tiny generated instance (and on one asking each instance feature
    it supports, `FEATURE_SAMPLES`), untimed; the names of those that raised (a batch reports
    them through their real tasks; `tensorplan warm` counts them). `features`: only those
    features' samples (a solve warms up for what its instance asks); None: every one.
    `hooks` also runs each solver's `warm` hook: the kernels a tiny solve does not reach (the
    iterated search, the bounds' kernels). A solve's warm-up (`warm_once`), a batch's and
    `tensorplan warm` all run them, so a first solve in a fresh install pays the compilation
    once, as set-up, and gets what every later one gets (without them a 10 s `shift` solve
    compiled its iterated search inside its limit, 10.65 s, and never got the cut bound).

    The compiled kernels (numba) are built, or loaded from their cache, on first use; a batch
    calls this before it forks its workers, which then inherit them instead of each paying the
    compilation inside a timed solve."""
    from importlib import import_module

    gen = import_module(f"tensorplan.problems.{problem}_gen")
    tiny = gen.sample(4, 0)
    samples = getattr(gen, "FEATURE_SAMPLES", {})
    featured = {f: make(6, 0) for f, make in samples.items() if features is None or f in features}
    failed = []
    for name in solvers:
        chosen = registry.solver(problem, name)
        try:
            if solve(tiny, name, Options(time_limit=5.0)).status is Status.ERROR:
                failed.append(name)  # (the checker's kernels are warmed by `solve` too)
            for feature, inst in featured.items():  # the paths such instances take, too
                taken = feature in chosen.supports
                if taken and solve(inst, name, Options(time_limit=5.0)).status is Status.ERROR:
                    failed.append(name)
            if hooks and chosen.warm is not None:
                chosen.warm()
        except Exception:  # a failing solver is reported by its real task
            failed.append(name)
    return failed


@cache
def warm_once(problem: str, solver: str, features: frozenset[str] = frozenset()) -> None:
    """`warm_up` for one solver and the instance features at hand, at most once per process
    (the API and the CLI call it before a solve), hooks included."""
    warm_up(problem, [solver], hooks=True, features=features)


def with_capacity(instance: Any, capacity: int) -> Any:
    """The instance with its `capacity` field replaced; problems without one refuse."""
    if not hasattr(instance, "capacity"):
        spec = registry.problem_of(instance)
        raise InstanceError("capacity", f"problem {spec.name!r} has no capacity")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise InstanceError("capacity", f"must be a positive integer, got {capacity!r}")
    return replace(instance, capacity=capacity)


def verify(spec: Problem, instance: Any, result: Result) -> Result:
    """Check a result against the problem's independent checker and trivial bound.

    - a solution that violates the instance -> status error, solution dropped;
    - the objective is recomputed from the instance, never taken on trust;
    - the bound is tightened with the problem's own proven bound; a heuristic that meets it is
      reported optimal ("optimal by bound"); a bound beyond the objective is an error.
    """
    if result.solution is None:
        if result.status.has_solution:
            return replace(
                result, status=Status.ERROR, message="status claims a solution, none given"
            )
        return result
    violations = spec.check(instance, result.solution)
    if violations:
        shown = "; ".join(violations[:3]) + (
            f" (+{len(violations) - 3} more)" if len(violations) > 3 else ""
        )
        return replace(
            result,
            status=Status.ERROR,
            objective=None,
            solution=None,
            message=f"checker rejected the solution: {shown}",
        )
    objective = spec.evaluate(instance, result.solution)
    if result.objective is not None and abs(objective - result.objective) > TOLERANCE * max(
        1, abs(objective)
    ):
        return replace(
            result,
            status=Status.ERROR,
            objective=objective,
            message=f"solver reported objective {result.objective}, checker computes {objective}",
        )
    bound = spec.stronger_bound(result.bound, spec.bound(instance))
    if bound is not None and _beyond(spec, bound, objective):
        return replace(
            result,
            status=Status.ERROR,
            objective=objective,
            message=f"bound {bound} is beyond the objective {objective}: not a valid bound",
        )
    status, message = result.status, result.message
    if (
        status is Status.FEASIBLE
        and bound is not None
        and relative_gap(objective, bound, spec.sense) == 0
    ):
        status = Status.OPTIMAL
        message = message or "optimal by bound"
    if status is Status.OPTIMAL and bound is None:
        bound = objective
    stats = dict(result.stats)
    if spec.metrics is not None:  # prefixed so reports can tell them from solver statistics
        stats.update(
            {f"{METRIC}{k}": v for k, v in spec.metrics(instance, result.solution).items()}
        )
    return replace(
        result, status=status, objective=objective, bound=bound, message=message, stats=stats
    )


def _beyond(spec: Problem, bound: float, objective: float) -> bool:
    slack = TOLERANCE * max(1.0, abs(objective))
    return bound > objective + slack if spec.sense == "min" else bound < objective - slack


def check(instance: Any, solution: Any) -> tuple[list[str], float | None]:
    """Independent check of a solution: (violations, objective or None when infeasible)."""
    spec = registry.problem_of(instance)
    violations = spec.check(instance, solution)
    return violations, None if violations else spec.evaluate(instance, solution)
