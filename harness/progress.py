"""What a running batch shows: done / failed / remaining and the worst heuristic gaps so far, as
a live progress bar on a terminal and as plain log lines otherwise."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorplan.harness import registry
from tensorplan.harness.rows import Row
from tensorplan.problems.core import Number, Sense, relative_gap, stronger_bound

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


def progress_printer() -> tuple[Callable[[Row, Progress], None], Callable[[], None]]:
    """A live rich progress bar on a terminal, plain log lines otherwise; returns (update, close).

    Both show done / failed / remaining and the worst heuristic gaps so far.
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

        return plain, lambda: None
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

    def update(row: Row, p: Progress) -> None:
        nonlocal handle
        gaps.add(row)
        if handle is None:
            bar.start()
            handle = bar.add_task("solving", total=p.total, info="")
        worst = gaps.text()
        info = f"failed {p.failed}, left {p.total - p.done}" + (
            f" | worst gap {worst}" if worst else ""
        )
        bar.update(handle, completed=p.done, info=info)

    return update, lambda: bar.stop() if handle is not None else None
