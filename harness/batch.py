"""Batch runs: every (instance file, solver) pair is a task; each task is a pure function to a row.

`run_batch` ties the rooms together: `tasks` (which pairs to solve, and solving one),
`executors` (forked workers with hard deadlines, inline, or Dask), `rows` (the locked
`DIR/rows.jsonl`, appended as tasks finish, so a rerun resumes) and `tables` (results.csv and
the report's tables, always rebuilt from the rows).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from tensorplan.harness.executors import (
    News,
    execute,
    interrupt_at_safe_points,
    warm_up_in_child,
)
from tensorplan.harness.progress import Progress
from tensorplan.harness.rows import LOCK, ROWS, Row, RowsFile, read_rows, refreshed, solution_path
from tensorplan.harness.run import write_json_atomic
from tensorplan.harness.tables import table
from tensorplan.harness.tasks import Done, Task, discover, make_tasks
from tensorplan.problems.core import InstanceError, Options, Status, check_output

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
    on_news: News | None = None,
) -> pd.DataFrame:
    """Run every pending task with `options`, appending rows; returns the full table (`table`).
    `on_row` hears each row as it is recorded, `on_news` the running tasks' progress.

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
    made = [d for d in (out, *out.parents) if not d.exists()]  # the directories this run makes
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InstanceError(
            "-o", f"cannot create the directory: {err.strerror or err}", out
        ) from None
    try:
        for name in OUTPUTS:  # before any solve: a FIFO or device there is refused, not replaced
            check_output(out / name)
        _solve_into(
            out, files, tasks, bad, force, solutions, on_row, jobs, executor, scheduler, on_news
        )
    except BaseException:
        if not (out / ROWS).exists():  # failed before its first row: leave nothing behind
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()  # only when empty
        raise
    return table(read_rows(out))


OUTPUTS = (ROWS, LOCK, "results.csv", "report.md", "report.html")
"""The files of an output directory the runner and the reports (re)write."""


def _solve_into(
    out: Path,
    files: Sequence[Path],
    tasks: Sequence[Task],
    bad: Sequence[Row],
    force: bool,
    solutions: str,
    on_row: Callable[[Row, Progress], None] | None,
    jobs: int,
    executor: str,
    scheduler: str | None,
    on_news: News | None = None,
) -> None:
    """`run_batch` once its output directory is there: lock it, record what is pending."""
    with RowsFile(out) as rows_file:
        if force:
            redo = {t.pair for t in tasks} | {b.pair for b in bad}
            rows_file.rewrite(r for r in read_rows(out) if r.pair not in redo)
        recorded = read_rows(out)
        done = {r.pair for r in recorded}
        pending: list[Task] = []
        queued: set[tuple[str, str, str]] = set()
        for t in tasks:  # a renamed copy asks the same question: solved once
            if t.pair not in done and t.pair not in queued:
                pending.append(t)
                queued.add(t.pair)
        new_bad = list({b.pair: b for b in bad if b.pair not in done}.values())
        for row in refreshed(
            recorded, [t for t in tasks if t.pair in done] + [b for b in bad if b.pair in done]
        ):
            rows_file.append(row)  # asked again: the table shows it again (see rows.current)
        log.info(
            "%d files, %d tasks, %d already done", len(files), len(tasks), len(tasks) - len(pending)
        )
        progress = Progress(total=len(pending) + len(new_bad))

        def record(result: Done) -> None:
            row = result.row
            if result.solution is not None and solutions != "none":
                write_json_atomic(solution_path(out, row, solutions), result.solution)
            rows_file.append(row)
            progress.done += 1
            progress.failed += row.status == Status.ERROR
            if on_row is not None:
                on_row(row, progress)

        for row in new_bad:
            record(Done(row))
        _run(pending, record, jobs=jobs, executor=executor, scheduler=scheduler, news=on_news)


def _run(
    pending: Sequence[Task],
    record: Callable[[Done], None],
    *,
    jobs: int,
    executor: str,
    scheduler: str | None,
    news: News | None = None,
) -> None:
    """Execute `pending`, recording each result as it arrives; Ctrl-C stops at a safe point."""
    if executor == "process":  # the kernels are compiled once, before the workers fork
        warm_up_in_child({t.problem: {u.solver for u in pending if u.problem == t.problem}
                          for t in pending})  # fmt: skip
    with interrupt_at_safe_points() as stop:
        results = execute(
            pending, jobs=jobs, executor=executor, scheduler=scheduler, stop=stop, news=news
        )
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
