"""Batch runs: every (instance file, solver) pair is a task; each task is a pure function to a row.

Rows are appended to `DIR/rows.jsonl` as tasks finish, so a crash or kill loses only the running
solves and a rerun resumes (finished pairs are skipped unless `force`). Tasks run each in a
forked worker process, `jobs` at a time, killed past a hard deadline (`executor="process"`), in
this process (`"inline"`, for debugging), or on a Dask cluster (`"dask"`). The tables
(`results.csv`, reports) are always rebuilt from `rows.jsonl`, written atomically.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.run import (
    load_instance,
    solution_document,
    solve,
    write_json_atomic,
    write_text_atomic,
)
from tensorplan.problems.core import InstanceError, Status, relative_gap, stronger_bound

log = logging.getLogger("tensorplan")

ROWS = "rows.jsonl"
COLUMNS = [
    "instance",
    "problem",
    "solver",
    "kind",
    "status",
    "objective",
    "bound",
    "best_bound",
    "gap",
    "runtime_s",
    "size",
    "message",
    "file",
]


@dataclass(frozen=True)
class Task:
    """One solve: `file` is the instance as rows show it (relative to the working directory when
    below it, so reports carry no machine paths), `path` the absolute file a worker loads."""

    file: str
    problem: str
    solver: str
    time_limit: float
    seed: int
    path: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.file, self.solver)


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """JSON files named directly, or found below directories (sorted, deduplicated)."""
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*.json")):
                if not any(part.startswith(".") for part in f.parts):
                    found[f.resolve()] = None
        else:
            found[p.resolve()] = None
    return list(found)


def shown(path: Path) -> str:
    """`path` relative to the working directory when it lies below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def plan(
    files: Sequence[Path],
    solvers: Sequence[str] | None,
    time_limit: float,
    seed: int,
) -> tuple[list[Task], list[dict[str, Any]]]:
    """Tasks for every file x matching solver; files that fail to load become error rows now."""
    tasks: list[Task] = []
    bad: list[dict[str, Any]] = []
    for f in files:
        try:
            inst = load_instance(shown(f))
        except InstanceError as err:
            bad.append(_row(shown(f), f.stem, "?", "-", "-", Status.ERROR, message=str(err)))
            continue
        spec = registry.problem_of(inst)
        names = list(registry.solvers(spec.name))
        chosen = names if not solvers else [s for s in solvers if s in names]
        if solvers and not chosen:
            log.info("%s: none of the requested solvers serve %s", f.name, spec.name)
        tasks.extend(Task(shown(f), spec.name, s, time_limit, seed, str(f)) for s in chosen)
    return tasks, bad


def _row(
    file: str, instance: str, problem: str, solver: str, kind: str, status: Status, **fields: Any
) -> dict[str, Any]:
    row = {
        "instance": instance,
        "problem": problem,
        "solver": solver,
        "kind": kind,
        "status": str(status),
        "objective": None,
        "bound": None,
        "runtime_s": 0.0,
        "size": None,
        "message": "",
        "file": file,
        "stats": {},
    }
    row.update(fields)
    return row


def run_task(task: Task) -> dict[str, Any]:
    """Solve one (file, solver) pair and return its row, with the solution document attached."""
    try:
        inst = load_instance(task.path)
    except InstanceError as err:
        return _row(
            task.file,
            Path(task.file).stem,
            task.problem,
            task.solver,
            "-",
            Status.ERROR,
            message=str(err),
        )
    spec = registry.problem_of(inst)
    kind = registry.solver(spec.name, task.solver).kind
    name = inst.name or Path(task.file).stem
    res = solve(inst, task.solver, time_limit=task.time_limit, seed=task.seed)
    row = _row(
        task.file,
        name,
        spec.name,
        task.solver,
        kind,
        res.status,
        objective=res.objective,
        bound=res.bound,
        runtime_s=res.runtime_s,
        size=spec.size(inst),
        message=res.message,
        stats=_plain(res.stats),
    )
    if res.solution is not None:
        row["solution"] = solution_document(inst, res)
    return row


def _plain(stats: Any) -> dict[str, Any]:
    return {
        k: v if isinstance(v, int | float | str | bool) or v is None else str(v)
        for k, v in dict(stats).items()
    }


# --- running ----------------------------------------------------------------------------------


@dataclass
class Progress:
    """Counts shown while a batch runs."""

    total: int
    done: int = 0
    failed: int = 0

    def line(self) -> str:
        return f"{self.done}/{self.total} done, {self.failed} failed, {self.total - self.done} left"


def execute(
    tasks: Sequence[Task], *, jobs: int = 1, executor: str = "process", scheduler: str | None = None
) -> Iterator[dict[str, Any]]:
    """Yield rows as tasks finish, in completion order. Closing the generator cancels the rest."""
    if not tasks:
        return
    if executor == "dask":
        yield from _execute_dask(tasks, scheduler)
        return
    if executor == "inline":
        for t in tasks:
            yield run_task(t)
        return
    yield from _execute_forked(tasks, max(1, jobs))


