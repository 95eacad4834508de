"""Batch runs: every (instance file, solver) pair is a task; each task is a pure function to a row.

`run_batch` ties the rooms together: `tasks` (which pairs to solve, and solving one),
`executors` (forked workers with hard deadlines, inline, or Dask), `rows` (the locked
`DIR/rows.jsonl`, appended as tasks finish, so a rerun resumes) and `tables` (results.csv and
the report's tables, always rebuilt from the rows).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from tensorplan.harness.executors import execute, interrupt_at_safe_points, warm_up_in_child
from tensorplan.harness.progress import Progress
from tensorplan.harness.rows import Row, RowsFile, read_rows, solution_path
from tensorplan.harness.run import write_json_atomic
from tensorplan.harness.tables import table
from tensorplan.harness.tasks import Done, Task, discover, make_tasks
from tensorplan.problems.core import InstanceError, Options, Status

log = logging.getLogger("tensorplan")


def run_batch(
    paths: Sequence[str | Path],
    outdir: str | Path,
    *,
    solvers: Sequence[str] | None,
    options: Options,
    capacity: int | None = None,
    jobs: int = 1,
    executor: str = "process",
    scheduler: str | None = None,
    force: bool = False,
    solutions: str = "all",
    on_row: Callable[[Row, Progress], None] | None = None,
) -> pd.DataFrame:
    """Run every pending task with `options`, appending rows; returns the full table (`table`).

    `solutions`: "all" or "one" (see `rows.solution_path`), or "none". Raises InstanceError when
    a path does not exist or nothing is to be solved, RuntimeError when another run holds DIR.
    """
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise InstanceError("-o", "is a file, not a directory", out)
    files = discover(paths)
    tasks, bad = make_tasks(files, solvers, options, capacity)
    if not tasks and not bad:
        asked = f" for solver(s) {', '.join(solvers)}" if solvers else ""
        raise InstanceError("<paths>", f"nothing to solve{asked} in {', '.join(map(str, paths))}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InstanceError(
            "-o", f"cannot create the directory: {err.strerror or err}", out
        ) from None
    with RowsFile(out) as rows_file:
        if force:
            redo = {t.pair for t in tasks} | {b.pair for b in bad}
            rows_file.rewrite(r for r in read_rows(out) if r.pair not in redo)
        done = {r.pair for r in read_rows(out)}
        pending = [t for t in tasks if t.pair not in done]
        new_bad = [b for b in bad if b.pair not in done]
        log.info(
            "%d files, %d tasks, %d already done", len(files), len(tasks), len(tasks) - len(pending)
        )
        progress = Progress(total=len(pending) + len(new_bad))

        def record(result: Done) -> None:
            row = result.row
            if result.solution is not None and solutions != "none":
                target = solution_path(
                    out, row.problem, row.instance, row.key, row.solver, solutions
                )
                write_json_atomic(target, result.solution)
            rows_file.append(row)
            progress.done += 1
            progress.failed += row.status == Status.ERROR
            if on_row is not None:
                on_row(row, progress)

        for row in new_bad:
            record(Done(row))
        _run(pending, record, jobs=jobs, executor=executor, scheduler=scheduler)
    return table(read_rows(out))


def _run(
    pending: Sequence[Task],
    record: Callable[[Done], None],
    *,
    jobs: int,
    executor: str,
    scheduler: str | None,
) -> None:
    """Execute `pending`, recording each result as it arrives; Ctrl-C stops at a safe point."""
    if executor == "process":  # the kernels are compiled once, before the workers fork
        warm_up_in_child({t.problem: {u.solver for u in pending if u.problem == t.problem}
                          for t in pending})  # fmt: skip
    with interrupt_at_safe_points() as stop:
        results = execute(pending, jobs=jobs, executor=executor, scheduler=scheduler, stop=stop)
        try:
            for result in results:
                record(result)
                stop.check()
        finally:
            results.close()


def default_jobs() -> int:
    """Worker processes by default: the cores this process may run on."""
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
