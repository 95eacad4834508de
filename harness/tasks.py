"""The tasks of a batch: every (instance file, solver) pair, and `run_task`, which turns one into
its row. A task is a pure function of its file and options, so any executor may run it anywhere
(a forked worker, this process, a Dask worker)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tensorplan.harness import registry
from tensorplan.harness.rows import Row, options_text
from tensorplan.harness.run import load_instance, solution_document, solve, with_capacity
from tensorplan.problems.core import InstanceError, Options, Progress, Solver, Status, stopwatch

log = logging.getLogger("tensorplan")


@dataclass(frozen=True)
class Task:
    """One solve: `file` is the instance as rows show it (relative to the working directory when
    below it, so reports carry no machine paths), `path` the absolute file a worker loads.
    `options` go to the solver as they are; `capacity`, when given, replaces the instance's.
    `key` names the question (the file's content and the capacity: `instance_key`), `asked`
    the options that can change its answer (`asked`); `source` the file (`source_of`)."""

    file: str
    key: str
    problem: str
    solver: str
    options: Options
    capacity: int | None
    path: str
    asked: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def pair(self) -> tuple[str, str, str]:
        """What a row must match to answer this task (`Row.pair`)."""
        return (self.key, self.solver, options_text(self.asked))

    @property
    def origin(self) -> str:
        return self.source or self.file


@dataclass(frozen=True)
class Done:
    """What a worker hands back: the row, and the solution document when there is one."""

    row: Row
    solution: dict[str, Any] | None = None


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """JSON files named directly, or found below directories (sorted, deduplicated)."""
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*.json")):
                if not any(part.startswith(".") for part in f.parts):
                    found[f.resolve()] = None
        elif p.exists():
            found[p.resolve()] = None
        else:
            raise InstanceError("<file>", "no such file or directory", p)
    return list(found)


def shown(path: Path) -> str:
    """`path` relative to the working directory when it lies below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def instance_key(data: bytes | None, name: str, capacity: int | None = None) -> str:
    """`<name>@<hash>`, the hash of the file's bytes `data` and of the `capacity` asked (when one
    replaces the file's): the question a row answers. It does not depend on the file's path or
    name, so a rerun from another directory, or of a renamed copy, finds its rows; `name` (the
    instance's own) only makes it readable."""
    if data is None:
        return f"{name}@unreadable"
    digest = hashlib.sha256(data)
    if capacity is not None:
        digest.update(f"\0capacity={capacity}".encode())
    return f"{name}@{digest.hexdigest()[:16]}"


def source_of(path: Path) -> str:
    """A short hash of the file's absolute path: which file a row was asked for, without
    writing machine paths into the rows."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]


def asked(solver: Solver, options: Options) -> dict[str, Any]:
    """The options that can change `solver`'s answer: the time limit (every solve has one: it
    also sets the hard deadline), and the seed, threads and gap when the solver honours them.
    A row answers a task only when these agree (`Row.pair`); the others are not asked again."""
    out: dict[str, Any] = {"time_limit": float(options.time_limit)}
    if "seed" in solver.honours:
        out["seed"] = int(options.seed)
    if "threads" in solver.honours:
        out["threads"] = int(options.threads)
    if "gap" in solver.honours:
        out["gap"] = float(options.gap)
    return out


def make_tasks(
    files: Sequence[Path],
    solvers: Sequence[str] | None,
    options: Options,
    capacity: int | None = None,
) -> tuple[list[Task], list[Row]]:
    """Tasks for every file x matching solver; files that fail to load become error rows now.
    A task carries no `progress` callback (it may travel to a Dask worker, pickled): a batch's
    news goes through `execute(news=...)`."""
    options = replace(options, progress=None)
    tasks: list[Task] = []
    bad: list[Row] = []
    for f in files:
        try:
            data: bytes | None = f.read_bytes()
        except OSError:
            data = None
        source = source_of(f)
        try:
            inst = load_instance(shown(f))
            if capacity is not None:
                inst = with_capacity(inst, capacity)
        except InstanceError as err:
            key = instance_key(data, f.stem, capacity)
            row = Row(f.stem, "?", "-", "-", str(Status.ERROR), shown(f), key, message=str(err))
            bad.append(replace(row, capacity=capacity, source=source))
            continue
        key = instance_key(data, getattr(inst, "name", None) or "unnamed", capacity)
        spec = registry.problem_of(inst)
        table = registry.solvers(spec.name)
        chosen = list(table) if not solvers else [s for s in solvers if s in table]
        if solvers and not chosen:
            log.info("%s: none of the requested solvers serve %s", f.name, spec.name)
        tasks.extend(
            Task(
                shown(f),
                key,
                spec.name,
                s,
                options,
                capacity,
                str(f),
                asked(table[s], options),
                source,
            )
            for s in chosen
        )
    return tasks, bad


def run_task(task: Task, news: Callable[[Progress], None] | None = None) -> Done:
    """Solve one (file, solver) pair: its row, with the solution document when there is one;
    `news` hears the solve's progress (`Options.progress`)."""
    with stopwatch() as wall:
        try:
            inst = load_instance(task.path)
            if task.capacity is not None:
                inst = with_capacity(inst, task.capacity)
        except InstanceError as err:
            return Done(failed_row(task, str(err)))
        spec = registry.problem_of(inst)
        kind = registry.solver(spec.name, task.solver).kind
        name = inst.name or Path(task.file).stem
        opts = task.options if news is None else replace(task.options, progress=news)
        res = solve(inst, task.solver, opts, spec=spec)
        doc = None if res.solution is None else solution_document(inst, res, spec=spec)
    row = Row(
        name,
        spec.name,
        task.solver,
        kind,
        str(res.status),
        task.file,
        task.key,
        objective=res.objective,
        bound=res.bound,
        runtime_s=res.runtime_s,
        wall_s=wall(),
        size=spec.size(inst),
        message=res.message,
        stats=_plain(res.stats),
        capacity=task.capacity,
        options=dict(task.asked),
        source=task.source,
    )
    return Done(row, doc)


def failed_row(task: Task, message: str) -> Row:
    """The `error` row of a task that produced no result (bad file, crash, killed worker)."""
    return Row(
        Path(task.file).stem,
        task.problem,
        task.solver,
        "-",
        str(Status.ERROR),
        task.file,
        task.key,
        message=message,
        capacity=task.capacity,
        options=dict(task.asked),
        source=task.source,
    )


def _plain(stats: Any) -> dict[str, Any]:
    return {
        k: v if isinstance(v, int | float | str | bool) or v is None else str(v)
        for k, v in dict(stats).items()
    }
