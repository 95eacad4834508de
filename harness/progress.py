"""What a running batch shows: done / failed / remaining and the worst heuristic gaps so far, as
a live progress bar on a terminal and as plain log lines otherwise; and what one running solve
shows (`solve_printer`): its incumbent, bound and gap as the solver reports them."""

from __future__ import annotations

import logging
import math
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorplan.harness import registry
from tensorplan.harness.rows import Row
from tensorplan.problems.core import Number, Sense, relative_gap, stronger_bound
from tensorplan.problems.core import Progress as Report

if TYPE_CHECKING:
    from tensorplan.harness.tasks import Task

log = logging.getLogger("tensorplan")


@dataclass
class Progress:
    """Counts shown while a batch runs."""

    total: int
    done: int = 0
    failed: int = 0

    def line(self) -> str:
        return f"{self.done}/{self.total} done, {self.failed} failed, {self.total - self.done} left"


class RunningGaps:
    """Worst gap so far of each heuristic against the best bound seen so far for its instance."""

    def __init__(self) -> None:
        self.bound: dict[str, Number | None] = {}
        self.heuristic: dict[tuple[str, str], float] = {}
        self.sense: dict[str, Sense] = {}

    def add(self, row: Row) -> None:
        f, p = row.key, row.problem
        if p not in registry.PROBLEMS:
            return
        sense = self.sense[f] = registry.problem(p).sense
        if row.bound is not None:
            self.bound[f] = stronger_bound(sense, self.bound.get(f), row.bound)
        if row.kind == "heuristic" and row.objective is not None:
            self.heuristic[(f, row.solver)] = row.objective

    def worst(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (f, s), obj in self.heuristic.items():
            g = relative_gap(obj, self.bound.get(f), self.sense[f])
            if g is not None:
                out[s] = max(out.get(s, 0.0), g)
        return out

    def text(self, most: int = 4) -> str:
        worst = sorted(self.worst().items(), key=lambda kv: -kv[1])[:most]
        return ", ".join(f"{s} {g:.1%}" if math.isfinite(g) else f"{s} ∞" for s, g in worst)


class RunningBest:
    """The latest progress of each running task (`News`), shown as `solver instance: best (gap)`,
    until its row arrives."""

    def __init__(self) -> None:
        self.now: dict[tuple[str, str, str], tuple[str, Report]] = {}

    def news(self, task: Task, p: Report) -> None:
        self.now[task.pair] = (f"{task.solver} {Path(task.file).stem}", p)

    def finished(self, row: Row) -> None:
        self.now.pop(row.pair, None)

    def text(self, most: int = 2) -> str:
        latest = sorted(self.now.values(), key=lambda item: -item[1].elapsed_s)[:most]
        return ", ".join(f"{name}: {_best(p)}" for name, p in latest)


def _best(p: Report) -> str:
    gap = p.gap
    shown = "" if gap is None else f" ({gap:.1%})" if math.isfinite(gap) else " (∞)"
    return ("-" if p.objective is None else f"{p.objective:g}") + shown


def progress_printer() -> tuple[
    Callable[[Row, Progress], None], Callable[[Task, Report], None] | None, Callable[[], None]
]:
    """A live rich progress bar on a terminal, plain log lines otherwise; returns (update, news,
    close): `update` takes each row, `news` each running task's progress (None off a terminal:
    then the workers need not send it), `close` ends the display.

    Both show done / failed / remaining and the worst heuristic gaps so far; the bar also the
    best so far of the tasks still running.
    """
    gaps = RunningGaps()
    if not sys.stderr.isatty():

        def plain(row: Row, p: Progress) -> None:
            gaps.add(row)
            log.info(
                "%s | %s %s: %s %s",
                p.line(),
                row.instance,
                row.solver,
                row.status,
                "" if row.objective is None else row.objective,
            )

        return plain, None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        TextColumn("[bold]solving"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        transient=False,
    )
    handle: Any = None
    running = RunningBest()
    counts = Progress(0)

    def show() -> None:
        nonlocal handle
        if handle is None:
            bar.start()
            handle = bar.add_task("solving", total=counts.total or None, info="")
        worst, now = gaps.text(), running.text()
        # the total is known with the first row; news can come before it
        info = f"failed {counts.failed}, left {counts.total - counts.done}" if counts.total else ""
        info += (f" | worst gap {worst}" if worst else "") + (f" | now {now}" if now else "")
        if counts.total:
            bar.update(handle, total=counts.total)
        bar.update(handle, completed=counts.done, info=info)

    def update(row: Row, p: Progress) -> None:
        nonlocal counts
        gaps.add(row)
        running.finished(row)
        counts = p
        show()

    def news(task: Task, p: Report) -> None:
        running.news(task, p)
        show()

    return update, news, lambda: bar.stop() if handle is not None else None


def solve_printer(verbose: bool, stream: Any = None) -> Callable[[Report], None] | None:
    """The `Options.progress` of `tensorplan solve`: with `verbose`, one log line per report
    (through the `tensorplan` logger); else, on a terminal, one live line on stderr rewritten
    in place and cleared by the final report; else None (nothing to show, nothing to pay)."""
    out = sys.stderr if stream is None else stream
    if verbose:

        def logged(p: Report) -> None:
            if not p.final:  # the summary line follows at once
                log.info("%s", p.line())

        return logged
    if not out.isatty():
        return None
    width = 0

    def live(p: Report) -> None:
        nonlocal width
        text = "" if p.final else p.line()[: shutil.get_terminal_size().columns - 1]
        out.write("\r" + text.ljust(width))
        out.write("\r" if p.final else "")
        out.flush()
        width = len(text)

    return live
