"""Python front door for exploration: one object per problem, e.g.

    from tensorplan import allocation
    inst = allocation.load(allocation.shipped("seed-example"))
    allocation.solvers()                       # table of solver names, kinds, summaries
    res = allocation.solve(inst, "ffd")        # verified Result
    allocation.check(inst, res.solution)       # (violations, objective)
    table = allocation.compare(inst, time_limit=5)
    allocation.plot(inst, {"ffd": res.solution})

Everything goes through the registry and `harness.run`, exactly as the CLI does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd

from tensorplan import instances
from tensorplan.harness import registry, run
from tensorplan.problems.core import (
    OPTIONS,
    InstanceError,
    MismatchError,
    Options,
    Problem,
    Progress,
    Result,
)


@dataclass(frozen=True)
class ProblemAPI:
    """The CLI's verbs for one problem, as functions returning Python objects."""

    name: str

    @property
    def spec(self) -> Problem:
        return registry.problem(self.name)

    def shipped(self, name: str) -> Path:
        """Path of this problem's shipped instance `name` (e.g. "seed-example"), found through
        the package, so it works from any working directory (a notebook's own folder too)."""
        return instances.shipped(f"{self.name}/{name}")

    def shipped_names(self) -> list[str]:
        """Names of this problem's shipped instances, for `shipped`."""
        return instances.names(self.name)

    def load(self, path: str | Path) -> Any:
        """Read and validate an instance file of this problem."""
        inst = run.load_instance(path)
        if not isinstance(inst, self.spec.instance_type):
            raise InstanceError("problem", f"file holds another problem, not {self.name!r}", path)
        return inst

    def from_json(self, data: Mapping[str, Any]) -> Any:
        """Build an instance from already-decoded JSON (e.g. edited in a notebook)."""
        return self.spec.parse_instance({"problem": self.name, **data})

    def to_json(self, instance: Any) -> dict[str, Any]:
        return self.spec.instance_to_json(instance)

    def solvers(self) -> pd.DataFrame:
        rows = [
            {
                "solver": s.name,
                "kind": s.kind,
                "honours": ", ".join(o for o in OPTIONS if o in s.honours),
                "summary": s.summary,
            }
            for s in registry.solvers(self.name).values()
        ]
        return pd.DataFrame(rows)

    def solve(
        self,
        instance: Any,
        solver: str | None = None,
        *,
        time_limit: float = 10.0,
        seed: int = 0,
        threads: int = 1,
        gap: float = 0.0,
        hint: Any = None,
        capacity: int | None = None,
        progress: Callable[[Progress], None] | None = None,
    ) -> Result:
        """The verified result of one solver; its compiled kernels are built first, untimed.
        The keywords are the solver `Options`, gathered here once, and, as the CLI's
        `--capacity`, a `capacity` that replaces the instance's (allocation: do the buffers
        fit in this many bytes?). `hint` may be anything `as_solution` reads. `progress`
        hears the solver's incumbent, bound and gap while it runs (`Progress`; e.g.
        `progress=lambda p: print(p.line(), file=sys.stderr)`), then the verified result."""
        instance = self._asked(instance, capacity)
        if hint is not None:
            hint = self.as_solution(instance, hint)
        options = Options(
            time_limit=time_limit, seed=seed, threads=threads, gap=gap, hint=hint, progress=progress
        )
        return self._solve(instance, solver, options)

    def _asked(self, instance: Any, capacity: int | None) -> Any:
        """`instance`, checked to be this problem's, with `capacity` when one is given."""
        if not isinstance(instance, self.spec.instance_type):
            raise InstanceError("problem", f"not an instance of problem {self.name!r}")
        return instance if capacity is None else run.with_capacity(instance, capacity)

    def _solve(self, instance: Any, solver: str | None, options: Options) -> Result:
        """`run.solve`, as the CLI and the batch worker call it, with this problem's spec."""
        return run.solve(instance, solver, options, spec=self.spec, warm=True)

    def load_solution(self, path: str | Path, instance: Any) -> Any:
        """The solution in a solution file (the shape `solve -o` writes, see
        instances/README.md) for `instance`, parsed: what `check` and `plot` take. Raises
        InstanceError naming the file when it is malformed, and MismatchError when it is the
        solution of another instance or does not fit this one (an unknown or missing id)."""
        return run.load_solution(path, instance)[1]

    def as_solution(self, instance: Any, value: Any) -> Any:
        """`value` as a solution of `instance`: a parsed solution as it is; a `Result`'s
        solution; a solution document as `solve -o` writes it (a dict with a `solution` field)
        or that field alone, parsed; a path (`str` or `Path`) to a solution file, read."""
        if isinstance(value, Result):
            return value.solution
        if isinstance(value, str | Path):
            return self.load_solution(value, instance)
        if isinstance(value, Mapping):
            if "solution" in value:
                return run.parse_solution_document(value, instance)
            return self.spec.parse_solution(value, instance)
        return value  # another type: the checker says what is wrong with it

    def check(self, instance: Any, solution: Any) -> tuple[list[str], float | None]:
        """(violations, objective) of `solution` (anything `as_solution` reads) for `instance`,
        by the independent checker; a solution whose ids do not fit the instance, or the file
        of another instance, is one violation saying so."""
        try:
            parsed = self.as_solution(instance, solution)
        except MismatchError as err:
            return [err.why if err.file is None else str(err)], None
        return run.check(instance, parsed)

    def compare(
        self,
        instance: Any,
        solvers: Sequence[str] | None = None,
        *,
        time_limit: float = 10.0,
        seed: int = 0,
        threads: int = 1,
        gap: float = 0.0,
        capacity: int | None = None,
    ) -> pd.DataFrame:
        """Solve with several solvers (default: all); one row each, gap to the best bound.
        Options as `solve` takes them."""
        results = self.results(
            instance, solvers, time_limit=time_limit, seed=seed, threads=threads, gap=gap,
            capacity=capacity,
        )  # fmt: skip
        return self.table(results)

    def results(
        self,
        instance: Any,
        solvers: Sequence[str] | None = None,
        *,
        time_limit: float = 10.0,
        seed: int = 0,
        threads: int = 1,
        gap: float = 0.0,
        capacity: int | None = None,
    ) -> dict[str, Result]:
        """Solver name -> verified Result, each solver run once (default: all solvers)."""
        names = list(solvers or registry.solvers(self.name))
        instance = self._asked(instance, capacity)
        options = Options(time_limit=time_limit, seed=seed, threads=threads, gap=gap)
        return {n: self._solve(instance, n, options) for n in names}

    def table(self, results: Mapping[str, Result]) -> pd.DataFrame:
        """The comparison table of `results`: one row per solver, gap to the best bound."""
        best = None
        for r in results.values():
            best = self.spec.stronger_bound(best, r.bound)
        return pd.DataFrame(
            [
                {
                    "solver": n,
                    "kind": registry.solver(self.name, n).kind,
                    "status": str(r.status),
                    "objective": r.objective,
                    "bound": r.bound,
                    "gap": r.gap(self.spec.sense, best),
                    "runtime_s": round(r.runtime_s, 4),
                    **dict(r.stats),
                }
                for n, r in results.items()
            ]
        )

    def solutions(self, instance: Any, solvers: Sequence[str], **options: Any) -> dict[str, Any]:
        """Solver name -> solution, for `plot`; `options` as `solve` takes them."""
        return {n: self.solve(instance, n, **options).solution for n in solvers}

    def plot(self, instance: Any, solutions: Mapping[str, Any] | Result | str | Path) -> Any:
        """The problem's picture (a matplotlib Figure) of one or two solutions: a mapping of
        labels to solutions (each anything `as_solution` reads), a `Result`, or the path of a
        solution file."""
        if isinstance(solutions, Result):
            solutions = {solutions.solver: solutions.solution}
        elif isinstance(solutions, str | Path):
            solutions = {Path(solutions).stem: self.load_solution(solutions, instance)}
        elif isinstance(solutions, Mapping) and "solution" in solutions:  # one solution document
            solutions = {str(solutions.get("solver", "solution")): solutions}
        parsed = {label: self.as_solution(instance, s) for label, s in solutions.items()}
        fig = import_module(f"tensorplan.harness.picture_{self.name}").picture(instance, parsed)
        _jupyter_shows(fig)
        return fig

    def explore(self, **options: Any) -> Any:
        """An ipywidgets explorer (`harness.widgets.Explorer`): family, size, seed, time limit
        and solvers as controls; every change re-solves and redraws the table and picture."""
        from tensorplan.harness.widgets import Explorer  # ipywidgets: an optional extra

        return Explorer(self, **options)

    def generators(self) -> Any:
        """The module of instance generators for this problem (`problems.<name>_gen`)."""
        return import_module(f"tensorplan.problems.{self.name}_gen")


def _jupyter_shows(fig: Any) -> None:
    """Make a returned Figure draw itself in Jupyter, once, whatever the backend.

    The pictures are pyplot-free figures on their own Agg canvas (`harness.figures`), which
    IPython draws only once its PNG figure formatter is registered: register it, so that a
    notebook cell ending in `plot(...)` shows the picture, not `<Figure size ...>`."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is not None:
        from IPython.core.pylabtools import select_figure_formats

        select_figure_formats(shell, {"png"})


def tour(problems: Sequence[str] | None = None, **options: Any) -> Any:
    """Every problem's explorer behind one selector (the tour notebook's last cell); options as
    `ProblemAPI.explore` takes them."""
    from tensorplan.harness.widgets import Tour  # ipywidgets: an optional extra

    return Tour([ProblemAPI(p) for p in problems or registry.PROBLEMS], **options)


def __getattr__(name: str) -> ProblemAPI:
    if name in registry.PROBLEMS:
        return ProblemAPI(name)
    raise AttributeError(f"module 'tensorplan.harness.api' has no attribute {name!r}")


allocation = ProblemAPI("allocation")