def hard_deadline(task: Task) -> float:
    """Seconds after which a solve is killed: its own limit plus room to build and verify."""
    return 2 * task.time_limit + 30


def _execute_forked(tasks: Sequence[Task], jobs: int) -> Iterator[dict[str, Any]]:
    """Each task in its own forked process, at most `jobs` at once; one that outlives its hard
    deadline is killed and becomes an `error` row, one that dies becomes an `error` row.
    Closing the generator (or Ctrl-C) kills the running ones; finished rows are already out."""
    ctx = multiprocessing.get_context("fork")
    queue = list(reversed(tasks))
    running: dict[Any, tuple[Any, Task, float]] = {}
    try:
        while queue or running:
            while queue and len(running) < jobs:
                task = queue.pop()
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(task, send), daemon=True)
                proc.start()
                send.close()
                running[recv] = (proc, task, time.monotonic() + hard_deadline(task))
            wake = min(d for _, _, d in running.values()) - time.monotonic()
            for conn in mp_wait(list(running), timeout=max(0.0, wake)):
                proc, task, _ = running.pop(conn)
                try:
                    row = conn.recv()
                except EOFError:
                    proc.join()
                    row = _failed(task, Status.ERROR, f"worker died (exit code {proc.exitcode})")
                conn.close()
                proc.join()
                yield row
            now = time.monotonic()
            for conn, (proc, task, deadline) in list(running.items()):
                if now > deadline:
                    proc.kill()
                    proc.join()
                    conn.close()
                    del running[conn]
                    yield _failed(
                        task,
                        Status.ERROR,
                        f"killed after {hard_deadline(task):.0f} s "
                        f"(time limit {task.time_limit:g} s)",
                    )
    finally:
        for conn, (proc, _, _) in running.items():
            proc.kill()
            proc.join()
            conn.close()


def _child(task: Task, conn: Any) -> None:
    """Worker body: Ctrl-C is left to the parent, which stops workers and keeps finished rows."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        row = run_task(task)
    except BaseException as err:  # report, never hang the parent
        row = _failed(task, Status.ERROR, f"worker failed: {type(err).__name__}: {err}")
    conn.send(row)
    conn.close()


def _failed(task: Task, status: Status, message: str) -> dict[str, Any]:
    return _row(
        task.file, Path(task.file).stem, task.problem, task.solver, "-", status, message=message
    )


def _execute_dask(tasks: Sequence[Task], scheduler: str | None) -> Iterator[dict[str, Any]]:
    try:
        from distributed import Client, as_completed
    except ImportError:  # pragma: no cover - depends on the environment
        raise RuntimeError("the dask executor needs the extra: pip install -e '.[dask]'") from None
    if not scheduler:
        raise RuntimeError("--executor dask needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
    with Client(scheduler) as client:
        futures = client.map(run_task, list(tasks), pure=False)
        try:
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            client.cancel(futures)


def read_rows(outdir: Path) -> list[dict[str, Any]]:
    """Rows recorded so far; a torn last line (killed mid-write) is ignored."""
    path = outdir / ROWS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def run_batch(
    paths: Sequence[str | Path],
    outdir: str | Path,
    *,
    solvers: Sequence[str] | None,
    time_limit: float,
    seed: int = 0,
    jobs: int = 1,
    executor: str = "process",
    scheduler: str | None = None,
    force: bool = False,
    solutions: str = "all",
    on_row: Callable[[dict[str, Any], Progress], None] | None = None,
) -> pd.DataFrame:
    """Run every pending task, appending rows; returns the full table (see `table`).

    `solutions`: "all" writes DIR/solutions/<instance>.<solver>.json for every solved row;
    "one" writes DIR/<instance>.json (the batch verb, a single solver).
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    files = discover(paths)
    tasks, bad = plan(files, solvers, time_limit, seed)
    rows_path = out / ROWS
    if force and rows_path.exists():
        kept = [
            r
            for r in read_rows(out)
            if (r["file"], r["solver"]) not in {t.key for t in tasks}
            and r["file"] not in {b["file"] for b in bad}
        ]
        write_text_atomic(rows_path, "".join(json.dumps(r) + "\n" for r in kept))
    done = {(r["file"], r["solver"]) for r in read_rows(out)}
    pending = [t for t in tasks if t.key not in done]
    new_bad = [b for b in bad if (b["file"], b["solver"]) not in done]
    progress = Progress(total=len(pending) + len(new_bad))
    log.info(
        "%d files, %d tasks, %d already done", len(files), len(tasks), len(tasks) - len(pending)
    )
    with rows_path.open("a", encoding="utf-8") as sink:

        def record(row: dict[str, Any]) -> None:
            doc = row.pop("solution", None)
            if doc is not None and solutions != "none":
                stem = _safe(row["instance"])
                target = (
                    out / f"{stem}.json"
                    if solutions == "one"
                    else out / "solutions" / f"{stem}.{row['solver']}.json"
                )
                write_json_atomic(target, doc)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            progress.done += 1
            progress.failed += row["status"] == Status.ERROR
            if on_row is not None:
                on_row(row, progress)

        for row in new_bad:
            record(row)
        rows = execute(pending, jobs=jobs, executor=executor, scheduler=scheduler)
        try:
            for row in rows:
                record(row)
        finally:
            rows.close()
    return table(read_rows(out))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "instance"


