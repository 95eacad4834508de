"""Batch runs: every (instance file, solver) pair is a task; each task is a pure function to a row.

Rows are appended to `DIR/rows.jsonl` as tasks finish, so a crash or kill loses only the running
solves and a rerun resumes (finished pairs are skipped unless `force`). Tasks run each in a
forked worker process, `jobs` at a time, killed past a hard deadline (`executor="process"`), in
this process (`"inline"`, for debugging), or on a Dask cluster (`"dask"`). The tables
(`results.csv`, reports) are always rebuilt from `rows.jsonl`, written atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.run import (
    load_instance,
    solution_document,
    solve,
    warm_up,
    with_capacity,
    write_json_atomic,
    write_text_atomic,
)
from tensorplan.problems.core import (
    InstanceError,
    Options,
    Status,
    relative_gap,
    stopwatch,
    stronger_bound,
)

log = logging.getLogger("tensorplan")

ROWS = "rows.jsonl"
LOCK = ".lock"
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
    "wall_s",
    "size",
    "message",
    "file",
    "key",
]


@dataclass(frozen=True)
class Row:
    """One finished (instance, solver) pair, from the worker to rows.jsonl, CSV and reports.

    `key` identifies the instance by content (its name and a hash of the file's bytes), so a
    rerun from another directory, or through another path, recognises finished pairs, and an
    edited file is solved again. `runtime_s` is the solver's own time; `wall_s` the whole task
    (load, solve, verification) as the harness measured it.
    """

    instance: str
    problem: str
    solver: str
    kind: str
    status: str
    file: str
    key: str
    objective: float | None = None
    bound: float | None = None
    runtime_s: float = 0.0
    wall_s: float = 0.0
    size: int | None = None
    message: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pair(self) -> tuple[str, str]:
        return (self.key, self.solver)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"stats": dict(self.stats)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Row:
        """A row read back from rows.jsonl; raises KeyError/TypeError on a foreign line."""
        names = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in names})
        if not (isinstance(row.key, str) and isinstance(row.solver, str) and row.key):
            raise TypeError("not a row")
        return row


@dataclass(frozen=True)
class Done:
    """What a worker hands back: the row, and the solution document when there is one."""

    row: Row
    solution: dict[str, Any] | None = None


@dataclass(frozen=True)
class Task:
    """One solve: `file` is the instance as rows show it (relative to the working directory when
    below it, so reports carry no machine paths), `path` the absolute file a worker loads."""

    file: str
    key: str
    problem: str
    solver: str
    options: Options
    capacity: int | None
    path: str

    @property
    def pair(self) -> tuple[str, str]:
        return (self.key, self.solver)


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


def instance_key(path: Path) -> str:
    """`<file stem>@<hash of its bytes>`: stable across working directories and paths."""
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        digest = "unreadable"
    return f"{path.stem}@{digest}"


def plan(
    files: Sequence[Path],
    solvers: Sequence[str] | None,
    options: Options,
    capacity: int | None = None,
) -> tuple[list[Task], list[Row]]:
    """Tasks for every file x matching solver; files that fail to load become error rows now."""
    tasks: list[Task] = []
    bad: list[Row] = []
    for f in files:
        key = instance_key(f)
        try:
            inst = load_instance(shown(f))
            if capacity is not None:
                inst = with_capacity(inst, capacity)
        except InstanceError as err:
            bad.append(
                Row(f.stem, "?", "-", "-", str(Status.ERROR), shown(f), key, message=str(err))
            )
            continue
        spec = registry.problem_of(inst)
        names = list(registry.solvers(spec.name))
        chosen = names if not solvers else [s for s in solvers if s in names]
        if solvers and not chosen:
            log.info("%s: none of the requested solvers serve %s", f.name, spec.name)
        tasks.extend(Task(shown(f), key, spec.name, s, options, capacity, str(f)) for s in chosen)
    return tasks, bad


def run_task(task: Task) -> Done:
    """Solve one (file, solver) pair: its row, with the solution document when there is one."""
    with stopwatch() as wall:
        try:
            inst = load_instance(task.path)
            if task.capacity is not None:
                inst = with_capacity(inst, task.capacity)
        except InstanceError as err:
            return Done(_failed(task, Status.ERROR, str(err)))
        spec = registry.problem_of(inst)
        kind = registry.solver(spec.name, task.solver).kind
        name = inst.name or Path(task.file).stem
        res = solve(inst, task.solver, task.options, spec=spec)
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
    )
    return Done(row, doc)


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


class StopFlag:
    """Set by the SIGINT handler; executors raise KeyboardInterrupt at their next safe point."""

    def __init__(self) -> None:
        self.hit = False

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt


def execute(
    tasks: Sequence[Task],
    *,
    jobs: int = 1,
    executor: str = "process",
    scheduler: str | None = None,
    stop: StopFlag | None = None,
) -> Iterator[Done]:
    """Yield results as tasks finish, in completion order. Closing the generator cancels the rest;
    `stop` (Ctrl-C) raises KeyboardInterrupt between results."""
    stop = stop or StopFlag()
    if not tasks:
        return
    if executor == "dask":
        yield from _execute_dask(tasks, scheduler, stop)
        return
    if executor == "inline":
        for t in tasks:
            stop.check()
            yield run_task(t)
        return
    yield from _execute_forked(tasks, max(1, jobs), stop)


def hard_deadline(task: Task) -> float:
    """Seconds after which a solve is killed: its own limit plus room to build and verify."""
    return 2 * task.options.time_limit + 30


@dataclass
class _Worker:
    proc: Any
    task: Task
    deadline: float
    tmp: str

    def stop(self) -> None:
        """Kill the worker and everything it started (its process group: CBC, ...) and remove
        its temporary directory (solver files such as PuLP's model files)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.join()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _execute_forked(tasks: Sequence[Task], jobs: int, stop: StopFlag) -> Iterator[Done]:
    """Each task in its own forked process (and process group), at most `jobs` at once; one
    that outlives its hard deadline is killed and becomes an `error` row, one that dies becomes
    an `error` row. Closing the generator (or Ctrl-C) kills the running ones with their child
    processes; finished rows are already out."""
    ctx = multiprocessing.get_context("fork")
    queue = list(reversed(tasks))
    running: dict[Any, _Worker] = {}
    try:
        while queue or running:
            stop.check()
            while queue and len(running) < jobs:
                task = queue.pop()
                tmp = tempfile.mkdtemp(prefix="tensorplan-task-")
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(task, send, tmp), daemon=True)
                proc.start()
                send.close()
                running[recv] = _Worker(proc, task, time.monotonic() + hard_deadline(task), tmp)
            wake = min(w.deadline for w in running.values()) - time.monotonic()
            for conn in mp_wait(list(running), timeout=min(max(0.0, wake), POLL_S)):
                w = running.pop(conn)
                try:
                    done = conn.recv()
                except EOFError:
                    w.proc.join()
                    done = Done(
                        _failed(w.task, Status.ERROR, f"worker died (exit code {w.proc.exitcode})")
                    )
                conn.close()
                w.stop()
                yield done
            now = time.monotonic()
            for conn, w in list(running.items()):
                if now > w.deadline:
                    w.stop()
                    conn.close()
                    del running[conn]
                    yield Done(
                        _failed(
                            w.task,
                            Status.ERROR,
                            f"killed after {hard_deadline(w.task):.0f} s "
                            f"(time limit {w.task.options.time_limit:g} s)",
                        )
                    )
    finally:
        for conn, w in running.items():
            w.stop()
            conn.close()


WARM_UP_S = 60.0  # compiling every kernel a batch uses, plus 6 s per solver run on a tiny case


def _warm_up_in_child(solvers: Mapping[str, set[str]]) -> None:
    """Build the compiled kernels (numba's on-disk cache) once, untimed, in a child process of
    its own, so the workers load them instead of each compiling inside a timed solve; a solver
    that hangs or kills its process here only ends this child."""
    if not solvers:
        return

    def body() -> None:
        _release_inherited_locks()
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for problem, names in sorted(solvers.items()):
            warm_up(problem, sorted(names))

    proc = multiprocessing.get_context("fork").Process(target=body, daemon=True)
    proc.start()
    proc.join(WARM_UP_S + 6.0 * sum(len(names) for names in solvers.values()))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.join()


POLL_S = 0.5  # the parent wakes at least this often, so Ctrl-C is acted on promptly


def _child(task: Task, conn: Any, tmp: str) -> None:
    """Worker body, in a process group of its own so that stopping it stops its solvers too.
    Ctrl-C is left to the parent; temporary files go to `tmp`, which the parent removes."""
    _release_inherited_locks()
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["TMPDIR"] = tmp
    tempfile.tempdir = tmp
    try:
        done = run_task(task)
    except BaseException as err:  # report, never hang the parent
        done = Done(_failed(task, Status.ERROR, f"worker failed: {type(err).__name__}: {err}"))
    conn.send(done)
    conn.close()


def _failed(task: Task, status: Status, message: str) -> Row:
    return Row(
        Path(task.file).stem,
        task.problem,
        task.solver,
        "-",
        str(status),
        task.file,
        task.key,
        message=message,
    )


def _execute_dask(tasks: Sequence[Task], scheduler: str | None, stop: StopFlag) -> Iterator[Done]:
    try:
        from distributed import Client, as_completed
    except ImportError:  # pragma: no cover - depends on the environment
        raise RuntimeError("the dask executor needs the extra: pip install -e '.[dask]'") from None
    if not scheduler:
        raise RuntimeError("--executor dask needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
    try:
        client = Client(scheduler, timeout=10)
    except (OSError, TimeoutError) as err:
        raise RuntimeError(f"cannot reach the Dask scheduler {scheduler}: {err}") from None
    with client:
        futures = client.map(run_task, list(tasks), pure=False)
        try:
            for fut in as_completed(futures):
                stop.check()
                yield fut.result()
        finally:
            client.cancel(futures)


# --- the rows file ------------------------------------------------------------------------------


def read_rows(outdir: Path) -> list[Row]:
    """Rows recorded so far. A torn line (a kill mid-write) is skipped: its task is pending again
    and is solved anew by the next run, which also repairs the file (see `RowsFile`)."""
    return RowsFile.parse(Path(outdir) / ROWS)[0]


_LOCKS: set[int] = set()  # descriptors of the output-directory locks this process holds


def _release_inherited_locks() -> None:
    """In a forked child: close the parent's lock descriptors (a flock belongs to the open file,
    which a child shares), and ask the kernel to end this child when the parent dies, so that a
    kill -9 of a run leaves no worker behind (Linux; elsewhere the worker ends after its task)."""
    for fd in list(_LOCKS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCKS.clear()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class RowsFile:
    """rows.jsonl of one output directory, held under an exclusive lock while a run writes it.

    Opening it takes `DIR/.lock` (a second run into the same directory fails at once, naming
    the holder) and repairs the file if its last write was torn, so that the next row never
    glues onto a fragment. Each row is written whole and flushed.
    """

    def __init__(self, outdir: Path) -> None:
        self.path = outdir / ROWS
        self._lock = (outdir / LOCK).open("a+", encoding="utf-8")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "another process"
            self._lock.close()
            raise RuntimeError(
                f"{outdir}: another run is writing here ({holder}); wait for it or use another -o"
            ) from None
        _LOCKS.add(self._lock.fileno())
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"pid {os.getpid()}\n")
        self._lock.flush()
        self._sink: Any = None
        rows, damage = self.parse(self.path)
        if damage:
            log.warning("%s: repaired a torn write; unfinished tasks run again", self.path)
            self.rewrite(rows)
        self._sink = self.path.open("a", encoding="utf-8")

    @staticmethod
    def parse(path: Path) -> tuple[list[Row], int]:
        """(rows, damage): damage counts unreadable lines, plus one when the file does not end
        with a newline (the next append would glue onto it); either needs a repair."""
        if not path.exists():
            return [], 0
        rows, damage = [], 0
        text = path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            try:
                rows.append(Row.from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError, AttributeError):
                damage += bool(line.strip())
        if text and not text.endswith("\n"):
            damage += 1
        return rows, damage

    def rewrite(self, rows: Iterable[Row]) -> None:
        """Replace the file's rows (atomically); appends then go to the new file."""
        write_text_atomic(self.path, "".join(json.dumps(r.to_json()) + "\n" for r in rows))
        if self._sink is not None:
            self._sink.close()
            self._sink = self.path.open("a", encoding="utf-8")

    def append(self, row: Row) -> None:
        self._sink.write(json.dumps(row.to_json()) + "\n")
        self._sink.flush()

    def close(self) -> None:
        self._sink.close()
        _LOCKS.discard(self._lock.fileno())
        self._lock.close()  # releases the lock

    def __enter__(self) -> RowsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def solution_path(
    out: Path, problem: str, instance: str, key: str, solver: str, solutions: str = "all"
) -> Path:
    """Where a row's solution file goes; names cannot collide across problems or files.

    "all": DIR/solutions/<problem>/<instance>.<hash>.<solver>.json; "one" (the batch verb):
    DIR/<problem>/<instance>.<hash>.json, the hash being the instance key's.
    """
    stem = f"{_safe(instance)}.{key.rpartition('@')[2][:8]}"
    if solutions == "one":
        return out / problem / f"{stem}.json"
    return out / "solutions" / problem / f"{stem}.{_safe(solver)}.json"


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
    """Run every pending task, appending rows; returns the full table (see `table`).

    `solutions`: "all" or "one" (see `solution_path`), or "none". Raises InstanceError when a
    path does not exist or nothing is to be solved, RuntimeError when another run holds DIR.
    """
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise InstanceError("-o", "is a file, not a directory", out)
    files = discover(paths)
    tasks, bad = plan(files, solvers, options, capacity)
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
        progress = Progress(total=len(pending) + len(new_bad))
        log.info(
            "%d files, %d tasks, %d already done", len(files), len(tasks), len(tasks) - len(pending)
        )

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
        if executor == "process":
            _warm_up_in_child({t.problem: {u.solver for u in pending if u.problem == t.problem}
                               for t in pending})  # fmt: skip
        with interrupt_at_safe_points() as stop:
            results = execute(pending, jobs=jobs, executor=executor, scheduler=scheduler, stop=stop)
            try:
                for result in results:
                    record(result)
                    stop.check()
            finally:
                results.close()
    return table(read_rows(out))


@contextlib.contextmanager
def interrupt_at_safe_points() -> Iterator[StopFlag]:
    """Ctrl-C during a run: finish writing the current row, stop the workers, then raise.

    The first SIGINT only sets the flag; the executors turn it into KeyboardInterrupt between
    results (the parent wakes every `POLL_S`), so the signal is never swallowed inside a
    library's cleanup code and never tears a row. A second Ctrl-C interrupts at once.
    """
    stop = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        if stop.hit:
            raise KeyboardInterrupt
        stop.hit = True

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "instance"


def table(rows: Sequence[Row]) -> pd.DataFrame:
    """One row per instance x solver with the gap to the best proven bound of that instance.

    The latest row of each (instance key, solver) pair counts. The best bound is the tightest of
    every row's proven bound (each already tightened by the problem's own bound); gap = relative
    excess over it (0 = proven optimal).
    """
    latest = {r.pair: r for r in rows}
    frame = pd.DataFrame(
        [{k: v for k, v in r.to_json().items() if k != "stats"} for r in latest.values()],
        columns=[c for c in COLUMNS if c not in ("best_bound", "gap")],
    )
    stats = pd.DataFrame([dict(r.stats) for r in latest.values()], index=frame.index)
    best: dict[str, float] = {}
    for r in latest.values():
        if r.bound is not None and r.problem in registry.PROBLEMS:
            best[r.key] = stronger_bound(
                registry.problem(r.problem).sense, best.get(r.key), r.bound
            )
    frame["best_bound"] = frame["key"].map(best)
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
        ["problem", "instance", "kind", "solver", "file"], kind="stable", ignore_index=True
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
            g = relative_gap(obj, self.bound.get(f), self.sense[f])  # type: ignore[arg-type]
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
    handle = None

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
