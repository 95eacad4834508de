"""Problem name -> problem spec and solvers. The CLI and the harness look everything up here.

Each problem `p` lives in `problems.p` (a `PROBLEM` spec) and in the solver modules listed for it
in `SOLVER_MODULES`, each with a `SOLVERS` list. A module never imports another's list: adding a
solver module is adding its name here (docs/extending.md).
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import Any

from tensorplan.problems.core import InstanceError, Problem, Solver

PROBLEMS: tuple[str, ...] = ("allocation", "schedule", "layout", "fusion")

# Modules (under `tensorplan.`) declaring each problem's solvers, heuristics first: the order is
# the order of `solvers()`, and a problem's default solver is its first exact one.
SOLVER_MODULES: dict[str, tuple[str, ...]] = {
    "allocation": (
        "heuristics.allocation",
        "heuristics.allocation_peers",
        "models.allocation_bb",
        "models.allocation_portfolio",
        "models.allocation",
    ),
    "schedule": ("heuristics.schedule", "models.schedule"),
    "layout": ("heuristics.layout", "models.layout"),
    "fusion": ("heuristics.fusion", "models.fusion", "models.fusion_strong"),
}


@cache
def problem(name: str) -> Problem:
    """The spec of problem `name`; an unknown name is an InstanceError on the `problem` field."""
    if name not in PROBLEMS:
        raise InstanceError("problem", f"unknown problem {name!r}; known: {', '.join(PROBLEMS)}")
    return import_module(f"tensorplan.problems.{name}").PROBLEM


@cache
def solvers(name: str) -> dict[str, Solver]:
    """Solvers of problem `name` by solver name, heuristics first, then exact models."""
    problem(name)
    found: dict[str, Solver] = {}
    for module in SOLVER_MODULES[name]:
        for s in import_module(f"tensorplan.{module}").SOLVERS:
            if s.name in found:
                raise RuntimeError(f"solver {s.name!r} of {name!r} registered twice")
            found[s.name] = s
    return found


def solver(problem_name: str, solver_name: str | None = None) -> Solver:
    """Look up one solver; None picks the problem's default (its first exact solver)."""
    table = solvers(problem_name)
    if solver_name is None:
        return next(s for s in table.values() if s.kind == "exact")
    if solver_name not in table:
        raise KeyError(
            f"problem {problem_name!r} has no solver {solver_name!r}; known: {', '.join(table)}"
        )
    return table[solver_name]


def problem_of(instance: Any) -> Problem:
    """The spec whose instance type `instance` is."""
    for name in PROBLEMS:
        spec = problem(name)
        if isinstance(instance, spec.instance_type):
            return spec
    raise TypeError(f"not an instance of any registered problem: {type(instance).__name__}")