def table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per instance x solver with the gap to the best proven bound of that instance.

    The best bound is the tightest of every row's proven bound (each already tightened by the
    problem's own bound); gap = relative excess over it (0 = proven optimal).
    """
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        latest[(r["file"], r["solver"])] = r
    frame = pd.DataFrame(
        [{k: v for k, v in r.items() if k != "stats"} for r in latest.values()],
        columns=[c for c in COLUMNS if c not in ("best_bound", "gap")],
    )
    stats = pd.DataFrame([r.get("stats") or {} for r in latest.values()], index=frame.index)
    best: dict[str, float] = {}
    for r in latest.values():
        if r["bound"] is None or r["problem"] not in registry.PROBLEMS:
            continue
        spec = registry.problem(r["problem"])
        b = best.get(r["file"])
        best[r["file"]] = stronger_bound(spec.sense, b, r["bound"])
    frame["best_bound"] = frame["file"].map(best)
    frame["gap"] = [
        relative_gap(o, None if pd.isna(b) else b, registry.problem(p).sense)
        if p in registry.PROBLEMS and o is not None and not pd.isna(o)
        else None
        for o, b, p in zip(frame["objective"], frame["best_bound"], frame["problem"], strict=True)
    ]
    frame = frame[COLUMNS]
    if not stats.empty:
        frame = pd.concat([frame, stats.add_prefix("stat_")], axis=1)
    return frame.sort_values(
        ["problem", "instance", "kind", "solver"], kind="stable", ignore_index=True
    )


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    write_text_atomic(path, frame.to_csv(index=False))


def default_jobs() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


class RunningGaps:
    """Worst gap so far of each heuristic against the best bound seen so far for its instance."""

    def __init__(self) -> None:
        self.bound: dict[str, float] = {}
        self.heuristic: dict[tuple[str, str], float] = {}
        self.sense: dict[str, str] = {}

    def add(self, row: dict[str, Any]) -> None:
        f, p = row["file"], row["problem"]
        if p not in registry.PROBLEMS:
            return
        sense = self.sense[f] = registry.problem(p).sense
        if row.get("bound") is not None:
            self.bound[f] = stronger_bound(sense, self.bound.get(f), row["bound"])
        if row.get("kind") == "heuristic" and row.get("objective") is not None:
            self.heuristic[(f, row["solver"])] = row["objective"]

    def worst(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (f, s), obj in self.heuristic.items():
            g = relative_gap(obj, self.bound.get(f), self.sense[f])  # type: ignore[arg-type]
            if g is not None:
                out[s] = max(out.get(s, 0.0), g)
        return out

    def text(self, most: int = 4) -> str:
        worst = sorted(self.worst().items(), key=lambda kv: -kv[1])[:most]
        return ", ".join(f"{s} {g:.1%}" if math.isfinite(g) else f"{s} ∞" for s, g in worst)


def progress_printer() -> tuple[Callable[[dict[str, Any], Progress], None], Callable[[], None]]:
    """A live rich progress bar on a terminal, plain log lines otherwise; returns (update, close).

    Both show done / failed / remaining and the worst heuristic gaps so far.
    """
    gaps = RunningGaps()
    if not sys.stderr.isatty():

        def plain(row: dict[str, Any], p: Progress) -> None:
            gaps.add(row)
            log.info(
                "%s | %s %s: %s %s",
                p.line(),
                row["instance"],
                row["solver"],
                row["status"],
                "" if row["objective"] is None else row["objective"],
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
    handle = None

    def update(row: dict[str, Any], p: Progress) -> None:
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


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per problem x solver: instances, optimal count, mean / worst gap, median runtime."""
    if frame.empty:
        return pd.DataFrame(
            columns=[
                "problem",
                "solver",
                "kind",
                "instances",
                "optimal",
                "mean_gap",
                "worst_gap",
                "median_s",
            ]
        )
    ok = frame[frame["status"].isin(["optimal", "feasible"])]
    out = []
    for (p, s), g in frame.groupby(["problem", "solver"], sort=True):
        good = ok[(ok["problem"] == p) & (ok["solver"] == s)]
        gaps = pd.to_numeric(good["gap"], errors="coerce").dropna()
        out.append(
            {
                "problem": p,
                "solver": s,
                "kind": g["kind"].iloc[0],
                "instances": len(g),
                "solved": len(good),
                "optimal": int((g["status"] == "optimal").sum()),
                "mean_gap": float(gaps.mean()) if len(gaps) else math.nan,
                "worst_gap": float(gaps.max()) if len(gaps) else math.nan,
                "median_s": float(pd.to_numeric(g["runtime_s"]).median()),
            }
        )
    return pd.DataFrame(out)
