"""Executors of a batch: they run `tasks.run_task` and yield each `Done` as it finishes.

- `"process"`: each task in a forked worker of its own process group, `jobs` at a time; one past
  its hard deadline is killed with everything it started (CBC, ...) and becomes an `error` row;
- `"inline"`: in this process, one after the other (for debugging);
- `"dask"`: on a Dask cluster (`--scheduler ADDRESS`).

Ctrl-C is turned into KeyboardInterrupt between results (`interrupt_at_safe_points`), so a row
is never torn and the workers are stopped before the error propagates.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from multiprocessing.process import BaseProcess
from typing import Any, cast

from tensorplan.harness.rows import close_inherited_locks
from tensorplan.harness.run import warm_up
from tensorplan.harness.tasks import Done, Task, failed_row, run_task

POLL_S = 0.5  # the parent wakes at least this often, so Ctrl-C is acted on promptly
WARM_UP_S = 60.0  # compiling every kernel a batch uses, plus 6 s per solver run on a tiny case


class StopFlag:
    """Set by the SIGINT handler; executors raise KeyboardInterrupt at their next safe point."""

    def __init__(self) -> None:
        self.hit = False

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt


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


def execute(
    tasks: Sequence[Task],
    *,
    jobs: int = 1,
    executor: str = "process",
    scheduler: str | None = None,
    stop: StopFlag | None = None,
) -> Generator[Done, None, None]:
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


# --- forked workers ------------------------------------------------------------------------------


def hard_deadline(task: Task) -> float:
    """Seconds after which a solve is killed: its own limit plus room to build and verify."""
    return 2 * task.options.time_limit + 30


@dataclass
class _Worker:
    proc: BaseProcess
    conn: Connection
    task: Task
    deadline: float
    tmp: str

    def stop(self) -> None:
        """Kill the worker and everything it started (its process group: CBC, ...), close its
        pipe and remove its temporary directory (solver files such as PuLP's model files)."""
        _kill_group(self.proc)
        self.conn.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _kill_group(proc: BaseProcess) -> None:
    if proc.pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.join()


def _execute_forked(tasks: Sequence[Task], jobs: int, stop: StopFlag) -> Iterator[Done]:
    """Each task in its own forked process (and process group), at most `jobs` at once; one
    that outlives its hard deadline is killed and becomes an `error` row, one that dies becomes
    an `error` row. Closing the generator (or Ctrl-C) kills the running ones with their child
    processes; finished rows are already out."""
    queue = list(reversed(tasks))
    running: dict[Connection, _Worker] = {}
    try:
        while queue or running:
            stop.check()
            while queue and len(running) < jobs:
                worker = _start(queue.pop())
                running[worker.conn] = worker
            wake = min(w.deadline for w in running.values()) - time.monotonic()
            for ready in mp_wait(list(running), timeout=min(max(0.0, wake), POLL_S)):
                yield _collect(running.pop(cast(Connection, ready)))
            now = time.monotonic()
            for late in [w for w in running.values() if now > w.deadline]:
                del running[late.conn]
                late.stop()
                limit = late.task.options.time_limit
                message = f"killed after {hard_deadline(late.task):.0f} s (time limit {limit:g} s)"
                yield Done(failed_row(late.task, message))
    finally:
        for w in running.values():
            w.stop()


def _start(task: Task) -> _Worker:
    """Fork the worker of `task`, with a temporary directory and a pipe back of its own."""
    ctx = multiprocessing.get_context("fork")
    tmp = tempfile.mkdtemp(prefix="tensorplan-task-")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(task, send, tmp), daemon=True)
    proc.start()
    send.close()
    return _Worker(proc, recv, task, time.monotonic() + hard_deadline(task), tmp)


def _collect(w: _Worker) -> Done:
    """The result a finished worker sent, or an `error` row when it died without sending one."""
    try:
        done: Done = w.conn.recv()
    except EOFError:
        w.proc.join()
        done = Done(failed_row(w.task, f"worker died (exit code {w.proc.exitcode})"))
    w.stop()
    return done


def _own_process_group() -> None:
    """In a forked child: let go of the parent's locks, end with the parent (Linux), and lead a
    process group of its own that Ctrl-C does not reach, so the parent decides when it stops."""
    close_inherited_locks()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a kill -9 of the run ends its workers
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child(task: Task, conn: Connection, tmp: str) -> None:
    """Worker body, in a process group of its own so that stopping it stops its solvers too.
    Ctrl-C is left to the parent; temporary files go to `tmp`, which the parent removes."""
    _own_process_group()
    os.environ["TMPDIR"] = tmp
    tempfile.tempdir = tmp
    try:
        done = run_task(task)
    except BaseException as err:  # report, never hang the parent
        done = Done(failed_row(task, f"worker failed: {type(err).__name__}: {err}"))
    conn.send(done)
    conn.close()


def warm_up_in_child(solvers: Mapping[str, set[str]]) -> None:
    """Build the compiled kernels (numba's on-disk cache) once, untimed, in a child process of
    its own, so the workers load them instead of each compiling inside a timed solve; a solver
    that hangs or kills its process here only ends this child."""
    if not solvers:
        return

    def body() -> None:
        _own_process_group()
        for problem, names in sorted(solvers.items()):
            warm_up(problem, sorted(names))

    proc = multiprocessing.get_context("fork").Process(target=body, daemon=True)
    proc.start()
    proc.join(WARM_UP_S + 6.0 * sum(len(names) for names in solvers.values()))
    _kill_group(proc)


# --- Dask ------------------------------------------------------------------------------------


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
